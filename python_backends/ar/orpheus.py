"""The Orpheus format (pure): a Llama that writes SNAC codes as added tokens.

Orpheus's tokenizer adds `<custom_token_N>` after Llama-3's vocabulary (N = 0 at id
128,256; `base` here, read from the tokenizer so a smaller test vocabulary works the
same). N = 1 … 9 are control tokens; N = 10 + p·4096 + c is code c at position p of a
7-code frame (flattened layout). A frame holds SNAC's three codebooks at their own
rates, 1 + 2 + 4 codes, in the order Orpheus's decoder reads them:

    position: 0    1    2    3    4    5    6
    code:     a0   b0   c0   c1   b1   c2   c3      (a, b, c: SNAC codebooks 0, 1, 2)

One frame is 4 of SNAC's finest steps: 2,048 samples, 85.3 ms at 24 kHz.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract import models as c
from python_backends.ar.layouts import CodecTokens

POSITIONS = 7
CODEBOOK_SIZE = 4096
SAMPLES_PER_FRAME = 2048  # SNAC 24 kHz: hop 512 × 4 finest steps
SAMPLE_RATE = c.AR_SAMPLE_RATE
# Offsets from <custom_token_0>.
START_OF_SPEECH, END_OF_SPEECH, START_OF_HUMAN, END_OF_HUMAN, START_OF_AI = 1, 2, 3, 4, 5
FIRST_CODE = 10
# Which SNAC codebook, and which of its codes in the frame, each position holds.
CODEBOOK_OF_POSITION = (0, 1, 2, 2, 1, 2, 2)
INDEX_IN_CODEBOOK = (0, 0, 0, 1, 1, 2, 3)


@dataclass(frozen=True)
class OrpheusTokens:
    """An Orpheus tokenizer's special ids: `base` is <custom_token_0>'s, `eot` <|eot_id|>'s."""

    base: int
    eot: int

    @property
    def codec(self) -> CodecTokens:
        return CodecTokens(POSITIONS, CODEBOOK_SIZE, self.base + FIRST_CODE, self.base + END_OF_SPEECH)

    def prompt(self, text_ids: list[int]) -> list[int]:
        """The Talker's prompt for `text_ids` (the tokenized "voice: text", its BOS first):
        Orpheus's human turn, then the start of its reply and of speech, so that every
        token the Talker writes is a code or the end of speech."""
        return ([self.base + START_OF_HUMAN, *text_ids, self.eot, self.base + END_OF_HUMAN,
                 self.base + START_OF_AI, self.base + START_OF_SPEECH])


# Speech runs at about 0.85 frames per character of English text; a Talker that goes on
# past twice that (an untrained one, or a trained one babbling, a known failure of
# codec LMs) is cut there, so one sentence cannot hold a stream for MAX_FRAMES.
FRAMES_PER_CHARACTER_LIMIT = 2
FRAMES_LIMIT_FLOOR = 12  # a second of audio, for the shortest texts


def frame_budget(text: str, max_frames: int) -> int:
    """The most frames the Talker may write for `text`: its length's limit, or
    `max_frames` if that is smaller."""
    return min(max_frames, FRAMES_LIMIT_FLOOR + FRAMES_PER_CHARACTER_LIMIT * len(text))
