"""How a Talker's token stream holds frames of codec codes, as pure functions.

A codec frame is K codes, one per position (a codebook, or a slot of one: Orpheus's
7 positions hold SNAC's 3 codebooks 1 + 2 + 4 times). A language model writes one token
per step, so the frame is laid out over K steps in one of two ways:

- **flattened**: frame f's K codes in position order at steps f·K … f·K + K − 1
  (Orpheus writes SNAC codes so). The end token may come only between frames.
- **delay pattern**: at step s, position k holds frame s − k's code (MusicGen and
  Parler-TTS delay codebook k by k steps), written as K tokens per step. Codes of frames
  before the first and after the last are the pad token; after the last frame's code
  at position 0 (the first pad there, at step F), the K − 1 steps that finish the frames
  under way follow, then the end token.

Each position's codes are their own token range: position k's code c is token
``first_code_token + k · codebook_size + c`` (as Orpheus numbers them), so one
vocabulary holds them apart. `allowed` gives, for the tokens written so far, the tokens
that may come next: what a logits processor lets through. `FrameAssembler` turns tokens,
as they arrive, into complete frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

import numpy as np


class Layout(Enum):
    FLATTENED = "flattened"
    DELAY = "delay"


@dataclass(frozen=True)
class CodecTokens:
    """Where codec codes live in a Talker's vocabulary, and how frames are laid out."""

    positions: int  # K: codes per frame
    codebook_size: int  # codes per position
    first_code_token: int  # token of position 0's code 0
    end_token: int  # ends the speech
    layout: Layout = Layout.FLATTENED
    pad_token: int | None = None  # the delay pattern's filler; required for it

    def __post_init__(self) -> None:
        if self.layout is Layout.DELAY and (self.pad_token is None or self.positions < 2):
            raise ValueError("the delay pattern needs a pad token and two positions at least")

    def token(self, position: int, code: int) -> int:
        return self.first_code_token + position * self.codebook_size + code

    def code(self, position: int, token: int) -> int:
        """The code `token` holds at `position`; ValueError if it is not one of that position's."""
        code = token - self.token(position, 0)
        if not 0 <= code < self.codebook_size:
            raise ValueError(f"token {token} is not a code of position {position}")
        return code

    def code_range(self, position: int) -> range:
        return range(self.token(position, 0), self.token(position, self.codebook_size))


NO_TOKEN = -1  # in Bounds: the end or pad token is not allowed


class Bounds(NamedTuple):
    """`Allowed` as a logits mask takes it: codes [lo, hi), the end token and the pad
    token (NO_TOKEN where not allowed)."""

    lo: int
    hi: int
    end: int
    pad: int


@dataclass(frozen=True)
class Allowed:
    """The tokens that may come next: a range of codes, and/or the end or pad token."""

    codes: range
    end: bool = False
    pad: bool = False

    def bounds(self, fmt: CodecTokens) -> Bounds:
        end, pad = fmt.end_token if self.end else NO_TOKEN, fmt.pad_token if self.pad else NO_TOKEN
        return Bounds(self.codes.start, self.codes.stop, end, pad)


ENDING = Allowed(range(0), end=True)  # for a sequence that must end now


def allowed(fmt: CodecTokens, written: int, pad_from: int | None = None) -> Allowed:
    """What may follow `written` codec tokens. For the delay pattern, `pad_from` is the
    step F whose position-0 token was the first pad after speech (None: not yet)."""
    position = written % fmt.positions
    if fmt.layout is Layout.FLATTENED:
        return Allowed(fmt.code_range(position), end=position == 0 and written > 0)
    step = written // fmt.positions
    frame = step - position
    if frame < 0:  # before the first frame
        return Allowed(range(0), pad=True)
    if pad_from is None:  # speech goes on; position 0 may end it, after one frame at least
        return Allowed(fmt.code_range(position), pad=position == 0 and step > 0)
    if position == 0 and step == pad_from + fmt.positions - 1:
        return Allowed(range(0), end=True)
    if frame >= pad_from:  # after the last frame
        return Allowed(range(0), pad=True)
    return Allowed(fmt.code_range(position))


@dataclass
class FrameAssembler:
    """Tokens in, complete frames out, as the Talker writes them (sans I/O).

    `push` takes the next token and returns the frames it completed ([frames, K] int64
    codes: none or one). A token the layout does not allow there raises ValueError: a
    Talker run without the logits processor can write anything."""

    fmt: CodecTokens
    written: int = 0
    ended: bool = False
    pad_from: int | None = None  # delay pattern: the step of the first pad after speech
    _pending: dict[int, np.ndarray] = field(default_factory=dict)  # frame → its codes so far

    def push(self, token: int) -> np.ndarray:
        if self.ended:
            raise ValueError("a token after the end token")
        fmt = self.fmt
        may = allowed(fmt, self.written, self.pad_from)
        step, position = divmod(self.written, fmt.positions)
        self.written += 1
        if may.end and token == fmt.end_token:
            self.ended = True
            return self._none()
        if may.pad and token == fmt.pad_token:
            if position == 0 and step > 0 and self.pad_from is None:
                self.pad_from = step
            return self._none()
        if token not in may.codes:
            raise ValueError(f"token {token} may not follow {self.written - 1} codec tokens")
        frame = step if fmt.layout is Layout.FLATTENED else step - position
        codes = self._pending.setdefault(frame, np.full(fmt.positions, -1, dtype=np.int64))
        codes[position] = fmt.code(position, token)
        # A frame's last position is always its last token, in both layouts.
        return self._pending.pop(frame)[None] if position == fmt.positions - 1 else self._none()

    def _none(self) -> np.ndarray:
        return np.empty((0, self.fmt.positions), dtype=np.int64)
