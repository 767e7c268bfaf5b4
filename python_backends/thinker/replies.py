"""What the Thinker's engines share, whichever computes (vllm_engine on vLLM,
llama_engine on llama.cpp): a reply's pieces, its text as its tokens come, the chat
prompt, and the counts Triton's metrics port shows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from python_backends.engine_stats import EngineStats


@dataclass(frozen=True)
class Piece:
    """The next part of a reply: its tokens, their text (what of it can be decoded
    yet), and, first of a reply that verified a draft, how many draft tokens it kept."""

    token_ids: list[int]
    text: str
    accepted: int | None = None


@dataclass
class ThinkerStats(EngineStats):
    drafts_verified: int = 0  # replies that began by verifying a draft
    draft_tokens: int = 0  # the tokens of those drafts
    accepted_tokens: int = 0  # and of those, the tokens kept


class Detokenizer:
    """A reply's text as its tokens come, never cutting a character in two; after a
    `prefix`, the text that follows the prefix's (whose caller has that text)."""

    def __init__(self, tokenizer, prefix: Sequence[int] = ()) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = list(prefix)
        # characters of the decoded text handed out; a character the prefix leaves unfinished goes out with the rest
        self.sent = len(self._text().rstrip("\ufffd"))

    def push(self, ids: Sequence[int], last: bool = False) -> str:
        self.ids += ids
        text = self._text()
        if not last and text.endswith("\ufffd"):  # a character's bytes not all written yet
            return ""
        delta, self.sent = text[self.sent:], len(text)
        return delta

    def _text(self) -> str:
        return self.tokenizer.decode(self.ids, skip_special_tokens=True)


def chat_prompt(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """The chat template's prompt for `messages`, ready for the assistant's reply."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)
