"""Codebook layouts of the autoregressive family (python_backends/ar/layouts.py): frames
of codes to tokens and back, and the tokens allowed at each step."""

import numpy as np
import pytest

from python_backends.ar.layouts import (
    NO_TOKEN,
    Allowed,
    Bounds,
    CodecTokens,
    FrameAssembler,
    Layout,
    allowed,
)


def lay_out(fmt: CodecTokens, frames: np.ndarray) -> list[int]:
    """The tokens a Talker writes for `frames` ([F, K] codes, F ≥ 1), the end token
    last: the inverse of FrameAssembler, written apart from it so that each checks the other."""
    frames = np.asarray(frames)
    count, k = frames.shape
    if fmt.layout is Layout.FLATTENED:
        return [fmt.token(p, int(frames[f, p])) for f in range(count) for p in range(k)] + [fmt.end_token]
    tokens = [
        fmt.token(p, int(frames[step - p, p])) if 0 <= step - p < count else fmt.pad_token
        for step in range(count + k - 1)
        for p in range(k)
    ]
    return tokens + [fmt.end_token]


# Orpheus: SNAC's 7 codes a frame as Llama's added tokens <custom_token_N> = 128256 + N,
# position p's code c at N = 10 + p·4096 + c; <custom_token_2> (128258) ends the speech.
ORPHEUS = CodecTokens(positions=7, codebook_size=4096, first_code_token=128266, end_token=128258)
DELAY = CodecTokens(positions=4, codebook_size=16, first_code_token=100, end_token=2, layout=Layout.DELAY, pad_token=3)


def frames(count, fmt, seed=0):
    return np.random.default_rng(seed).integers(0, fmt.codebook_size, (count, fmt.positions))


def assemble(fmt, tokens):
    """Each token's frames out of a fresh assembler."""
    assembler = FrameAssembler(fmt)
    return [assembler.push(t) for t in tokens], assembler


def test_orpheus_numbers_codes_as_its_decoder_reads_them():
    # orpheus_tts turns <custom_token_N> at index i into N - 10 - (i % 7) * 4096.
    for index, code in ((0, 0), (3, 5), (13, 4095)):
        n = ORPHEUS.token(index % 7, code) - 128256
        assert n - 10 - (index % 7) * 4096 == code
    with pytest.raises(ValueError):
        ORPHEUS.code(1, ORPHEUS.token(0, 7))


@pytest.mark.parametrize("fmt", [ORPHEUS, DELAY], ids=["flattened", "delay"])
@pytest.mark.parametrize("count", [1, 2, 9])
def test_frames_come_back_whole_each_at_its_last_token(fmt, count):
    codes = frames(count, fmt, seed=count)
    tokens = lay_out(fmt, codes)
    out, assembler = assemble(fmt, tokens)
    assert np.array_equal(np.concatenate(out), codes)
    assert assembler.ended and tokens[-1] == fmt.end_token
    # A frame is out as soon as its last position's token is in.
    at = [i for i, x in enumerate(out) if len(x)]
    if fmt.layout is Layout.FLATTENED:
        assert at == [f * 7 + 6 for f in range(count)]
    else:
        assert at == [(f + 3) * 4 + 3 for f in range(count)]


@pytest.mark.parametrize("fmt", [ORPHEUS, DELAY], ids=["flattened", "delay"])
def test_the_allowed_tokens_admit_the_layout_and_only_it(fmt):
    tokens = lay_out(fmt, frames(5, fmt))
    assembler = FrameAssembler(fmt)
    for token in tokens:
        may = allowed(fmt, assembler.written, assembler.pad_from)
        bounds = may.bounds(fmt)
        assert token in permitted(bounds)
        # One of the codes permitted here, the end token or the pad, is all there is.
        others = [t for t in (fmt.end_token, fmt.pad_token, fmt.token(0, 0), fmt.token(1, 0))
                  if t not in permitted(bounds)]
        for other in others:
            with pytest.raises(ValueError):
                FrameAssembler(fmt, assembler.written, pad_from=assembler.pad_from).push(other)
        assembler.push(token)


def permitted(bounds: Bounds) -> set[int]:
    """The tokens a logits mask with these bounds lets through."""
    return set(range(bounds.lo, bounds.hi)) | {bounds.end, bounds.pad} - {NO_TOKEN}


def test_flattened_speech_ends_only_between_frames():
    assert allowed(ORPHEUS, 0) == Allowed(ORPHEUS.code_range(0))  # not before a frame
    assert allowed(ORPHEUS, 7).end and allowed(ORPHEUS, 14).end
    assert not any(allowed(ORPHEUS, n).end for n in range(8, 14))
    assembler = FrameAssembler(ORPHEUS)
    for token in lay_out(ORPHEUS, frames(1, ORPHEUS))[:3]:
        assembler.push(token)
    with pytest.raises(ValueError, match="may not follow 3"):
        assembler.push(ORPHEUS.end_token)


def test_the_delay_pattern_pads_before_the_first_frame_and_finishes_the_last():
    assert [allowed(DELAY, n) for n in range(1, 4)] == [Allowed(range(0), pad=True)] * 3  # step 0, positions 1-3
    assert allowed(DELAY, 0) == Allowed(DELAY.code_range(0))  # at least one frame
    assert allowed(DELAY, 4) == Allowed(DELAY.code_range(0), pad=True)  # step 1: position 0 may end the speech
    # Speech ended at step 2 (position 0 padded): positions finish frames 0 and 1, then the end.
    assert allowed(DELAY, 9, pad_from=2) == Allowed(DELAY.code_range(1))  # step 2, position 1: frame 1
    assert allowed(DELAY, 10, pad_from=2) == Allowed(DELAY.code_range(2))  # step 2, position 2: frame 0
    assert allowed(DELAY, 13, pad_from=2) == Allowed(range(0), pad=True)  # step 3, position 1: frame 2, none
    assert not allowed(DELAY, 16, pad_from=2).end  # step 4: position 3 still owes frame 1
    assert allowed(DELAY, 5 * 4, pad_from=2) == Allowed(range(0), end=True)


def test_a_token_after_the_end_is_refused():
    _, assembler = assemble(ORPHEUS, lay_out(ORPHEUS, frames(1, ORPHEUS)))
    with pytest.raises(ValueError, match="after the end"):
        assembler.push(ORPHEUS.token(0, 0))
