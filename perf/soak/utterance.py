"""One utterance as a listener hears it: its context's events checked against protocol v1,
and its player's stalls."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from perf.soak.tally import CANCELLED, COMPLETED, Failure
from perf.tools.playback import Player, Stall
from speechstream import protocol as v1
from speechstream.client import Event


@dataclass
class Utterance:
    """One context's events (routed by client.Router), checked against protocol v1, and
    its player."""

    context_id: str
    frame_s: float
    opened: bool = False  # its audio_start came
    next_seq: int = 0
    last_frame: bool = False
    done: bool = False
    cancel_sent: bool = False
    audio_s: float = 0.0
    resumings: int = 0  # `resuming` messages: the gateway issues the rest again
    within_s: float | None = None  # their bound
    player: Player = field(default_factory=Player)
    stalls: list[tuple[Stall, bool]] = field(default_factory=list)  # each, and whether a `resuming` came during it
    _resumings_heard: int = 0  # `resuming`s before the last frame

    def ahead(self, now: float) -> float:
        """Audio received but not yet played (below 0 while the player stalls)."""
        return self.player.ahead(now)

    def stop(self, now: float) -> None:
        """The listener stops playing (it cancels, vanishes, or the stream failed): a
        stall under way counts until now."""
        if stall := self.player.stop(now):
            self.stalls.append((stall, self.resumings > self._resumings_heard))

    def handle(self, event: Event) -> str | None:
        """The outcome once the context has ended, else None; Failure if the server errs."""
        if event.context_id != self.context_id:
            raise Failure("stray_frame" if event.frame else f"foreign_{event.kind}")
        if event.frame:
            self.frame(event.frame)
            return None
        kind, m = event.kind, event.message
        if kind == "audio_start" and not self.opened:
            self.opened = True
        elif kind == "done" and not self.done:
            if not self.last_frame:
                raise Failure("done_without_last_frame")
            self.done = True
            return None if self.cancel_sent else COMPLETED  # a cancel in flight still gets an answer
        elif kind == "cancelled" and self.cancel_sent:
            return COMPLETED if self.done else CANCELLED
        elif kind == "resuming" and not self.done and not self.last_frame:
            self.resumings += 1  # the frames go on, seq and offsets continuing
            if isinstance(m.get("within_ms"), (int, float)):
                self.within_s = max(self.within_s or 0.0, m["within_ms"] / 1000)
        elif kind == "error" and self.done and self.cancel_sent and m.get("code") == v1.UNKNOWN_CONTEXT:
            return COMPLETED  # the cancel arrived after the context had ended: a race, not a fault
        elif kind == "error":
            raise Failure(f"error_{m.get('code')}")
        else:
            raise Failure(f"unexpected_{kind}")
        return None

    def frame(self, frame: v1.AudioFrame) -> None:
        if self.last_frame:
            raise Failure("stray_frame")
        if frame.seq != self.next_seq:
            raise Failure("seq_out_of_order")
        self.next_seq += 1
        self.last_frame = frame.last
        if stall := self.player.arrive(time.monotonic(), self.frame_s):
            self.stalls.append((stall, self.resumings > self._resumings_heard))
        self._resumings_heard = self.resumings
        self.audio_s += self.frame_s
