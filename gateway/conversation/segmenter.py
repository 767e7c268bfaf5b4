"""Text into sentences, and sentences into `tts` requests, sans I/O.

This is where the gateway's text is cut, once: each sentence keeps its span in all the
text its context was sent, from here to the `timestamps` message, and goes to Triton as
one element of the `tts` model's SENTENCES input, which is never cut again.

Text arrives in small pieces (LLM deltas); a sentence is released for synthesis as soon
as it is known to be complete: when the next sentence has begun, or when it ends in
sentence punctuation followed by a space (and is not an abbreviation), or when it
reached the length cap. `flush` releases whatever is buffered. With `first_phrase`, the
text's first release may be shorter: its first phrase, up to a clause break (`,` `;`
`:` or a dash, then a space) once it holds PHRASE_CHARS, so that a reply written a few
tokens a second starts to sound before its first sentence is whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from contract.models import MAX_SENTENCE_CHARS
from contract.text import DEFAULT_LANGUAGE, Sentence, first_clause_end, split_sentences

_PROBE = "X"  # a capital letter after the buffer: would a sentence start here?
# Characters of whole sentences per `tts` request (about 30 s of speech): a request is
# synthesized to its end whatever the client does, so this bounds the work in flight
# for a client that stops reading.
REQUEST_CHARS = 400
# The fewest characters a first phrase speaks (its punctuation and spaces aside): "Well,"
# and "Sure," go alone, "Hi," waits for more.
PHRASE_CHARS = 4


class Segmenter:
    """Cuts one context's text, given in pieces, into sentences (by the rules of its
    voice's language) with their spans in the whole of it."""

    def __init__(self, max_sentence_chars: int = MAX_SENTENCE_CHARS, language: str = DEFAULT_LANGUAGE,
                 first_phrase: bool = False) -> None:
        self._buffer = ""
        self._offset = 0  # where the buffer starts in all the text appended so far
        self._max = max_sentence_chars
        self._language = language
        self._phrase = first_phrase  # the next release may be a first phrase (none released yet)

    @property
    def pending(self) -> str:
        return self._buffer

    @property
    def end(self) -> int:
        """Where the next text appended starts in all the text appended so far."""
        return self._offset + len(self._buffer)

    def append(self, text: str) -> list[Sentence]:
        """Add a delta; return the sentences it completed, in order."""
        self._buffer += text
        sentences = self._split(self._buffer)
        if not sentences:
            return []
        complete = sentences[:-1]
        if self._buffer[-1:].isspace() and self._split(self._buffer + _PROBE)[-1].text == _PROBE:
            complete.append(sentences[-1])
        if complete:
            return self._release(complete, complete[-1].end)
        return self._first_phrase(sentences[0]) if self._phrase else []

    def flush(self) -> list[Sentence]:
        """Everything buffered, as sentences; the buffer is emptied."""
        return self._release(self._split(self._buffer), len(self._buffer))

    def _split(self, text: str) -> list[Sentence]:
        return split_sentences(text, self._max, self._language)

    def _first_phrase(self, sentence: Sentence) -> list[Sentence]:
        """The first sentence's first phrase, once its clause break has come."""
        text = self._buffer[sentence.start :]  # with the space after its break, which the sentence's text drops
        if (end := first_clause_end(text, PHRASE_CHARS)) is None:
            return []
        phrase = Sentence(sentence.start, sentence.start + end, text[:end])
        return self._release([phrase], phrase.end)

    def _release(self, sentences: list[Sentence], end: int) -> list[Sentence]:
        self._phrase = False
        released = [Sentence(s.start + self._offset, s.end + self._offset, s.text) for s in sentences]
        self._buffer = self._buffer[end:]
        self._offset += end
        return released


def batches(sentences: Iterable[Sentence], max_chars: int = REQUEST_CHARS) -> Iterator[list[Sentence]]:
    """Consecutive sentences grouped into requests of at most `max_chars` characters (a
    longer sentence goes alone)."""
    batch: list[Sentence] = []
    size = 0
    for sentence in sentences:
        if batch and size + len(sentence.text) > max_chars:
            yield batch
            batch, size = [], 0
        batch.append(sentence)
        size += len(sentence.text)
    if batch:
        yield batch
