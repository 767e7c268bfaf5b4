"""A connection's chat turns, sans I/O: their Thinker rounds, the audio held for a
draft's first phrase, and the conversation so far, as actions for the I/O shell.

gateway/conversation/speculation.py holds the rules of one turn; this module runs a
connection's turns by them. A turn's reply is spoken on a context of the turn's id,
which speaking mode opens and feeds when asked (Replies): contexts are speaking's alone.
"""

from __future__ import annotations

import logging
from collections.abc import KeysView, Mapping
from typing import Protocol

from contract.voices import VoiceInfo
from gateway.conversation import repetition
from gateway.conversation import speculation as ch
from gateway.conversation.actions import Action, Job, Send, Stop, StopThinking, Synthesize, Think
from gateway.messages import ChatConfig, Config, ProtocolError, Speculation, UserMessage, encode
from speechstream import protocol as v1

log = logging.getLogger("speechstream.gateway")

HISTORY_CHARS = 8_000  # the conversation a turn's prompt carries, newest first


class Replies(Protocol):
    """Speaking mode as the chat turns see it: the config they follow, the capacity their
    speculation yields to, and the contexts their replies are spoken on (a reply's
    context has its turn's id)."""

    id: str
    config: Config

    def refused(self) -> bool:
        """Whether a new stream would be refused now."""
        ...

    def new_job(self) -> int:
        """A job id, unique among the session's jobs."""
        ...

    def error(self, code: str, message: str, context_id: str | None = None,
              retry_after_ms: int | None = None) -> Send:
        """An `error` message, counted."""
        ...

    def open_reply(self, turn_id: str) -> list[Action]:
        """Open the reply's context, closed to the client's text; ProtocolError if refused."""
        ...

    def speak_held(self, turn_id: str, held: ch.Held, text: str) -> list[Action]:
        """The held phrase (`text`, the reply's up to its end) is the first the context speaks."""
        ...

    def speak_reply(self, turn_id: str, text: str) -> list[Action] | None:
        """More of the reply's text to speak; None once its context is gone."""
        ...

    def end_reply(self, turn_id: str) -> list[Action]:
        """The reply is whole: its context, if open, speaks the rest and ends."""
        ...

    def cancel_reply(self, turn_id: str) -> list[Action]:
        """The client cancelled the turn: its context, if open, and a `cancelled`."""
        ...

    def fail_reply(self, turn_id: str) -> list[Action]:
        """The reply failed: its context, if open, ends without a word."""
        ...


class ChatObserver(Protocol):
    """Where chat turns report what the gateway's metrics count."""

    def chat_turn(self, outcome: str) -> None: ...
    def chat_round(self) -> None: ...
    def held_audio(self, seconds: float, released: bool) -> None: ...


class Chatting:
    """One connection's chat turns, from their first `user` message until their reply is written."""

    def __init__(self, replies: Replies, observer: ChatObserver, voices: Mapping[str, VoiceInfo],
                 speculation_chars: int) -> None:
        self.replies = replies
        self.observer = observer
        self.voices = voices
        self.speculation_chars = speculation_chars  # 0: no bound
        self.history: list[dict[str, str]] = []  # the conversation: user turns and the replies spoken
        self._turns: dict[str, ch.Turn] = {}
        self._held: dict[int, ch.Turn] = {}  # held audio's jobs, and their turns
        self._replied: tuple[str, dict[str, str]] | None = None  # the last reply written, and its history entry
        self._thinks = 0

    def __contains__(self, turn_id: str) -> bool:
        return turn_id in self._turns

    @property
    def ids(self) -> KeysView[str]:
        return self._turns.keys()

    def held(self, job_id: int) -> ch.Held | None:
        """The held audio job `job_id` synthesizes, if it is held audio."""
        turn = self._held.get(job_id)
        return None if turn is None else turn.held

    def held_failed(self, job_id: int) -> bool:
        """Whether job `job_id` was held audio; if so, it is dropped."""
        if (turn := self._held.pop(job_id, None)) is None:
            return False
        turn.held = None
        return True

    def abort(self) -> list[Action]:
        """Every turn goes, and what it runs stops."""
        return [a for turn in list(self._turns.values()) for a in self._drop_turn(turn)]

    # The question

    def user(self, message: UserMessage) -> list[Action]:
        """A turn's transcript so far (the session checked it may start)."""
        turn = self._turns.get(message.turn_id)
        if turn is None:
            turn = self._turns[message.turn_id] = ch.Turn(message.turn_id)
        if message.text != turn.transcript:
            turn.transcript, turn.changed = message.text, True
        if message.final:
            return self._final(turn)
        if not self._speculates(turn) or self.replies.refused():
            return []  # under load, speculation yields: it takes no capacity a listener needs
        if ch.reads_whole(turn.transcript) and turn.thought is not None and turn.changed:
            # The question reads as ended (a recognizer's pass over the whole utterance
            # at a pause): a round over it now beats finishing one over fewer words.
            return self._stop_stale_round(turn, self._messages(turn.transcript)) + [self._think(turn, final=False)]
        return [self._think(turn, final=False)] if turn.wants_round() else []

    def answering(self, turn_id: str) -> bool:
        """Whether the turn's question has ended and its reply is being written."""
        return self._turns[turn_id].final

    def forget(self, turn_id: str) -> list[Action]:
        """The turn was no question after all (a spoken turn of noise): it goes without a word."""
        return self._drop_turn(self._turns[turn_id]) if turn_id in self._turns else []

    def interrupt(self, turn_id: str, heard: str) -> list[Action]:
        """Barge-in: the turn's reply stops, and the conversation keeps of it only `heard`."""
        if (turn := self._turns.get(turn_id)) is not None:  # still being written
            self.history += [{"role": "user", "content": turn.transcript}, {"role": "assistant", "content": heard}]
            self._replied = (turn_id, self.history[-1])  # what its listener heard may be told again (truncate)
            return self._drop_turn(turn)
        if self._replied is not None and self._replied[0] == turn_id:
            self._replied[1]["content"] = heard
        return []

    def cancel(self, turn_id: str) -> list[Action]:
        return self._drop_turn(self._turns[turn_id]) + self.replies.cancel_reply(turn_id)

    def _speculates(self, turn: ch.Turn) -> bool:
        """Whether the turn drafts while the question arrives: speculation is on, and the
        conversation is short enough that verifying a draft costs less than it can save."""
        limit = self.speculation_chars
        chars = sum(len(m["content"]) for m in self._messages(turn.transcript))
        return self._chat_config.speculation is not Speculation.OFF and (not limit or chars <= limit)

    @property
    def _chat_config(self) -> ChatConfig:
        return self.replies.config.chat or ChatConfig()

    def _messages(self, transcript: str) -> ch.Messages:
        history, chars = [], 0
        for message in reversed(self.history):
            chars += len(message["content"])
            if chars > HISTORY_CHARS:
                break
            history.insert(0, message)
        system = [{"role": "system", "content": self._chat_config.system}] if self._chat_config.system else []
        return (*system, *history, {"role": "user", "content": transcript})

    def _think(self, turn: ch.Turn, final: bool) -> Think:
        """The turn's next Thinker request: a speculative round, or the final one. A round
        asks for the whole reply too, so that it can become the final request; the gateway
        stops it once it has what speculation needs (ch.Thought.enough)."""
        cfg = self._chat_config
        self._thinks += 1
        draft = tuple(turn.draft[: cfg.max_tokens - 1]) if self._speculates(turn) else ()
        messages = self._messages(turn.transcript)
        turn.thought, turn.changed = ch.Thought(self._thinks, final, messages, len(draft)), False
        turn.rounds += not final
        return Think(self._thinks, turn.id, messages, draft, cfg.k, cfg.max_tokens, cfg.temperature, seed=cfg.seed)

    def _final(self, turn: ch.Turn) -> list[Action]:
        """The question ended: its reply becomes a context, written by the round in flight
        over this very question, after the draft written for it, or by one request that
        verifies the draft and writes the rest."""
        if not turn.transcript.strip():
            return self._drop_turn(turn) + [self.replies.error(v1.INVALID_FIELD, "the final transcript is empty", turn.id)]
        messages = self._messages(turn.transcript)
        stop = self._stop_stale_round(turn, messages)
        turn.final = True
        try:
            opened = self.replies.open_reply(turn.id)
        except ProtocolError as e:  # refused (busy, draining): the turn ends, and what it ran stops
            return stop + self._drop_turn(turn) + [self.replies.error(e.code, e.message, turn.id, e.retry_after_ms)]
        if turn.thought is not None:
            return stop + opened + self._round_replies(turn)
        if turn.written_for(messages):
            return stop + opened + self._accept(turn, messages)
        return stop + opened + [self._think(turn, final=True)]

    def _stop_stale_round(self, turn: ch.Turn, messages: ch.Messages) -> list[Action]:
        """A round in flight over other words than the final ones stops: what it drafted so
        far is a draft as good as any, verified anyway."""
        thought = turn.thought
        if thought is None or thought.messages == messages:
            return []
        if thought.ids:
            turn.adopt(thought, complete=False)
        turn.thought = None
        return [StopThinking(thought.id)]

    def _round_replies(self, turn: ch.Turn) -> list[Action]:
        """The round in flight answers the final question already: it is the reply, begun
        early, and goes on as the final request. Once its first piece has come, the
        outcome is decided and what it wrote so far is said."""
        thought = turn.thought
        thought.final = True
        if not thought.started:
            return []  # its first piece decides, as a final request's does
        return self._decide(turn) + self._reply_text(turn)

    def _accept(self, turn: ch.Turn, messages: ch.Messages) -> list[Action]:
        """The draft was written for this very question: it is the reply's start, taken
        whole without a verification pass. The Thinker goes on after it (a PREFIX, read
        from its prefix cache), unless the draft ended the reply."""
        cfg = self._chat_config
        self._thinks += 1
        thought = turn.thought = ch.Thought(self._thinks, True, messages, accepted=len(turn.draft))
        thought.ids, thought.text = list(turn.draft), turn.draft_text
        actions = self._decide(turn) + self._reply_text(turn)
        if turn.complete:
            return actions + self._end_reply(turn)
        prefix = tuple(turn.draft)
        return actions + [Think(thought.id, turn.id, messages, (), cfg.k, cfg.max_tokens, cfg.temperature, prefix,
                                cfg.seed)]

    # The Thinker's reply

    def thought(self, think_id: int, ids: list[int], text: str, accepted: int | None) -> list[Action]:
        """A piece of Thinker request `think_id`'s reply."""
        turn = self._turn_thinking(think_id)
        if turn is None:
            return []
        thought = turn.thought
        first = not thought.started
        thought.add(ids, text, accepted, turn.marks)
        if not thought.final:
            if not thought.enough(self._language):
                return []
            return [StopThinking(thought.id)] + self._end_round(turn, complete=False)
        actions = self._decide(turn) if first else []
        return actions + self._reply_text(turn)

    @property
    def _language(self) -> str:
        return self.voices[self.replies.config.voice].language_family

    def _decide(self, turn: ch.Turn) -> list[Action]:
        """The reply's draft was verified (or taken whole): say how, and release or drop the held audio."""
        thought = turn.thought
        speculation = self._chat_config.speculation if self._speculates(turn) else Speculation.OFF
        outcome = ch.outcome(speculation, thought.accepted, turn.held)
        self.observer.chat_turn(outcome.value)
        actions: list[Action] = [Send(encode(
            "reply", turn_id=turn.id, outcome=outcome.value, rounds=turn.rounds, draft_tokens=len(turn.draft),
            accepted_tokens=thought.accepted or 0,
        ))]
        if outcome is ch.Outcome.HELD:
            return actions + self._release(turn)
        return actions + self._drop_held(turn)

    def _release(self, turn: ch.Turn) -> list[Action]:
        """The held first phrase is the reply's: its audio goes out now, and the reply's text after it follows."""
        held = turn.held
        del self._held[held.job_id]
        self.observer.held_audio(self._held_seconds(held), released=True)
        turn.spoken_from, turn.held = held.sentence.end, None  # the reply's audio now, no longer held
        return self.replies.speak_held(turn.id, held, turn.draft_text[: held.sentence.end])

    def _reply_text(self, turn: ch.Turn, whole: bool = False) -> list[Action]:
        """The decided reply's next finished clauses (with `whole`, its rest): to the client,
        and into the context's speech past the held phrase. A clause that repeats the reply
        (gateway/conversation/repetition.py) is not said: the reply ends before it."""
        thought = turn.thought
        end, stop = repetition.release(thought.text, turn.said, whole, self._chat_config.max_sentences)
        start, turn.said = turn.said, end
        actions: list[Action] = []
        if end > start:
            speech = self.replies.speak_reply(turn.id, thought.text[max(start, turn.spoken_from):end])
            if speech is None:
                return []
            actions = [Send(encode("reply_text", turn_id=turn.id, text=thought.text[start:end]))] + speech
        if stop and not whole:
            log.info("session %s: turn %s's reply ends before a clause that repeats it, or at its last sentence",
                     self.replies.id, turn.id)
            return actions + [StopThinking(thought.id)] + self._end_reply(turn)
        return actions

    def thought_done(self, think_id: int) -> list[Action]:
        """Thinker request `think_id` ended: the reply is whole, or the round's draft is the turn's now."""
        turn = self._turn_thinking(think_id)
        if turn is None:
            return []
        if turn.thought.final:
            return self._end_reply(turn)
        return self._end_round(turn, complete=True)  # the Thinker ended a round's reply: it is whole

    def _end_round(self, turn: ch.Turn, complete: bool) -> list[Action]:
        """A speculative round is over (`complete`: its draft ended the reply): its draft
        is the turn's, its first phrase held, and the next round starts if new words came."""
        thought = turn.thought
        turn.adopt(thought, complete or len(thought.ids) >= self._chat_config.max_tokens)
        turn.thought = None
        self.observer.chat_round()
        actions = self._hold(turn)
        if turn.wants_round() and not self.replies.refused():
            actions.append(self._think(turn, final=False))
        return actions

    def _end_reply(self, turn: ch.Turn) -> list[Action]:
        """The reply is over: what it still holds is said (unless it repeats), and its context ends."""
        actions = self._reply_text(turn, whole=True)
        del self._turns[turn.id]
        actions += self.replies.end_reply(turn.id)
        self.history += [{"role": "user", "content": turn.transcript},
                         {"role": "assistant", "content": turn.thought.text[: turn.said]}]
        self._replied = (turn.id, self.history[-1])
        return actions

    def thought_failed(self, think_id: int, code: str, message: str) -> list[Action]:
        """Thinker request `think_id` failed: a final one ends its turn with an `error`; a speculative one is only given up."""
        turn = self._turn_thinking(think_id)
        if turn is None:
            return []
        if not turn.thought.final:
            log.info("session %s: a speculative round of turn %s failed: %s", self.replies.id, turn.id, message)
            turn.thought = None
            return []
        actions = self._drop_turn(turn) + self.replies.fail_reply(turn.id)
        return actions + [self.replies.error(code, message, turn.id)]

    def _turn_thinking(self, think_id: int) -> ch.Turn | None:
        return next((t for t in self._turns.values() if t.thought is not None and t.thought.id == think_id), None)

    # Held audio

    def _hold(self, turn: ch.Turn) -> list[Action]:
        """Synthesize the draft's first phrase out of sight, unless it is held already;
        held audio of another sentence is dropped."""
        sentence = ch.first_phrase(turn.draft_text, turn.complete, self._language)
        tokens = None if sentence is None else ch.tokens_covering(turn.marks, sentence.end)
        held = turn.held
        if held is not None and sentence == held.sentence and tokens is not None:
            held.tokens = tokens  # the new draft's tokens that cover it
            return []
        actions = self._drop_held(turn)
        # A draft of words already revised is verified by the next round, not held: its TTS would compete with that round.
        if sentence is None or tokens is None or turn.changed or self.replies.refused():
            return actions
        config = self.replies.config
        job = Job(self.replies.new_job(), turn.id, (sentence,), config.voice, config.voice_params, 0.0)
        turn.held = ch.Held(sentence, tokens, job.id)
        self._held[job.id] = turn
        return actions + [Synthesize(job)]

    def _drop_held(self, turn: ch.Turn) -> list[Action]:
        if turn.held is None:
            return []
        self._held.pop(turn.held.job_id, None)
        self.observer.held_audio(self._held_seconds(turn.held), released=False)
        job_id, turn.held = turn.held.job_id, None
        return [Stop(job_id)]

    def _held_seconds(self, held: ch.Held) -> float:
        """The held audio synthesized so far."""
        return sum(len(pcm) for pcm, _, _ in held.chunks) / self.voices[self.replies.config.voice].sample_rate

    def _drop_turn(self, turn: ch.Turn) -> list[Action]:
        """The turn goes: its Thinker request and its held audio stop."""
        self._turns.pop(turn.id, None)
        stop = [StopThinking(turn.thought.id)] if turn.thought is not None else []
        turn.thought = None
        return stop + self._drop_held(turn)
