"""Word timings from the acoustic stage's per-phoneme durations. Pure functions.

espeak-ng's words are not always the text's words ("42" is spoken as two, "$5" was
rewritten to "5 dollars"), so text words are matched to the spoken words one to one
when the counts agree, and otherwise spread over the spoken time in proportion to
their length in characters. Either way the timings are monotonic and cover every word.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\S+")


def stretch_durations(durations: np.ndarray, ratio: float) -> np.ndarray:
    """Frames per phoneme with every phoneme boundary moved to `ratio` times its frame,
    rounded: the total is round(ratio × total), so audio lengths follow `speed` to within
    a frame (scaling Piper's durations before its per-phoneme ceil cannot go below one
    frame a phoneme, so high speeds came out too slow). A phoneme may get no frame."""
    if ratio == 1:
        return durations
    ends = np.rint(np.cumsum(durations) * ratio).astype(np.int64)
    ends[-1] = max(ends[-1], 1)  # a sentence has a frame at least, as in Piper
    return np.diff(ends, prepend=0).astype(np.int32)


def text_words(text: str) -> list[re.Match[str]]:
    """The words of `text`: runs of non-space with a letter or digit in them."""
    return [m for m in _WORD.finditer(text) if any(ch.isalnum() for ch in m.group())]


def spoken_words(ids: Sequence[int], durations: Sequence[int], separators: set[int], pad: int) -> list[tuple[int, int]]:
    """[start, end) frames of each spoken word: from its first phoneme to the end of the
    pad after its last, within each run of ids between word separators (space, BOS, EOS)."""
    words, start, end, frame = [], None, 0, 0
    for symbol, frames in zip(ids, durations, strict=True):
        if symbol in separators:
            if start is not None:
                words.append((start, end))
                start = None
        elif symbol != pad or start is not None:
            start = frame if start is None else start
            end = frame + frames
        frame += frames
    if start is not None:
        words.append((start, end))
    return words


def align(lengths: Sequence[int], spoken: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """[start, end) frames for text words of the given character lengths."""
    if not lengths or not spoken:
        return [(0, 0)] * len(lengths)
    if len(lengths) == len(spoken):
        return list(spoken)
    # Map a fraction of the text's characters to the same fraction of spoken time.
    spoken_ends = []
    total = 0
    for start, end in spoken:
        total += end - start
        spoken_ends.append(total)

    def frame_at(fraction: float) -> int:
        t = fraction * total
        i = min(bisect.bisect_left(spoken_ends, t), len(spoken) - 1)
        before = spoken_ends[i] - (spoken[i][1] - spoken[i][0])
        return round(spoken[i][0] + (t - before))

    chars = sum(lengths)
    timings, done = [], 0
    for n in lengths:
        timings.append((frame_at(done / chars), frame_at((done + n) / chars)))
        done += n
    return timings


def word_timings(
    text: str, ids: Sequence[int], durations: Sequence[int], separators: set[int], pad: int
) -> list[tuple[str, int, int]]:
    """(word, start frame, end frame) for every word of `text`."""
    words = text_words(text)
    frames = align([len(w.group()) for w in words], spoken_words(ids, durations, separators, pad))
    return [(w.group(), a, b) for w, (a, b) in zip(words, frames, strict=True)]
