"""Listen mode, sans I/O: a connection's microphone audio checked and decoded for the
recognizer, and the recognizer's events turned into protocol v1's messages, each
utterance a turn with an id of the server's. What a spoken turn does in chat mode (a
chat turn, barge-in) is the session's; the recognizer's stream is the shell's
(gateway/recognition.py)."""

from __future__ import annotations

from dataclasses import dataclass

from contract import models as c
from gateway.actions import Hear
from gateway.audio import MicrophoneDecoder
from gateway.protocol import ListenConfig, ProtocolError, encode
from speechstream import protocol as v1


@dataclass(frozen=True)
class Recognized:
    """One recognizer event of an utterance: its turn and the message the client gets."""

    turn_id: str
    message: str


class Microphone:
    """One connection's microphone in listen mode: its audio in, the recognizer's events out."""

    def __init__(self, config: ListenConfig) -> None:
        self.config = config
        self.decoder = MicrophoneDecoder(config.format, config.sample_rate, c.ASR_SAMPLE_RATE, v1.LISTEN_MAX_MESSAGE_MS)
        self._first_at: float | None = None  # when the first audio came
        self._flooding = False  # audio ran too far ahead, and the client was told
        self._turns: dict[object, str] = {}  # the recognizer's utterance → its turn id
        self._last_turn = 0

    def audio(self, message: bytes, now: float) -> list[Hear]:
        """A microphone message: its audio for the recognizer. ProtocolError if it breaks
        the format's rules or runs too far ahead of real time (it is dropped; nothing
        else is lost)."""
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
        if utterance not in self._turns:
            self._last_turn += 1
            self._turns[utterance] = f"turn-{self._last_turn}"
        turn_id = self._turns[utterance]
        if kind == c.SPEECH_STARTED or kind == c.SPEECH_STOPPED:
            return Recognized(turn_id, encode(kind, turn_id=turn_id, audio_ms=audio_ms))
        if kind == c.FINAL:
            del self._turns[utterance]
        return Recognized(turn_id, encode("transcript", turn_id=turn_id, text=text, final=kind == c.FINAL))
