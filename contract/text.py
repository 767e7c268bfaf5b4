"""Text handling before phonemization: sentence splitting and reading out symbols.

Pure functions, no I/O. Sentences keep their span in the request text so later
stages can report which text a piece of audio speaks.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import pysbd

from contract.models import MAX_SENTENCE_CHARS, Phonemes

DEFAULT_LANGUAGE = "en"

_TERMINATORS = frozenset(".!?…。！？؟।")
_CLAUSE_BREAK = re.compile(r"[,;:—–]\s")
_SPACE = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class Sentence:
    """One sentence: its text, its span ``[start, end)`` in the request text, and IPA
    for spans of its text (SSML's ``<phoneme>``; see contract.models.PHONEMES)."""

    start: int
    end: int
    text: str
    phonemes: Phonemes = ()


@functools.cache
def _segmenter(language: str) -> pysbd.Segmenter:
    """pysbd's rules for `language` (an ISO 639-1 code), English's where it has none."""
    if language not in pysbd.languages.LANGUAGE_CODES:
        language = DEFAULT_LANGUAGE
    return pysbd.Segmenter(language=language, clean=False)


def _boundaries(text: str, language: str) -> list[int]:
    """End offsets of sentences in `text`, in order: pysbd's (it keeps abbreviations,
    initials, acronyms, decimals and ordinals in their sentence), and every newline."""
    ends, end = {len(text)}, 0
    if any(ch in _TERMINATORS for ch in text):  # pysbd costs ~1 ms a sentence; most deltas end none
        for piece in _segmenter(language).segment(text):
            # Without `clean`, pieces are the text in order (pysbd may drop a space or a
            # carriage return between them); one not found is joined to the next.
            if (at := text.find(piece, end)) >= 0:
                end = at + len(piece)
                ends.add(end)
    ends.update(m.start() for m in re.finditer(r"\n", text))
    return sorted(ends)


def first_clause_end(text: str, min_chars: int) -> int | None:
    """Where the first clause of `text` ends (after its `,` `;` `:` or dash, where a
    space follows, so that "1,000" and "3:30" stay whole), if it holds at least
    `min_chars` characters besides its punctuation and spaces; None if none does yet."""
    for match in _CLAUSE_BREAK.finditer(text):
        if len(text[: match.start()].strip()) >= min_chars:
            return match.start() + 1
    return None


def _cut(start: int, end: int, text: str, max_chars: int) -> list[tuple[int, int]]:
    """Split ``text[start:end]`` into spans of at most `max_chars`, at a clause break
    or a space where there is one in the second half of the window."""
    spans = []
    while end - start > max_chars:
        window = text[start : start + max_chars]
        cut = max((m.end() for m in _CLAUSE_BREAK.finditer(window)), default=0)
        if cut < max_chars // 2:
            cut = window.rfind(" ") + 1
        if cut < max_chars // 2:
            cut = max_chars
        spans.append((start, start + cut))
        start += cut
    spans.append((start, end))
    return spans


def split_sentences(
    text: str, max_chars: int = MAX_SENTENCE_CHARS, language: str = DEFAULT_LANGUAGE
) -> list[Sentence]:
    """Split `text` into sentences of at most `max_chars` characters, by the sentence
    rules of `language` (an ISO 639-1 code) and at every newline. Whitespace is trimmed
    from each sentence; empty ones are dropped."""
    sentences = []
    start = 0
    for end in _boundaries(text, language):
        for a, b in _cut(start, end, text, max_chars):
            piece = text[a:b]
            stripped = piece.strip()
            if stripped:
                lead = len(piece) - len(piece.lstrip())
                sentences.append(Sentence(a + lead, a + lead + len(stripped), stripped))
        start = end
    return sentences


_SCALE = r"(?:\s+(thousand|million|billion|trillion))?"
_CURRENCY = re.compile(r"([$€£¥])\s?(\d[\d,]*)(?:\.(\d{1,2}))?" + _SCALE)
_CURRENCY_NAMES = {"$": ("dollar", "cent"), "€": ("euro", "cent"), "£": ("pound", "penny"), "¥": ("yen", None)}


def _plural(word: str, amount: str) -> str:
    if amount.replace(",", "").lstrip("0") in ("1",) or word == "yen":
        return word
    return "pence" if word == "penny" else word + "s"


def _read_currency(m: re.Match[str]) -> str:
    unit, sub = _CURRENCY_NAMES[m.group(1)]
    whole, cents, scale = m.group(2), m.group(3), m.group(4)
    if scale:  # "$5.5 million" reads "5.5 million dollars"
        amount = whole + ("." + cents if cents else "")
        return f"{amount} {scale} {unit}s" if unit != "yen" else f"{amount} {scale} yen"
    spoken = f"{whole} {_plural(unit, whole)}"
    if cents and sub and int(cents):
        cents = cents.ljust(2, "0")
        spoken += f" and {int(cents)} {_plural(sub, str(int(cents)))}"
    return spoken


def normalize(text: str) -> str:
    """Rewrite what espeak-ng would read wrongly or not at all; keep everything else.

    espeak-ng already reads numbers, ordinals, years, times, ``%`` and ``+``; it reads
    "$5" as "dollar five", so amounts of money are rewritten, as are "#1" and "&".
    Control characters become spaces.
    """
    text = _CONTROL.sub(" ", text)
    text = _CURRENCY.sub(_read_currency, text)
    text = re.sub(r"#(?=\d)", "number ", text)
    text = text.replace("&", " and ")
    return _SPACE.sub(" ", text).strip()
