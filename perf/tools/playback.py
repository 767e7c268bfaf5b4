"""The simulated player behind the underrun numbers (DESIGN.md, "How speed is measured").

One model, shared by every benchmark, so "a stall" means the same thing in each report:
the player starts `lead_s` after the first frame arrives and plays in real time; each
time it needs a sample that has not arrived it waits for it (a stall), and everything
after plays that much later. `stalls` applies it to a stream's arrivals afterwards;
`Player` frame by frame as they arrive (perf.soak's listeners, which also pace their
reading by it).
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.models import PLAYER_LEAD_S

EPSILON_S = 1e-9  # a frame this close to its time is in time (the sums of frame lengths round)


@dataclass(frozen=True)
class Stall:
    """The player had nothing to play from `at` for `seconds` (any clock)."""

    at: float
    seconds: float


class Player:
    """The model, frame by frame: `arrive` each frame as it arrives, `stop` when the
    stream ends otherwise than with its last frame played out (an error, a cancel)."""

    def __init__(self, lead_s: float = PLAYER_LEAD_S) -> None:
        self.lead_s = lead_s
        self.ends_at: float | None = None  # when what has arrived is played out; None before the first frame
        self.stopped = False

    @property
    def started(self) -> bool:
        return self.ends_at is not None

    def ahead(self, now: float) -> float:
        """Seconds of audio arrived and not yet played at `now` (0 before the first frame;
        below 0 while stalled)."""
        return 0.0 if self.ends_at is None else self.ends_at - now

    def arrive(self, at: float, seconds: float) -> Stall | None:
        """A frame of `seconds` of audio arrived `at`; the stall it ended, if it did."""
        if self.stopped:
            return None
        if self.ends_at is None:
            self.ends_at = at + self.lead_s + seconds
            return None
        stall = Stall(self.ends_at, at - self.ends_at) if at > self.ends_at + EPSILON_S else None
        self.ends_at = max(self.ends_at, at) + seconds
        return stall

    def stop(self, at: float) -> Stall | None:
        """The stream ended at `at` before its audio was all there: the stall under way
        then, if one was (the listener heard nothing since). Frames after are not played."""
        if self.stopped:
            return None
        self.stopped = True
        if self.ends_at is None or at <= self.ends_at + EPSILON_S:
            return None
        return Stall(self.ends_at, at - self.ends_at)


def stalls_heard(arrivals: list[tuple[float, float]], lead_s: float = PLAYER_LEAD_S) -> list[tuple[float, float]]:
    """Each stall of one stream: where in its audio it fell (seconds from its first
    sample: the end of the last frame played before it) and how long it lasted (s).

    `arrivals` holds one (arrival_time_s, audio_end_s) per frame, in stream order:
    when the frame reached the client (any clock) and where its audio ends, in seconds
    from the stream's first sample. Frame i is needed when playback reaches the end of
    frame i-1, so the first frame never stalls.
    """
    player, found = Player(lead_s), []
    previous_end = 0.0
    for arrived, end in arrivals:
        if stall := player.arrive(arrived, end - previous_end):
            found.append((previous_end, stall.seconds))
        previous_end = end
    return found


def stalls(arrivals: list[tuple[float, float]], lead_s: float = PLAYER_LEAD_S) -> tuple[int, float]:
    """(stall count, stalled ms) for one stream (`arrivals` as stalls_heard's)."""
    found = stalls_heard(arrivals, lead_s)
    return len(found), sum(seconds for _, seconds in found) * 1000
