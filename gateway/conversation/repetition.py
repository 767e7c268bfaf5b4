"""A spoken reply's guards against a small chat model's loops and ramblings, sans I/O: a
reply is released a clause at a time, and ends before a clause that says again four words
in a row the reply has said already ("la femme de France, le capital de la femme de
France, …"), or after its `max_sentences`-th sentence. The rules read the reply's text
alone, so a reply decided with speculation and one decided without it end at the same
place (greedy stays lossless)."""

from __future__ import annotations

import re
from typing import NamedTuple

REPEATED_WORDS = 4  # a run of this many words said again ends the reply
# a clause's end, with the space after it: what tells the segmenter that a sentence has ended
_CLAUSE_END = re.compile(r"[,;:—–.!?…。！？]+\s+|\n+")
_WORD = re.compile(r"\w[\w']*")
_SENTENCE_END = re.compile(r"[.!?…。！？]+(\s+|$)")


class Release(NamedTuple):
    end: int  # the reply's text may be said up to here
    stop: bool  # and ends there: the clause after it repeats the reply, or the sentences are all said


def release(text: str, start: int, whole: bool, max_sentences: int = 0) -> Release:
    """How far a reply whose text so far is `text`, said up to `start` (a clause's end),
    may be said now: through its last finished clause and the space after it (through
    its end if `whole`), or up to the first clause after `start` that repeats what came
    before it, or through the clause that ends its `max_sentences`-th sentence (0: no limit)."""
    ends = [m.end() for m in _CLAUSE_END.finditer(text, start)]
    if whole and (not ends or ends[-1] < len(text)):
        ends.append(len(text))
    seen = runs(words(text[:start]))
    end = start
    for clause_end in ends:
        if max_sentences and len(_SENTENCE_END.findall(text[:end])) >= max_sentences:
            return Release(end, True)
        if runs(words(text[end:clause_end])) & seen:
            return Release(end, True)
        seen = runs(words(text[:clause_end]))
        end = clause_end
    full = bool(max_sentences) and len(_SENTENCE_END.findall(text[:end])) >= max_sentences
    return Release(end, full and end < len(text))  # a reply whose last sentence is said ends now


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def runs(words: list[str]) -> set[tuple[str, ...]]:
    """Every REPEATED_WORDS words in a row of `words`."""
    return {tuple(words[i : i + REPEATED_WORDS]) for i in range(len(words) - REPEATED_WORDS + 1)}
