"""Locust load on the gateway's WebSocket (protocol v1), with TTFP and underruns as metrics.

    .venv-locust/bin/locust -f perf/frameworks/locustfile.py --headless -u 8 -r 8 -t 60s \\
        --host ws://127.0.0.1:8080 --workload paragraph --csv perf/results/speech/locust

Each user is one client on its own connection, speaking a perf/tools/workloads.py text
(`--workload` or LOCUST_WORKLOAD: short, paragraph, long) back to back in Opus. Per
utterance it reports, with request_type "WS":

- `ttfp`: `speak` sent → first binary audio frame (DESIGN.md's TTFP), in ms;
- `total`: `speak` sent → `done`, in ms; its size is the audio payload's bytes;
- `underrun_ms`: stalled milliseconds of the simulated player (perf/tools/playback.py: starts
  50 ms after the first frame, plays in real time); its "size" is the stall count, so
  Locust's average content size is the mean number of stalls per utterance.

A server error or a dropped connection is a failure of `speak`; the user reconnects
a second later. `--host` is the gateway's ws:// base (the /v1/stream path is added) or
the full URL; `--api-key` (LOCUST_API_KEY) for a gateway that requires one.
Times are taken where a user's greenlet sees the frame, so a Locust process short of CPU
adds its own delay: past a few dozen users, spread them with `--processes N`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import websocket  # websocket-client (perf/frameworks/locust-requirements.txt)
from locust import User, events, task

# perf/ is not an installed package, and locust puts only this file's folder on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perf.tools.playback import stalls  # noqa: E402
from perf.tools.workloads import WORKLOADS, workload  # noqa: E402
from speechstream.client import SyncSpeechClient, audio_end_s  # noqa: E402
from speechstream.protocol import PROTOCOL_PATH  # noqa: E402

BACKOFF_S = 1.0  # after a failure: a gateway that is down is not hammered in a loop


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    parser.add_argument("--workload", choices=WORKLOADS, default="short", env_var="LOCUST_WORKLOAD", help="text each user speaks")
    parser.add_argument("--api-key", default="", env_var="LOCUST_API_KEY", help="the gateway's API key, if it has one")


def stream_url(host: str) -> str:
    """The gateway's base URL gets the protocol's path; a full URL is kept as it is."""
    return host if host.rstrip("/").endswith(PROTOCOL_PATH) else host.rstrip("/") + PROTOCOL_PATH


def connect(url: str, api_key: str | None) -> SyncSpeechClient:
    """The project's client over websocket-client's plain socket instead of websockets.sync.

    websockets.sync reads in a background thread whose selector still watches the socket
    when another greenlet closes it (Locust stopping a user mid-utterance, a keepalive
    timeout), and gevent's loop then aborts the process ("libev: I/O watcher with invalid
    fd found in epoll_ctl"). websocket-client reads in the caller's greenlet only."""
    headers = [f"Authorization: Bearer {api_key}"] if api_key else None
    return SyncSpeechClient.over(websocket.create_connection(url, header=headers, suppress_origin=True))


@dataclass
class Utterance:
    """One `speak`, timed on the client's clock (seconds)."""

    sent: float
    done: float
    arrivals: list[tuple[float, float]]  # (arrival time, audio end) per frame, for playback.stalls
    size: int  # audio payload bytes


def utter(client: SyncSpeechClient, text: str) -> Utterance:
    """Speak `text`; the times are the client's (the `speak` going out, each event's arrival)."""
    arrivals, size = [], 0
    for event in client.events(text):
        if event.frame:
            arrivals.append((event.at, audio_end_s(event.frame, client.ready)))
            size += len(event.frame.payload)
    return Utterance(client.sent, event.at, arrivals, size)  # the last event is `done`


class SpeechUser(User):
    """One WebSocket client speaking the chosen workload over and over."""

    client: SyncSpeechClient | None = None

    def on_start(self) -> None:
        self.text = workload(self.environment.parsed_options.workload)

    def on_stop(self) -> None:
        self.disconnect()

    def disconnect(self) -> None:
        if self.client:
            self.client.close()
            self.client = None

    def report(self, name: str, ms: float, size: int = 0, exception: Exception | None = None) -> None:
        self.environment.events.request.fire(
            request_type="WS", name=name, response_time=ms, response_length=size, exception=exception, context={}
        )

    def connected(self) -> SyncSpeechClient:
        if not self.client:
            api_key = self.environment.parsed_options.api_key or None
            self.client = connect(stream_url(self.host), api_key)
        return self.client

    @task
    def speak(self) -> None:
        started = time.perf_counter()
        try:
            u = utter(self.connected(), self.text)
            if not u.arrivals:
                raise RuntimeError("done without audio")
        except Exception as e:  # a failed utterance, whatever broke; the next one reconnects
            self.report("speak", (time.perf_counter() - started) * 1000, exception=e)
            self.disconnect()
            time.sleep(BACKOFF_S)  # gevent's sleep (locust patches time)
            return
        self.report("ttfp", (u.arrivals[0][0] - u.sent) * 1000)
        self.report("total", (u.done - u.sent) * 1000, u.size)
        count, stalled_ms = stalls(u.arrivals)
        self.report("underrun_ms", stalled_ms, count)
