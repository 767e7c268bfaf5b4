"""The Talker → Code2Wav connector (python_backends/ar/connector.py): chunks planned as
frames arrive, each as soon as its frames and right context are in."""

import pytest

from python_backends.ar.connector import HURRY_FRAMES, FrameChunker
from python_backends.chunking import ChunkParams

PARAMS = ChunkParams(initial_frames=2, frames=8, left_context=3, right_context=2)


def run(params, arrivals):
    """Push frames in the given batches, then finish: [(frames arrived, chunk)]."""
    chunker, out = FrameChunker(params), []
    for n in arrivals:
        out += [(chunker.arrived, chunk) for chunk in chunker.push(n)]
    return out + [(chunker.arrived, chunk) for chunk in chunker.finish()]


@pytest.mark.parametrize("total", [1, 3, 4, 17, 40])
@pytest.mark.parametrize("batch", [1, 3])
def test_chunks_tile_the_frames_and_each_comes_as_soon_as_it_can(total, batch):
    arrivals = [batch] * (total // batch) + ([total % batch] if total % batch else [])
    out = run(PARAMS, arrivals)
    chunks = [chunk for _, chunk in out]
    assert [c.start for c in chunks] == [0] + [c.end for c in chunks[:-1]]
    assert chunks[-1].end == total
    for arrived, chunk in out[:-1]:
        assert chunk.window_end == chunk.end + PARAMS.right_context <= arrived
        # Not a batch later than needed: the batch before lacked the window's frames.
        assert arrived - batch < chunk.window_end
    for chunk in chunks:
        assert chunk.window_start == max(0, chunk.start - PARAMS.left_context)
    assert out[-1][1].window_end == total


def test_sizes_grow_from_the_first_chunk_to_the_largest():
    chunks = [chunk for _, chunk in run(PARAMS, [1] * 40)]
    assert [c.frames for c in chunks] == [2, 4, 8, 8, 8, 8, 2]


def test_nothing_arrived_nothing_to_decode():
    assert run(PARAMS, []) == []


def test_a_hurried_push_makes_the_frames_in_hand_a_chunk_and_the_next_keeps_its_size():
    chunker = FrameChunker(PARAMS)
    assert [c.frames for c in chunker.push(10)] == [2, 4]  # 6 spoken; 2 more in hand with their right context
    assert chunker.push(HURRY_FRAMES - 3, hurry=True) == []  # 3 in hand: too few
    (cut,) = chunker.push(1, hurry=True)
    assert (cut.start, cut.end, cut.window_end) == (6, 6 + HURRY_FRAMES, chunker.arrived)
    # The next is 8 frames, with its right context: due at 10 + 8 + 2 frames in.
    assert chunker.push(10 + 8 + 2 - 1 - chunker.arrived) == [] and [c.frames for c in chunker.push(1)] == [8]
    assert chunker.push(5) == []  # unhurried, frames wait for the chunk's size
