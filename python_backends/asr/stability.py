"""Which words of an utterance's transcripts are stable enough to show as a partial (no
engine here).

Whisper over audio cut mid-word guesses the last word or two, and now and then repeats
itself; a word two passes in a row agree on, from the start of the utterance, rarely
changes again (LocalAgreement-2, as whisper_streaming shows partials), but the last of
those words often does: both passes may have heard the same first half of it ("in
power" before "in part four"). So a partial holds that last word back: a word shown and
then contradicted would stop the partials until the final, as none is taken back, so
holding one back makes more partials, not fewer, and brings them nearer the final
(known-limits.md has what it measured). Words are compared as they sound: case and the
punctuation around them do not count."""

from __future__ import annotations

import string


def spoken(words: list[str]) -> list[str]:
    """The words as compared: lower case, without the punctuation around them."""
    return [word.lower().strip(string.punctuation) for word in words]


def agreed(first: list[str], second: list[str]) -> int:
    """How many words, from the start, the two transcripts agree on."""
    n = 0
    for a, b in zip(spoken(first), spoken(second)):
        if a != b:
            break
        n += 1
    return n


class Agreement:
    """An utterance's partials: each the stable words so far, shown only when there are
    more of them, and never taking back a word shown (the final may)."""

    def __init__(self) -> None:
        self.last: list[str] = []  # the previous pass's words
        self.shown: list[str] = []  # the words of the latest partial, as compared

    def hypothesis(self, text: str) -> str | None:
        """A pass over the utterance so far said `text`: the partial to send, or None.
        Stable are the words it shares with the previous pass, but the last of them."""
        words = text.split()
        stable = words[: max(0, agreed(self.last, words) - 1)]
        self.last = words
        return self._grown(stable)

    def settled(self, text: str) -> str | None:
        """A pass over the whole utterance, its speech over, said `text`: all of it is
        stable, as the audio will not change (unless the speaker goes on)."""
        words = text.split()
        self.last = words
        return self._grown(words)

    def _grown(self, words: list[str]) -> str | None:
        """`words` as the next partial, if they go on from the words shown; the latest
        pass's spelling of them (its case and punctuation)."""
        said = spoken(words)
        if len(said) <= len(self.shown) or said[: len(self.shown)] != self.shown:
            return None
        self.shown = said
        return " ".join(words)
