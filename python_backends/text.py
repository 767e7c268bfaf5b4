"""Text handling before phonemization: sentence splitting and reading out symbols.

Pure functions, no I/O. Sentences keep their span in the request text so later
stages can report which text a piece of audio speaks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .contract import MAX_SENTENCE_CHARS

# Words that end in a period without ending the sentence (compared lower-case,
# without the final period). Kept to titles, months and Latin short forms: wrongly
# joining two sentences only costs a pause, wrongly splitting one breaks its intonation.
ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st sr jr mt ft no nos vs cf fig figs approx dept est gen gov "
    "sen rep rev hon capt col lt sgt cmdr adm e.g i.e etc al ca inc ltd co corp "
    "jan feb mar apr jun jul aug sep sept oct nov dec".split()
)

_END = re.compile(r"[.!?…]+[\"'”’)\]]*")
_CLAUSE_BREAK = re.compile(r"[,;:—–]\s")
_SPACE = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class Sentence:
    """One sentence: its text and its span ``[start, end)`` in the request text."""

    start: int
    end: int
    text: str


def _is_boundary(text: str, match: re.Match[str]) -> bool:
    """Whether the punctuation in `match` ends a sentence."""
    after = text[match.end() :]
    if after and not after[0].isspace():
        return False  # "3.14", "e.g.", "U.S.A." or "...and": no space, no boundary
    nxt = after.lstrip()[:1]
    if nxt and nxt.islower():
        return False
    if match.group().startswith(".") and match.group().rstrip("\"'”’)]") == ".":
        word = text[: match.start()].rsplit(None, 1)[-1] if text[: match.start()].strip() else ""
        word = word.lstrip("\"'“‘([").lower()
        if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()) or "." in word:
            return False  # "Dr.", an initial "J.", an acronym "U.S."
    return True


def _boundaries(text: str) -> list[int]:
    """End offsets of sentences in `text`, newlines included, in order."""
    ends = {m.end() for m in _END.finditer(text) if _is_boundary(text, m)}
    ends.update(m.start() for m in re.finditer(r"\n", text))
    ends.add(len(text))
    return sorted(ends)


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


def split_sentences(text: str, max_chars: int = MAX_SENTENCE_CHARS) -> list[Sentence]:
    """Split `text` into sentences of at most `max_chars` characters.

    A sentence ends at ``.!?…`` (and closing quotes) followed by a space and a word that
    is not lower-case, unless the period belongs to an abbreviation, an initial, an
    acronym or a number; and at every newline. Whitespace is trimmed from each
    sentence; empty ones are dropped.
    """
    sentences = []
    start = 0
    for end in _boundaries(text):
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
