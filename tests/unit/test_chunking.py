import itertools

import pytest

from contract.models import CHUNK_PARAMS, VOCODER_BUCKETS
from python_backends.chunking import (
    GROW_AHEAD_S,
    GROWTH,
    bucket_frames,
    burst_first_frames,
    chunk_sizes,
    first_chunk_frames,
    flow_pieces,
    grown_size,
    head_frames,
    next_chunk,
    sized_for_load,
)
from python_backends.inputs import read_chunk_params


def plan_chunks(frames, sizes, left, right):
    """A sentence cut as the tts stage cuts it while the stream is not ahead."""
    chunks = [next_chunk(0, frames, next(sizes), left, right)]
    while chunks[-1].end < frames:
        chunks.append(next_chunk(chunks[-1].end, frames, next(sizes), left, right))
    return chunks


def test_chunk_sizes_double_from_the_first_up_to_the_cap():
    assert list(itertools.islice(chunk_sizes(8, 64), 6)) == [8, 16, 32, 64, 64, 64]
    assert list(itertools.islice(chunk_sizes(100, 64), 2)) == [64, 64]


@pytest.mark.parametrize("frames", [1, 7, 8, 9, 30, 63, 200, 1000])
@pytest.mark.parametrize("left,right", [(0, 0), (16, 8), (64, 64)])
def test_chunks_cover_the_sentence_once_with_clipped_context(frames, left, right):
    chunks = plan_chunks(frames, chunk_sizes(8, 64), left, right)
    assert chunks[0].start == 0 and chunks[-1].end == frames
    for a, b in zip(chunks, chunks[1:]):
        assert a.end == b.start
    for c in chunks:
        assert c.window_start == max(0, c.start - left)
        assert c.window_end == min(frames, c.end + right)
        assert c.lead_frames == c.start - c.window_start


def test_short_remainder_is_merged_into_the_last_chunk():
    chunks = plan_chunks(8 + 16 + 3, chunk_sizes(8, 64), 16, 8)
    assert [c.frames for c in chunks] == [8, 19]


def test_sizes_continue_across_sentences():
    sizes = chunk_sizes(8, 64)
    first = plan_chunks(8, sizes, 0, 0)
    second = plan_chunks(100, sizes, 0, 0)
    assert [c.frames for c in first] == [8]
    assert [c.frames for c in second] == [16, 32, 52]


def test_buckets_hold_the_window():
    for frames in range(1, 1000):
        bucket = bucket_frames(frames)
        assert bucket >= frames
        if frames <= VOCODER_BUCKETS[-1]:
            assert bucket in VOCODER_BUCKETS
    assert len({bucket_frames(n) for n in range(1, 1000)}) < 20


def test_the_head_holds_the_windows_of_the_first_two_chunks():
    assert head_frames(8, 128, 8) == 8 + 16 + 8
    assert head_frames(4, 6, 0) == 4 + 6
    chunks = plan_chunks(200, chunk_sizes(8, 128), 8, 8)
    assert chunks[1].window_end == head_frames(8, 128, 8)


@pytest.mark.parametrize("frames,head,pieces", [
    (200, 32, [(0, 32), (32, 200)]),
    (49, 32, [(0, 32), (32, 49)]),
    (48, 32, [(0, 48)]),  # a second piece would recompute as many frames as it adds
    (20, 32, [(0, 20)]),
    (200, 0, [(0, 200)]),
])
def test_flow_pieces(frames, head, pieces):
    assert flow_pieces(frames, head, 16) == pieces


def test_the_first_chunk_grows_under_load_unless_the_client_chose_it():
    assert first_chunk_frames(8, asked=False, loaded=False) == 8
    assert first_chunk_frames(8, asked=False, loaded=True) == 64
    assert first_chunk_frames(8, asked=True, loaded=True) == 8


def test_a_first_chunk_is_a_whole_chunk_once_the_streams_starting_with_it_fill_the_slots():
    assert burst_first_frames(others_starting=2, slots=2, largest=128) == 128
    assert burst_first_frames(others_starting=1, slots=2, largest=128) == 0
    assert burst_first_frames(others_starting=0, slots=1, largest=128) == 0  # alone


def test_a_stream_is_sized_for_load_with_a_head_only_while_unloaded():
    defaults = read_chunk_params({}, CHUNK_PARAMS)  # initial 8, chunk 128, right context 8
    params, head = sized_for_load(defaults, asked=False, loaded=False)
    assert (params, head) == (defaults, 8 + 16 + 8)  # the first two chunks and the second's look-ahead
    params, head = sized_for_load(defaults, asked=False, loaded=True)
    assert (params.initial_frames, params.frames, head) == (64, 128, 0)
    params, head = sized_for_load(defaults, asked=True, loaded=True)
    assert (params.initial_frames, head) == (8, 0)


def test_chunks_grow_only_while_the_listener_has_audio_in_hand():
    assert grown_size(16, 128, ahead_s=0.05) == 16  # a new stream: small first chunks
    assert grown_size(128, 128, ahead_s=GROW_AHEAD_S - 0.01) == 128
    assert grown_size(16, 128, ahead_s=GROW_AHEAD_S) == GROWTH * 128
    assert grown_size(1000, 128, ahead_s=10.0) == 1000  # a client's own larger size stands


def test_a_grown_chunk_reaches_the_sentence_end_where_half_of_it_would_remain():
    grown = GROWTH * 128
    chunk = next_chunk(128, 128 + grown + grown // 2 - 1, grown, 8, 8)
    assert (chunk.end, chunk.window_end) == (128 + grown + grown // 2 - 1, chunk.end)  # no right context at the end
