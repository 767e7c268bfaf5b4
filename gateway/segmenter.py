"""Incremental text segmentation for LLM-style deltas, sans I/O.

Text arrives in small pieces; a sentence is released for synthesis as soon as it is
known to be complete: when the next sentence has begun, or when it ends in sentence
punctuation followed by a space (and is not an abbreviation), or when it reached the
length cap. `flush` releases whatever is buffered.
"""

from __future__ import annotations

from python_backends.contract import MAX_SENTENCE_CHARS
from python_backends.text import split_sentences

_PROBE = "X"  # a capital letter after the buffer: would a sentence start here?


class Segmenter:
    def __init__(self, max_sentence_chars: int = MAX_SENTENCE_CHARS) -> None:
        self._buffer = ""
        self._max = max_sentence_chars

    @property
    def pending(self) -> str:
        return self._buffer

    def append(self, text: str) -> list[str]:
        """Add a delta; return the sentences it completed, in order."""
        self._buffer += text
        sentences = split_sentences(self._buffer, self._max)
        if not sentences:
            return []
        complete = sentences[:-1]
        last = sentences[-1]
        if self._buffer[-1:].isspace() and split_sentences(self._buffer + _PROBE, self._max)[-1].text == _PROBE:
            complete.append(last)
        if not complete:
            return []
        self._buffer = self._buffer[complete[-1].end :]
        return [s.text for s in complete]

    def flush(self) -> list[str]:
        """Everything buffered, as sentences; the buffer is emptied."""
        sentences = [s.text for s in split_sentences(self._buffer, self._max)]
        self._buffer = ""
        return sentences
