"""SSML, the subset telephony platforms and enterprise TTS users send (Azure, Google, Riva,
Polly), read into what the synthesis path takes, sans I/O: stretches of text to speak,
each at a rate, and pauses.

- `<speak>` (the root), `<p>` and `<s>` (each ends a sentence), `<break time|strength>`
  (a pause), `<prosody rate>` (the rate of what it holds; nested rates multiply),
  `<say-as interpret-as="characters|spell-out|cardinal|number|ordinal|date|telephone">`
  (the words to read), `<sub alias>` (the alias is read), `<phoneme alphabet="ipa" ph>`
  (its text spoken as the IPA given, in the Piper family; the AR family reads the text).
- Read as its text: `<phoneme>` in another alphabet, `<say-as>` of another kind,
  `<prosody>`'s other attributes, and any other element (`<emphasis>`, `<voice>`,
  `<lang>`, `<mark>`, vendors' own): nothing it holds is dropped.
- Invalid SSML is an SsmlError naming the element: XML that does not parse, a root other
  than `<speak>`, a value that cannot be read (`<break time="abc">`). A document type or
  entity declaration is refused before parsing (no entity expansion).

The word timestamps of an SSML context name the words read (an alias, a number in words,
spelled letters), and their `text_span`s index the text read: the concatenation of every
`Spoken`'s text, as a client that sent plain text would get them.
"""

from __future__ import annotations

import re
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from contract.models import MAX_SENTENCE_CHARS, Phonemes
from contract.text import Sentence

MAX_BREAK_MS = 10_000  # Polly's limit (Azure's is 5 s)
# All of a document's breaks together: a message of a few kB must not ask for hours of
# silence, which the gateway would encode at once.
MAX_PAUSES_MS = 60_000
# Azure's strengths, in ms; a break with neither attribute is `medium`.
BREAK_STRENGTHS = {"none": 0, "x-weak": 250, "weak": 500, "medium": 750, "strong": 1000, "x-strong": 1250}
RATE_WORDS = {"x-slow": 0.5, "slow": 0.64, "medium": 1.0, "default": 1.0, "fast": 1.55, "x-fast": 2.0}
MIN_RATE, MAX_RATE = 0.25, 4.0  # as the HTTP API's `speed`
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
DATE_FORMATS = ("mdy", "dmy", "ymd", "md", "dm", "ym", "my")
# What IPA is written with beside letters and diacritics: spaces, syllable breaks, typed
# stress and length marks.
IPA_MARKS = frozenset(" .'-:")


class SsmlError(ValueError):
    """Invalid SSML; the message names the element."""


@dataclass(frozen=True)
class Spoken:
    """Text read at `rate` times the voice's speed, spans of it spoken as the IPA
    `phonemes` give; it begins a sentence and ends one."""

    text: str
    rate: float = 1.0
    phonemes: Phonemes = ()


@dataclass(frozen=True)
class Pause:
    """Silence of `ms` milliseconds."""

    ms: int


def looks_like_ssml(text: str) -> bool:
    """Whether a text is an SSML document (what Azure, Google and Polly clients send)."""
    return text.lstrip().startswith("<speak")


def read_ssml(document: str) -> list[Spoken | Pause]:
    """The document's text and pauses, in order; SsmlError if it is not valid SSML."""
    if re.search(r"<!(DOCTYPE|ENTITY)", document, re.IGNORECASE):
        raise SsmlError("SSML may not declare a document type or entities")
    try:
        root = ET.fromstring(document)
    except ET.ParseError as e:
        raise SsmlError(f"SSML is not well-formed XML: {e}") from None
    if _name(root) != "speak":
        raise SsmlError(f"SSML's root must be <speak>, not <{_name(root)}>")
    read = _merged(_read(root, 1.0))
    if sum(item.ms for item in read if isinstance(item, Pause)) > MAX_PAUSES_MS:
        raise SsmlError(f"<break>: a document's breaks may add up to {MAX_PAUSES_MS // 1000} s at most")
    return read


def _name(element: ET.Element) -> str:
    return element.tag.rpartition("}")[2]  # without the namespace (xmlns="http://www.w3.org/2001/10/synthesis")


def _read(element: ET.Element, rate: float) -> Iterator[Spoken | Pause | None]:
    """What `element` says; None where a sentence ends."""
    name = _name(element)
    if name == "break":
        yield Pause(_break_ms(element))
    elif name == "sub" and "alias" in element.attrib:
        yield Spoken(element.attrib["alias"], rate)
    elif name == "say-as":
        yield Spoken(_say_as(element), rate)
    elif name == "phoneme" and element.attrib.get("alphabet", "ipa") == "ipa":
        text = "".join(element.itertext())
        lead, end = len(text) - len(text.lstrip()), len(text.rstrip())
        yield Spoken(text, rate, ((lead, end, _ipa(element)),) if end > lead else ())
    else:
        if name == "prosody" and "rate" in element.attrib:
            rate = _clamped_rate(element, rate * _rate(element))
        if name in ("p", "s"):
            yield None
        if element.text:
            yield Spoken(element.text, rate)
        for child in element:
            yield from _read(child, rate)
            if child.tail:
                yield Spoken(child.tail, rate)
        if name in ("p", "s"):
            yield None


def _merged(items: Iterator[Spoken | Pause | None]) -> list[Spoken | Pause]:
    """Adjacent text at one rate as one stretch (a sentence may span elements); a
    sentence's end, a pause or a new rate starts the next; blank stretches left out."""
    out: list[Spoken | Pause] = []
    joinable = False
    for item in items:
        if isinstance(item, Spoken) and joinable and isinstance(out[-1], Spoken) and out[-1].rate == item.rate:
            at = len(out[-1].text)
            moved = tuple((a + at, b + at, ipa) for a, b, ipa in item.phonemes)
            out[-1] = Spoken(out[-1].text + item.text, item.rate, out[-1].phonemes + moved)
        elif item is not None:
            out.append(item)
        joinable = isinstance(item, Spoken)
    return [item for item in out if not isinstance(item, Spoken) or item.text.strip()]


def with_phonemes(sentences: Sequence[Sentence], spoken: Spoken, at: int) -> list[Sentence]:
    """`sentences`, cut from text in which `spoken`'s begins at `at`, each with the IPA
    spans of `spoken` that lie within it; a span across a sentence's end is read as text."""
    return [
        replace(s, phonemes=tuple((a + at - s.start, b + at - s.start, ipa) for a, b, ipa in spoken.phonemes
                                  if s.start <= a + at and b + at <= s.end))
        for s in sentences
    ]


def _ipa(element: ET.Element) -> str:
    """<phoneme>'s `ph`: letters, diacritics and IPA's marks only."""
    if not (ph := element.attrib.get("ph", "").strip()):
        raise SsmlError("<phoneme>: ph, the phonemes in IPA, is required")
    if len(ph) > MAX_SENTENCE_CHARS:
        raise SsmlError(f"<phoneme>: ph may hold {MAX_SENTENCE_CHARS} characters at most")
    for ch in ph:
        if ch not in IPA_MARKS and unicodedata.category(ch) not in ("Ll", "Lu", "Lm", "Lo", "Mn", "Sk"):
            raise SsmlError(f"<phoneme ph=\"{ph}\">: {ch!r} is no IPA symbol")
    return ph


def _break_ms(element: ET.Element) -> int:
    if "time" in element.attrib:
        value = element.attrib["time"].strip()
        match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s)", value)
        if match is None:
            raise SsmlError(f"<break time=\"{value}\">: a time is a number of ms or s, such as 500ms or 1.5s")
        ms = float(match[1]) * (1 if match[2] == "ms" else 1000)
        if ms > MAX_BREAK_MS:
            raise SsmlError(f"<break time=\"{value}\">: at most {MAX_BREAK_MS} ms")
        return round(ms)
    strength = element.attrib.get("strength", "medium")
    if strength not in BREAK_STRENGTHS:
        raise SsmlError(f"<break strength=\"{strength}\">: one of {', '.join(BREAK_STRENGTHS)}")
    return BREAK_STRENGTHS[strength]


def _rate(element: ET.Element) -> float:
    """<prosody rate>: a word, a percentage of the normal rate (80%), a relative change
    (+20%, -10%), or a multiple (1.5)."""
    value = element.attrib["rate"].strip()
    if value in RATE_WORDS:
        return RATE_WORDS[value]
    if match := re.fullmatch(r"([+-]?)(\d+(?:\.\d+)?)%", value):
        sign, number = match[1], float(match[2])
        return 1 + (number if sign == "+" else -number) / 100 if sign else number / 100
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        return float(value)
    raise SsmlError(f"<prosody rate=\"{value}\">: one of {', '.join(RATE_WORDS)}, a percentage or a number")


def _clamped_rate(element: ET.Element, rate: float) -> float:
    if not MIN_RATE <= rate <= MAX_RATE:
        raise SsmlError(f"<prosody rate=\"{element.attrib['rate']}\">: the rate comes to {rate:g}; "
                        f"it must stay from {MIN_RATE:g} to {MAX_RATE:g}")
    return rate


def _say_as(element: ET.Element) -> str:
    """The words <say-as> reads; its text as it is for a kind not known here."""
    text = "".join(element.itertext()).strip()
    kind = element.attrib.get("interpret-as", "")
    if kind in ("characters", "spell-out", "verbatim"):
        return " ".join(ch for ch in text if not ch.isspace())
    if kind in ("cardinal", "number"):
        return _number(text, element, ordinal=False)
    if kind == "ordinal":
        return _number(text, element, ordinal=True)
    if kind == "telephone":
        groups = [" ".join(group) for group in re.findall(r"\d+", text)]
        return ", ".join(groups) if groups else text
    if kind == "date":
        return _date(text, element)
    return text


def _number(text: str, element: ET.Element, ordinal: bool) -> str:
    """Digits, as the voice reads a number (espeak-ng reads 1,234 and 21st in words)."""
    digits = text.replace(",", "").replace(" ", "")
    if not re.fullmatch(r"-?\d+", digits) or (ordinal and digits.startswith("-")):
        raise SsmlError(f"<say-as interpret-as=\"{element.attrib['interpret-as']}\">: \"{text}\" is not a whole number")
    if not ordinal:
        return digits
    suffix = "th" if digits[-2:] in ("11", "12", "13") else {"1": "st", "2": "nd", "3": "rd"}.get(digits[-1], "th")
    return digits + suffix


def _date(text: str, element: ET.Element) -> str:
    """A date in `format` (mdy by default; Google's and Polly's letters) read as words:
    March 5th 2024."""
    order = element.attrib.get("format", "mdy")
    parts = re.findall(r"\d+", text)
    if order not in DATE_FORMATS or len(parts) != len(order):
        raise SsmlError(f"<say-as interpret-as=\"date\" format=\"{order}\">: \"{text}\" is not a date in that format")
    fields = dict(zip(order, map(int, parts)))
    if not 1 <= fields.get("m", 1) <= 12 or not 1 <= fields.get("d", 1) <= 31:
        raise SsmlError(f"<say-as interpret-as=\"date\">: \"{text}\" has no such month or day")
    words = []
    if "m" in fields:
        words.append(MONTHS[fields["m"] - 1])
    if "d" in fields:
        words.append(_number(str(fields["d"]), element, ordinal=True))
    if "y" in fields:
        words.append(str(fields["y"]))
    return " ".join(words)
