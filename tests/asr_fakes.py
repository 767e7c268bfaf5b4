"""A scripted VAD and transcriber for tests of the recognizer's policy (python_backends.asr's
Utterances and Listening), which need to know what was said where, not to hear it.

The audio a script makes carries its own position: sample i of the stream's timeline is
the float i, so the fake transcriber knows which span of the timeline a pass heard and
answers with the words spoken in it (a word cut short comes out garbled, as Whisper's
last word so often does)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from contract.models import ASR_SAMPLE_RATE
from python_backends.asr.utterances import BLOCK

MS = ASR_SAMPLE_RATE // 1000  # samples per ms


@dataclass
class Script:
    """What a stream says: speech as (start_ms, end_ms, words), silence between.
    Words are spread evenly over their speech."""

    speech: list[tuple[int, int, str]]
    length_ms: int

    def audio(self, start_ms: int = 0, end_ms: int | None = None) -> np.ndarray:
        """The stream's audio from `start_ms` to `end_ms`, each sample its timeline position."""
        end_ms = self.length_ms if end_ms is None else end_ms
        return np.arange(start_ms * MS, end_ms * MS, dtype=np.float32)

    def speaking(self, sample: int) -> bool:
        return any(start * MS <= sample < end * MS for start, end, _ in self.speech)

    def words(self) -> list[tuple[int, int, str]]:
        """Each word with its [start, end) samples."""
        timed = []
        for start, end, text in self.speech:
            words = text.split()
            step = (end - start) * MS / len(words)
            timed += [(int(start * MS + i * step), int(start * MS + (i + 1) * step), w) for i, w in enumerate(words)]
        return timed


@dataclass
class ScriptedVad:
    """Each block is speech (probability 0.9) where the script speaks at its middle, else 0.05."""

    script: Script
    judged: list[float] = field(default_factory=list)

    def probabilities(self, blocks: np.ndarray) -> np.ndarray:
        p = np.array([0.9 if self.script.speaking(int(b[BLOCK // 2])) else 0.05 for b in blocks], np.float32)
        self.judged += list(p)
        return p


@dataclass
class ScriptedTranscriber:
    """The words a pass over [first sample, last sample] hears: those whose end it heard,
    and a garbled guess at a word it heard the start of only. `passes` keeps each pass's
    span of the timeline."""

    script: Script
    passes: list[tuple[int, int]] = field(default_factory=list)

    def transcribe(self, audio: np.ndarray) -> str:
        start, end = int(audio[0]), int(audio[-1]) + 1
        self.passes.append((start, end))
        heard = []
        for word_start, word_end, word in self.script.words():
            if start <= word_start and word_end <= end:
                heard.append(word)
            elif start <= word_start < end:
                heard.append(word[:2] + "-uh")
        return " ".join(heard)
