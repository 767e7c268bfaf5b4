"""The simulated player behind the underrun numbers (DESIGN.md, "How speed is measured").

One model, shared by every benchmark, so "a stall" means the same thing in each report:
the player starts `lead_s` after the first frame arrives and plays in real time; each
time it needs a sample that has not arrived it waits for it (a stall), and everything
after plays that much later.
"""

from __future__ import annotations

from contract.models import PLAYER_LEAD_S


def stalls(arrivals: list[tuple[float, float]], lead_s: float = PLAYER_LEAD_S) -> tuple[int, float]:
    """(stall count, stalled ms) for one stream.

    `arrivals` holds one (arrival_time_s, audio_end_s) per frame, in stream order:
    when the frame reached the client (any clock) and where its audio ends, in seconds
    from the stream's first sample. Frame i is needed when playback reaches the end of
    frame i-1, so the first frame never stalls.
    """
    if not arrivals:
        return 0, 0.0
    start = arrivals[0][0] + lead_s  # when the player plays the stream's first sample
    count, stalled = 0, 0.0
    for (_, previous_end), (arrived, _) in zip(arrivals, arrivals[1:]):
        wait = arrived - (start + stalled + previous_end)
        if wait > 0:
            count, stalled = count + 1, stalled + wait
    return count, stalled * 1000
