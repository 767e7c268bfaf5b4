"""Protocol v1's rules, sans I/O: one `Session` per WebSocket connection.

The session takes what happens — a client frame, a chunk of synthesized audio, the end
or failure of a synthesis job, a piece of a Thinker's reply, a recognizer event, the
connection falling idle — and answers with actions for its I/O shell
(gateway/protocols/websocket.py) to carry out, in order (gateway/conversation/actions.py).
No awaits, no sockets, no Triton here, so every rule is tested without a server
(tests/unit/test_gateway_session.py).

The session parses and checks protocol v1's frames and hands each to the mode it
belongs to: speaking (contexts: gateway/conversation/speaking.py), chatting (chat turns:
gateway/conversation/chatting.py) and listening (the microphone and its utterances:
gateway/conversation/listening.py). The modes hold the state; the session holds the
config and dispatches.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping

import numpy as np

from contract.voices import EMBEDDED_ONLY, VoiceInfo
from gateway.conversation.actions import Action, Close, Hear, Send
from gateway.conversation.audio import pre_skip
from gateway.conversation.chatting import Chatting
from gateway.conversation.contexts import Admission, AdmitAll, Context, Limits, Observer
from gateway.conversation.listening import Listening
from gateway.conversation.speaking import Speaking
from gateway.conversation.start_gate import SpeakingPace
from gateway.messages import Config, ContextMessage, EndOfSpeech, ProtocolError, UserMessage, encode, parse_message
from speechstream import protocol as v1

log = logging.getLogger("speechstream.gateway")


class Session:
    """One connection speaking protocol v1."""

    def __init__(
        self, limits: Limits, observer: Observer, clock: Callable[[], float] = time.monotonic,
        session_id: str | None = None, admission: Admission | None = None,
        voices: Mapping[str, VoiceInfo] = EMBEDDED_ONLY, chat: bool = False, listen: bool = False,
        start_when_safe: bool = True, pace: SpeakingPace | None = None,
    ) -> None:
        self.id = session_id or uuid.uuid4().hex[:12]
        self.limits = limits
        self.observer = observer
        self.chat = chat  # a Thinker serves chat mode
        self.listen = listen  # a recognizer serves listen mode
        self.speaking = Speaking(self.id, limits, observer, clock, admission or AdmitAll(), voices,
                                 start_when_safe, pace or SpeakingPace())
        # Chat turns, until their reply is written (each reply is a context of its turn's id).
        self.chatting = Chatting(self.speaking, observer, voices, limits.chat_speculation_chars)
        self.listening: Listening | None = None  # once a config asked for it

    @property
    def config(self) -> Config:
        return self.speaking.config

    @property
    def contexts(self) -> dict[str, Context]:
        return self.speaking.contexts

    @property
    def history(self) -> list[dict[str, str]]:
        """The chat conversation: user turns and the replies spoken."""
        return self.chatting.history

    @property
    def busy(self) -> bool:
        """Whether any context has text to speak: the connection is not idle."""
        return self.speaking.busy

    @property
    def streams(self) -> int:
        """Contexts open and admitted: those that count against capacity."""
        return self.speaking.streams

    def leads(self, but: str | None = None) -> list[float]:
        return self.speaking.leads(but)

    def start(self) -> list[Action]:
        return [self._ready()]

    def is_current(self, job_id: int) -> bool:
        """Whether job `job_id` is still wanted (not cancelled, its context not failed)."""
        return self.chatting.held(job_id) is not None or self.speaking.is_current(job_id)

    # Client frames

    def receive(self, frame: str | bytes) -> list[Action]:
        """The actions answering one client frame; a refused one gets an `error`."""
        try:
            return self._handle(self._parse(frame))
        except ProtocolError as e:
            return [self.error(e.code, e.message, e.context_id, e.retry_after_ms)]
        except Exception:
            log.exception("session %s: unexpected error handling a message", self.id)
            return [self.error(v1.INTERNAL_ERROR, "the server failed to handle this message")]

    def _parse(self, frame: str | bytes) -> Config | ContextMessage | UserMessage | EndOfSpeech | bytes:
        size = len(frame) if isinstance(frame, bytes) else len(frame.encode("utf-8", "surrogatepass"))
        if size > self.limits.max_message_bytes:
            raise ProtocolError(
                v1.MESSAGE_TOO_LARGE, f"message of {size} bytes; the limit is {self.limits.max_message_bytes}"
            )
        if isinstance(frame, bytes) and self.listening is not None:
            return frame  # the microphone's audio
        return parse_message(frame, tuple(self.speaking.voices), self.limits.max_text_chars)

    def _handle(self, message: Config | ContextMessage | UserMessage | EndOfSpeech | bytes) -> list[Action]:
        if isinstance(message, bytes):
            return self.listening.audio(message)
        if isinstance(message, Config):
            return self._configure(message)
        if isinstance(message, UserMessage):
            return self._user(message)
        if isinstance(message, EndOfSpeech):
            if self.listening is None:
                raise ProtocolError(v1.INVALID_MESSAGE, "end_of_speech is for listen mode: send a config with `listen` first")
            return [Hear(end=True)]
        if message.type == "cancel" and message.context_id in self.chatting:
            return self.chatting.cancel(message.context_id)
        return self.speaking.message(message)

    def _configure(self, config: Config) -> list[Action]:
        if self.speaking.opened or self.chatting.ids or self.listening is not None:
            raise ProtocolError(v1.CONFIG_TOO_LATE, "config must come before the first speak, text, user or audio")
        if config.listen is not None and not self.listen:
            raise ProtocolError(v1.LISTEN_UNAVAILABLE, "this server runs no speech recognizer")
        if config.listen is not None and config.chat is not None and not self.chat:
            raise ProtocolError(v1.CHAT_UNAVAILABLE, "this server runs no chat model: `listen` without `chat` dictates")
        self.speaking.config = config
        if config.listen is not None:
            self.listening = Listening(config.listen, config.chat is not None, self.speaking, self.chatting, self._spoken)
        return [self._ready()]

    def _user(self, message: UserMessage) -> list[Action]:
        if not self.chat:
            raise ProtocolError(v1.CHAT_UNAVAILABLE, "this server runs no chat model", message.turn_id)
        contexts = self.speaking.contexts
        if message.turn_id in contexts:
            raise ProtocolError(v1.CONTEXT_EXISTS, f"turn '{message.turn_id}' has ended: its reply is a context", message.turn_id)
        if message.turn_id not in self.chatting and len(self.chatting.ids | contexts.keys()) >= self.limits.max_contexts:
            raise ProtocolError(v1.TOO_MANY_CONTEXTS, f"at most {self.limits.max_contexts} open contexts and turns", message.turn_id)
        return self.chatting.user(message)

    def _spoken(self, message: UserMessage) -> list[Action]:
        """An utterance's transcript as its chat turn's question; refused, an `error`."""
        try:
            return self._user(message)
        except ProtocolError as e:
            return [self.error(e.code, e.message, e.context_id, e.retry_after_ms)]

    # Synthesis events: a held reply's audio is chatting's, the rest speaking's

    def audio(self, job_id: int, pcm: np.ndarray, sentence_index: int, words: list[tuple[str, int, int]]) -> list[Action]:
        """A chunk of job `job_id`'s audio at the voice's rate; words (word, start, end
        sample of the job's audio) come with the first chunk of each sentence."""
        if (held := self.chatting.held(job_id)) is not None:
            held.chunks.append((pcm, sentence_index, words))
            return []
        return self.speaking.audio(job_id, pcm, sentence_index, words)

    def finished(self, job_id: int) -> list[Action]:
        """Job `job_id` delivered all its audio."""
        if (held := self.chatting.held(job_id)) is not None:
            held.finished = True
            return []
        return self.speaking.finished(job_id)

    def resuming(self, job_id: int, code: str, message: str, within_s: float) -> list[Action]:
        """Job `job_id`'s server or stage went away; held audio is only late."""
        return [] if self.chatting.held(job_id) is not None else self.speaking.resuming(job_id, code, message, within_s)

    def failed(self, job_id: int, code: str, message: str) -> list[Action]:
        """Job `job_id` failed; held audio is only dropped."""
        return [] if self.chatting.held_failed(job_id) else self.speaking.failed(job_id, code, message)

    def admitted(self, context_id: str) -> list[Action]:
        return self.speaking.admitted(context_id)

    def moved(self, context_id: str, position: int) -> list[Action]:
        return self.speaking.moved(context_id, position)

    # Thinker and recognizer events

    def thought(self, think_id: int, ids: list[int], text: str, accepted: int | None) -> list[Action]:
        """A piece of Thinker request `think_id`'s reply."""
        return self.chatting.thought(think_id, ids, text, accepted)

    def thought_done(self, think_id: int) -> list[Action]:
        return self.chatting.thought_done(think_id)

    def thought_failed(self, think_id: int, code: str, message: str) -> list[Action]:
        return self.chatting.thought_failed(think_id, code, message)

    def recognized(self, kind: str, utterance: object, audio_ms: int, text: str) -> list[Action]:
        """A recognizer event of `utterance`, a key unique in the connection."""
        return [] if self.listening is None else self.listening.recognized(kind, utterance, audio_ms, text)

    # The connection

    def idle(self, seconds: float) -> list[Action]:
        """No message for `seconds` (the idle timeout): close, unless a context is still
        speaking (a context left open with nothing to say is idle)."""
        if self.busy:
            return []
        log.info("session %s: idle for %g s, closing", self.id, seconds)
        return [self.error(v1.IDLE_TIMEOUT, f"no message for {seconds:g} s"), Close(1000, "idle timeout")]

    def abort(self) -> list[Action]:
        """The connection is gone: stop every job and Thinker request, give up every place in the queue."""
        return self.chatting.abort() + self.speaking.abort()

    def error(self, code: str, message: str, context_id: str | None = None, retry_after_ms: int | None = None) -> Send:
        """An `error` message, counted."""
        return self.speaking.error(code, message, context_id, retry_after_ms)

    def _ready(self) -> Send:
        cfg, voices = self.config, self.speaking.voices
        return Send(encode(
            "ready", session_id=self.id, format=cfg.format, sample_rate=cfg.sample_rate,
            channels=1, frame_ms=cfg.frame_ms, pre_skip=pre_skip(cfg.format, cfg.sample_rate), voices=list(voices),
            # Voices without word timings (the AR family): their contexts get no `timestamps`.
            without_word_timestamps=[name for name, v in voices.items() if not v.word_timestamps],
        ))
