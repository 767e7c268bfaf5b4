"""Text to phonemes with espeak-ng, the way Piper voices were trained, and phonemes to ids.

espeak-ng comes from the `espeakng-loader` wheel (its library and data). Piper asks
espeak-ng for IPA one clause at a time and appends each clause's terminating
punctuation, since the voices were trained with punctuation as phonemes. The loader's
libespeak-ng lacks `espeak_TextToPhonemesWithTerminator`, so the terminator is read
from the text each call consumed.
"""

from __future__ import annotations

import ctypes
import re
import threading
import unicodedata
from collections.abc import Callable, Mapping, Sequence

import espeakng_loader

BOS, EOS, PAD = "^", "$", "_"

_AUDIO_OUTPUT_SYNCHRONOUS = 0x02
_ESPEAK_CHARS_UTF8 = 1
_ESPEAK_PHONEMES_IPA = 0x02
_CLAUSE_PUNCTUATION = ".,?!:;"
_CLOSERS = "\"'”’)]}»"
_LANGUAGE_FLAG = re.compile(r"\([^)]+\)")  # "(fr)" marks around words in another language


def clause_terminator(consumed: str, final: bool) -> str:
    """The punctuation that ended a clause, from the text espeak-ng consumed for it.

    espeak-ng reads one character past the clause before it stops (the first of the
    next clause), so that character is dropped unless this was the last clause.
    """
    clause = consumed if final else consumed[:-1]
    clause = clause.rstrip().rstrip(_CLOSERS)
    return clause[-1] if clause and clause[-1] in _CLAUSE_PUNCTUATION else ""


def join_clauses(clauses: Sequence[tuple[str, str]]) -> str:
    """Join (phonemes, terminator) clauses into one sentence's phoneme string.

    Each clause keeps its punctuation; clauses are separated by a space, as Piper does
    after ``, : ;`` (a sentence end inside one of our sentences, e.g. espeak-ng's
    "Dr." gets a space too, so the voice sees a word boundary).
    """
    parts = []
    for phonemes, terminator in clauses:
        phonemes = _LANGUAGE_FLAG.sub("", phonemes)
        if phonemes or terminator:
            parts.append(phonemes + terminator)
    return " ".join(parts)


# IPA as it is often typed, in the symbols espeak-ng writes (and Piper's voices know).
_IPA_SPELLINGS = {"g": "ɡ", "ʧ": "tʃ", "ʤ": "dʒ", "ʦ": "ts", "ʣ": "dz", "'": "ˈ", ":": "ː"}


def ipa(symbols: str) -> str:
    """IPA given for a word (SSML's <phoneme>), in espeak-ng's spellings: "g" is "ɡ",
    ligatures are their letters, an apostrophe is the stress mark."""
    return "".join(_IPA_SPELLINGS.get(ch, ch) for ch in " ".join(symbols.split()))


def with_given(text: str, given: Sequence[tuple[int, int, str]], phonemize: Callable[[str], str]) -> str:
    """The phonemes of `text`, `phonemize`d but for the spans `given` IPA for
    ((start, end, ipa), in order), which stand as words of their own; punctuation right
    after such a span stays with it, as espeak-ng keeps a clause's."""
    parts: list[str] = []
    at = 0
    for start, end, symbols in (*given, (len(text), len(text), "")):
        gap = text[at:start].strip()
        if parts and gap[:1] and gap[0] in _CLAUSE_PUNCTUATION:
            parts[-1] += gap[0]
            gap = gap[1:].strip()
        if gap:
            parts.append(phonemize(gap))
        if symbols:
            parts.append(ipa(symbols))
        at = end
    return " ".join(part for part in parts if part)


def phoneme_ids(phonemes: str, id_map: Mapping[str, Sequence[int]]) -> list[int]:
    """Piper's id sequence: BOS, then each code point (NFD) and a pad, then EOS.

    Code points missing from the voice's map are skipped, as Piper does.
    """
    ids = [*id_map[BOS], *id_map[PAD]]
    for symbol in unicodedata.normalize("NFD", phonemes):
        if symbol in id_map:
            ids += [*id_map[symbol], *id_map[PAD]]
    ids += id_map[EOS]
    return ids


class Espeak:
    """libespeak-ng through ctypes. One per process; calls are serialised because
    espeak-ng keeps global state."""

    _lock = threading.Lock()
    _instance: Espeak | None = None

    def __init__(self) -> None:
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        data = espeakng_loader.get_data_path().encode()
        if lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data, 0) < 0:
            raise RuntimeError(f"espeak-ng failed to initialise with data at {data.decode()}")
        self._lib = lib
        self._voice = ""

    @classmethod
    def shared(cls) -> Espeak:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def clauses(self, text: str, voice: str) -> list[tuple[str, str]]:
        """(IPA phonemes, terminating punctuation) for each clause of `text`."""
        data = text.encode()
        buffer = ctypes.create_string_buffer(data)
        base = ctypes.addressof(buffer)
        pointer = ctypes.c_void_p(base)
        clauses = []
        with self._lock:
            if voice != self._voice:
                if self._lib.espeak_SetVoiceByName(voice.encode()) != 0:
                    raise ValueError(f"espeak-ng has no voice {voice!r}")
                self._voice = voice
            start = 0
            while pointer.value is not None:
                phonemes = self._lib.espeak_TextToPhonemes(
                    ctypes.byref(pointer), _ESPEAK_CHARS_UTF8, _ESPEAK_PHONEMES_IPA
                )
                end = len(data) if pointer.value is None else pointer.value - base
                consumed = data[start:end].decode(errors="ignore")
                clauses.append((phonemes.decode(), clause_terminator(consumed, pointer.value is None)))
                start = end
        return clauses

    def phonemize(self, text: str, voice: str) -> str:
        """One sentence's phonemes, punctuation kept, as a single string."""
        return join_clauses(self.clauses(text, voice))
