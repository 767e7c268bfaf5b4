"""When a context's first audio may go out without a stall after it, sans I/O.

Started together with many other streams, a stream's first chunk can come in time while
the chunks after it come slower than real time: its listener hears a start, then a stall.
A listener would rather hear a slightly later start that never stops. So the first audio
of a context (after it was idle) is held until the audio in hand covers what the rest
will lack at the rate this stream's audio has come so far, plus the longest wait for a
chunk so far; then all of it goes out. A stream that comes faster than real time (any
stream on a server with cores to spare) goes out with its first chunk.

The wait for the first chunk counts among the waits: under a burst of starts the first
chunk comes late but large, a stream's whole first sentence at a rate near real time,
and the next audio, another sentence, waits as long behind the other streams' work. And
the first chunks of the other streams starting go before this stream's next at the
servers, however fast its own came: the audio in hand must outlast their making too.

If the audio so far (`in_hand` seconds of it, `elapsed` seconds after the request) came
at rate r = in_hand / elapsed, the rest (`expected` − `in_hand`) takes rest / r to come
while the player plays in_hand + rest; it never runs dry if in_hand ≥ rest × (1 − r) / r.

Part of the first wait is the voice's prompt: what its servers take before any audio with
nothing else to make (an AR Talker's prefill and the frames its first chunk looks ahead
to). It comes once per request, so the rate leaves it out of `elapsed`: the least first
wait of the voice's recent starts (SpeakingPace.prompt_s). What a start waited beyond it,
a queue's wait, still counts, as the longest gap does the whole first wait.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from contract.models import SECONDS_PER_CHAR
from gateway.conversation.actions import Action


@dataclass
class StartGate:
    """Holds one context's first audio (its messages, in order) until it is safe to send."""

    began: float  # when the context's synthesis was asked for
    expected_s: float  # the audio its text in hand will likely make
    prompt_s: float = 0.0  # the voice's prompt: the least wait for a first chunk of its recent starts
    in_hand_s: float = 0.0
    first_chunk_s: float = 0.0  # the audio the first chunk held
    longest_gap_s: float = 0.0  # the longest wait for a chunk so far, the first one's included
    last_chunk: float = field(init=False)  # when the last chunk came (the request, before the first)
    held: list[Action] = field(default_factory=list)  # what would have been sent, in order
    first_sample: int | None = None  # where in the context's audio the first frame held starts

    def __post_init__(self) -> None:
        self.last_chunk = self.began

    def arrived(self, seconds: float, now: float) -> None:
        """A chunk of `seconds` of audio came at `now`."""
        self.longest_gap_s = max(self.longest_gap_s, now - self.last_chunk)
        self.last_chunk = now
        if not self.in_hand_s:
            self.first_chunk_s = seconds
        self.in_hand_s += seconds

    def lack_s(self, now: float) -> float:
        """The audio the player would run out of if it started now: what the rest lacks
        at the rate the audio has come so far, the voice's prompt aside."""
        elapsed = now - self.began - self.prompt_s
        if self.in_hand_s <= 0:
            return float("inf") if elapsed > 0 else 0.0
        if elapsed <= 0:  # came within the prompt's wait: as fast as the voice starts
            return 0.0
        rate = self.in_hand_s / elapsed
        rest = max(self.expected_s - self.in_hand_s, 0.0)
        return rest * (1 - rate) / rate if rate < 1 else 0.0

    def outlasts_its_queue(self) -> bool:
        """Whether the audio in hand outlasts the longest wait for a chunk so far, the
        voice's prompt aside: the queue it waited in. A next chunk that queues as long, even
        served first, then still comes in time."""
        return self.in_hand_s >= self.longest_gap_s - self.prompt_s

    def is_open(self, now: float, others_first_s: float = 0.0) -> bool:
        """Whether the audio in hand may go out now, the servers taking `others_first_s`
        for the first chunks of the other streams starting: all that is expected is in
        hand, or it outlasts what the rest will lack, the longest wait for a chunk and
        those first chunks."""
        if self.in_hand_s <= 0:
            return False
        if self.in_hand_s >= self.expected_s:
            return True
        return self.in_hand_s >= self.lack_s(now) + self.longest_gap_s + others_first_s


class SpeakingPace:
    """What a start gate expects of a voice, learned from its jobs: the seconds of audio it
    makes per character of text, and its prompt's wait. Voices differ (an AR voice's pace
    is its model's, not Piper's), and a gate that expects too little opens as soon as that
    little is in hand, a stall after it.

    Per voice, the ratio of the audio to the characters of its jobs, each job's weight
    decaying by DECAY per job after it, from a prior of PRIOR_CHARS at SECONDS_PER_CHAR;
    and the least wait for a first chunk over its last PROMPT_STARTS starts (none: 0). The
    least, as a start alone at the servers waits for its prompt only; a wait that every
    recent start shared is taken for the prompt's, which PROMPT_STARTS makes rare."""

    DECAY = 0.9
    PRIOR_CHARS = 100.0
    _PRIOR = (PRIOR_CHARS * SECONDS_PER_CHAR, PRIOR_CHARS)  # (audio seconds, characters)
    PROMPT_STARTS = 64

    def __init__(self) -> None:
        self._sums: dict[str, tuple[float, float]] = {}  # voice: (audio seconds, characters), decayed
        self._first_waits: dict[str, deque[float]] = {}  # voice: its last starts' waits for a first chunk

    def seconds_per_char(self, voice: str) -> float:
        audio_s, chars = self._sums.get(voice, self._PRIOR)
        return audio_s / chars

    def spoke(self, voice: str, chars: int, audio_s: float) -> None:
        """A job of `chars` characters made `audio_s` seconds of `voice`'s audio at its own pace."""
        if chars <= 0:
            return
        before_s, before_chars = self._sums.get(voice, self._PRIOR)
        self._sums[voice] = (self.DECAY * before_s + audio_s, self.DECAY * before_chars + chars)

    def prompt_s(self, voice: str) -> float:
        return min(self._first_waits.get(voice, (0.0,)))

    def started(self, voice: str, wait_s: float) -> None:
        """A start of `voice` (a context's first job after idle) had its first chunk `wait_s` after its request."""
        self._first_waits.setdefault(voice, deque(maxlen=self.PROMPT_STARTS)).append(wait_s)
