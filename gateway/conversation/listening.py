"""Listening mode, sans I/O: a connection's microphone audio checked and decoded for the
recognizer, the recognizer's events turned into protocol v1's messages (each utterance
with an id of the server's, the wire's `turn_id`), and in chat mode what an utterance
does: its transcripts are a chat turn's question, and new speech barges in on the
replies. The recognizer stream is the shell's (gateway/backends/recognition.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contract import models as c
from gateway.conversation.actions import Action, Hear, Send
from gateway.conversation.audio import MicrophoneDecoder
from gateway.conversation.chatting import Chatting
from gateway.conversation.speaking import Speaking
from gateway.messages import ListenConfig, ProtocolError, UserMessage, encode
from speechstream import protocol as v1


@dataclass(frozen=True)
class Recognized:
    """One recognizer event of an utterance: the utterance's id and the message the client gets."""

    utterance_id: str
    message: str


class Microphone:
    """One connection's microphone: its audio in, the recognizer's events out as messages."""

    def __init__(self, config: ListenConfig) -> None:
        self.config = config
        self.decoder = MicrophoneDecoder(config.format, config.sample_rate, c.ASR_SAMPLE_RATE, v1.LISTEN_MAX_MESSAGE_MS)
        self._first_at: float | None = None  # when the first audio came
        self._flooding = False  # audio ran too far ahead, and the client was told
        self._utterance_ids: dict[object, str] = {}  # the recognizer's utterance → its id on the wire
        self._last_utterance = 0

    def audio(self, message: bytes, now: float) -> list[Hear]:
        """A microphone message: its audio for the recognizer, placed on the microphone
        timeline. ProtocolError if it breaks the format's rules or runs too far ahead of
        real time (it is dropped; nothing else is lost)."""
        self._first_at = now if self._first_at is None else self._first_at
        ahead_s = self.decoder.heard_ms / 1000 - (now - self._first_at)
        if ahead_s > v1.LISTEN_MAX_AHEAD_S:
            if self._flooding:
                return []  # told once per flood
            self._flooding = True
            raise ProtocolError(v1.AUDIO_NOT_ACCEPTED, f"the microphone's audio runs {ahead_s:.1f} s ahead of real "
                                "time; audio is dropped until it is back within "
                                f"{v1.LISTEN_MAX_AHEAD_S:g} s (send it as it is recorded)")
        self._flooding = False
        at_ms = self.decoder.heard_ms
        try:
            return [Hear(self.decoder.decode(message), at_ms=at_ms)]
        except ValueError as e:
            raise ProtocolError(v1.AUDIO_NOT_ACCEPTED, f"microphone audio dropped: {e}") from None

    def recognized(self, kind: str, utterance: object, audio_ms: int, text: str) -> Recognized:
        """A recognizer event of `utterance` (a key unique in the connection) as the client's message."""
        if utterance not in self._utterance_ids:
            self._last_utterance += 1
            self._utterance_ids[utterance] = f"turn-{self._last_utterance}"
        utterance_id = self._utterance_ids[utterance]
        if kind == c.SPEECH_STARTED or kind == c.SPEECH_STOPPED:
            return Recognized(utterance_id, encode(kind, turn_id=utterance_id, audio_ms=audio_ms))
        if kind == c.FINAL:
            del self._utterance_ids[utterance]
        return Recognized(utterance_id, encode("transcript", turn_id=utterance_id, text=text, final=kind == c.FINAL))


class Listening:
    """A connection in listen mode: dictation, or with `chat` a spoken conversation in
    which each utterance is a chat turn of the same id and new speech barges in."""

    def __init__(self, config: ListenConfig, chat: bool, speaking: Speaking, turns: Chatting,
                 ask: Callable[[UserMessage], list[Action]]) -> None:
        self.microphone = Microphone(config)
        self.chat = chat
        self.speaking = speaking
        self.turns = turns
        self.ask = ask  # an utterance's transcript as the chat turn's `user` message

    def audio(self, message: bytes) -> list[Action]:
        return self.microphone.audio(message, self.speaking.clock())

    def recognized(self, kind: str, utterance: object, audio_ms: int, text: str) -> list[Action]:
        """A recognizer event (one of contract.models.ASR_EVENTS) of `utterance`: its
        message, and in chat mode what the utterance does to the conversation."""
        event = self.microphone.recognized(kind, utterance, audio_ms, text)
        actions: list[Action] = [Send(event.message)]
        if not self.chat:
            return actions  # dictation
        if kind == c.SPEECH_STARTED:
            return actions + (self._barge_in() if self.microphone.config.barge_in else [])
        if not self.microphone.config.reply:
            return actions  # the client asks for replies itself
        if kind == c.PARTIAL and text.strip():
            return actions + self.ask(UserMessage(event.utterance_id, text, final=False))
        if kind == c.FINAL:  # an empty one was noise: no chat turn
            return actions + (self.ask(UserMessage(event.utterance_id, text, final=True)) if text.strip()
                              else self.turns.forget(event.utterance_id))
        return actions

    def _barge_in(self) -> list[Action]:
        """New speech: every reply answered or being spoken stops, and the conversation
        keeps of each only the words its listener heard."""
        now = self.speaking.clock()
        replies, contexts = self.speaking.replies, self.speaking.contexts
        actions: list[Action] = []
        for turn_id in dict.fromkeys([*(t for t in self.turns.ids if self.turns.answering(t)), *replies]):
            reply = replies.pop(turn_id, None)
            if reply is not None and reply.id not in contexts and reply.heard_ms(now) >= reply.encoder.position_ms:
                continue  # heard whole
            actions += self.turns.interrupt(turn_id, "" if reply is None else reply.heard_text(now))
            if reply is not None and reply.id in contexts:
                actions += self.speaking.cancel(reply)
            elif reply is not None:
                actions.append(Send(encode("cancelled", context_id=turn_id)))  # all sent, still playing: the client stops it
        return actions
