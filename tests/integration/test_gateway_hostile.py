"""Hostile and malformed input against the running gateway, case by case.

Every case runs on its own connection. A case expects either errors with stable codes,
or speech (a `done` with whole audio), or, for the two abuses RFC 6455 makes fatal,
the connection closed with a given code. After each case that keeps its socket, the
same socket must still speak; meanwhile a bystander connection speaks without pause
and must never see an error.
"""

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

import pytest
import websockets

from gateway.settings import Settings
from perf.tools.workloads import workload
from speechstream import protocol as v1
from speechstream.client import connection
from tests.recorder import Recorder

LIMITS = Settings()  # the session gateway runs with the defaults


def msg(**fields) -> str:
    return json.dumps(fields, ensure_ascii=False)


def speak(context_id: str, text: str) -> str:
    return msg(type="speak", context_id=context_id, text=text)


@dataclass
class Case:
    frames: list[str | bytes]
    errors: list[str] = field(default_factory=list)  # codes, in order
    speaks: str | None = None  # a context that must end in `done` with audio
    closes: int | None = None  # the close code, for a case that ends the connection
    text_frame: bool = False  # send bytes as a text frame (invalid UTF-8)


MANY = LIMITS.max_contexts
CASES = {
    # Not JSON, or not an object.
    "invalid json": Case(["{not json"], [v1.INVALID_JSON]),
    "truncated json": Case(['{"type": "speak"'], [v1.INVALID_JSON]),
    "empty frame": Case([""], [v1.INVALID_JSON]),
    "nested 100000 deep": Case(["[" * 100_000 + "]" * 100_000], [v1.INVALID_JSON]),
    "json null": Case(["null"], [v1.INVALID_MESSAGE]),
    "json array": Case(["[]"], [v1.INVALID_MESSAGE]),
    "json string": Case(['"speak"'], [v1.INVALID_MESSAGE]),
    "json number": Case(["42"], [v1.INVALID_MESSAGE]),
    # Wrong or missing types.
    "empty object": Case(["{}"], [v1.MISSING_FIELD]),
    "type null": Case(['{"type": null}'], [v1.MISSING_FIELD]),
    "type number": Case(['{"type": 7}'], [v1.INVALID_FIELD]),
    "unknown type": Case([msg(type="sing")], [v1.UNKNOWN_TYPE]),
    "type in capitals": Case([msg(type="SPEAK", context_id="a", text="Hi.")], [v1.UNKNOWN_TYPE]),
    # Wrong fields.
    "speak without context": Case([msg(type="speak", text="Hi.")], [v1.MISSING_FIELD]),
    "speak without text": Case([msg(type="speak", context_id="a")], [v1.MISSING_FIELD]),
    "text is a number": Case([msg(type="speak", context_id="a", text=42)], [v1.INVALID_FIELD]),
    "text is null": Case([msg(type="speak", context_id="a", text=None)], [v1.INVALID_FIELD]),
    "text is a list": Case([msg(type="text", context_id="a", text=["Hi."])], [v1.INVALID_FIELD]),
    "context id a number": Case([msg(type="speak", context_id=5, text="Hi.")], [v1.INVALID_FIELD]),
    "context id empty": Case([speak("", "Hi.")], [v1.INVALID_FIELD]),
    "context id too long": Case([speak("x" * 65, "Hi.")], [v1.INVALID_FIELD]),
    "lone surrogate in text": Case(['{"type": "speak", "context_id": "a", "text": "Hi \\ud800."}'], [v1.INVALID_FIELD]),
    "text over the limit": Case([speak("a", "word " * (LIMITS.max_text_chars // 5 + 1))], [v1.TEXT_TOO_LONG]),
    "text piling up past the limit": Case(
        [msg(type="text", context_id="a", text="w" * (LIMITS.max_text_chars // 2)) for _ in range(3)]
        + [msg(type="cancel", context_id="a")],
        [v1.TEXT_TOO_LONG],
    ),
    # Fewer characters than max_message_bytes, but more UTF-8 bytes.
    "message over max_message_bytes": Case([speak("a", "é" * (LIMITS.max_message_bytes // 2 + 1))], [v1.MESSAGE_TOO_LARGE]),
    # Config.
    "unknown voice": Case([msg(type="config", voice="nobody")], [v1.UNKNOWN_VOICE]),
    "unknown format": Case([msg(type="config", format="mp3")], [v1.UNSUPPORTED_FORMAT]),
    "odd sample rate": Case([msg(type="config", sample_rate=44100)], [v1.INVALID_FIELD]),
    "sample rate as a string": Case([msg(type="config", sample_rate="48000")], [v1.INVALID_FIELD]),
    "odd frame length": Case([msg(type="config", frame_ms=25)], [v1.INVALID_FIELD]),
    "timestamps as a string": Case([msg(type="config", timestamps="yes")], [v1.INVALID_FIELD]),
    "length_scale out of range": Case([msg(type="config", length_scale=100)], [v1.INVALID_FIELD]),
    "length_scale NaN": Case(['{"type": "config", "length_scale": NaN}'], [v1.INVALID_FIELD]),
    "noise_scale infinite": Case(['{"type": "config", "noise_scale": 1e400}'], [v1.INVALID_FIELD]),
    "noise_w a boolean": Case([msg(type="config", noise_w=True)], [v1.INVALID_FIELD]),
    "seed fractional": Case([msg(type="config", seed=1.5)], [v1.INVALID_FIELD]),
    "seed past int64": Case([msg(type="config", seed=2**70)], [v1.INVALID_FIELD]),
    # Out of order.
    "flush unknown context": Case([msg(type="flush", context_id="none")], [v1.UNKNOWN_CONTEXT]),
    "cancel unknown context": Case([msg(type="cancel", context_id="none")], [v1.UNKNOWN_CONTEXT]),
    "close unknown context": Case([msg(type="close", context_id="none")], [v1.UNKNOWN_CONTEXT]),
    "speak twice on one context": Case(
        [speak("a", workload("paragraph")), speak("a", "Again.")], [v1.CONTEXT_EXISTS], speaks="a"
    ),
    "text after close": Case(
        [speak("a", workload("paragraph")), msg(type="text", context_id="a", text="More.")], [v1.CONTEXT_CLOSED], speaks="a"
    ),
    "flush after close": Case(
        [speak("a", workload("paragraph")), msg(type="flush", context_id="a")], [v1.CONTEXT_CLOSED], speaks="a"
    ),
    "config after speech": Case([speak("a", "Hi."), msg(type="config", format="pcm_s16le")], [v1.CONFIG_TOO_LATE], speaks="a"),
    "too many contexts": Case(
        [msg(type="text", context_id=f"k{i}", text="waiting") for i in range(MANY + 1)]
        + [msg(type="cancel", context_id=f"k{i}") for i in range(MANY)],
        [v1.TOO_MANY_CONTEXTS],
    ),
    # Binary from the client.
    "binary frame": Case([b"\x01\x02\x03"], [v1.BINARY_NOT_ACCEPTED]),
    "empty binary frame": Case([b""], [v1.BINARY_NOT_ACCEPTED]),
    "fake audio frame": Case([v1.audio_frame(1, 0, 0, b"\xff" * 80, True)], [v1.BINARY_NOT_ACCEPTED]),
    # Text that must simply be spoken.
    "unknown fields ignored": Case([msg(type="speak", context_id="a", text="Hello there.", extra={"x": 1})], speaks="a"),
    "empty text": Case([speak("a", "")], speaks="a"),
    "whitespace text": Case([speak("a", "  \n\t  ")], speaks="a"),
    "control characters": Case([speak("a", "\x00\x07Hello\x1b[31m there\x7f.")], speaks="a"),
    "emoji": Case([speak("a", "I ❤️ 🐍 and 🎉, truly 👍🏽!")], speaks="a"),
    "mixed scripts": Case([speak("a", "Hello, мир, 世界, مرحبا, שלום, नमस्ते.")], speaks="a"),
    "zero-width and bidi marks": Case([speak("a", "Left\u200b\u202eright\u202c and\ufeff on.")], speaks="a"),
    "markup": Case([speak("a", "<script>alert('x')</script> & <b>bold</b>")], speaks="a"),
    "punctuation only": Case([speak("a", "?!...;;—")], speaks="a"),
    "numbers and symbols": Case([speak("a", "$1,000,000.99, 3.14159, #1 & 100% @home.")], speaks="a"),
    "a 2000-letter word": Case([speak("a", "a" * 2000)], speaks="a"),
    "2000 one-character deltas": Case(
        [msg(type="text", context_id="a", text=ch) for ch in (workload("paragraph") * 3)[:2000]]
        + [msg(type="close", context_id="a")],
        speaks="a",
    ),
    # Abuse that ends the connection (and only it).
    "frame over the hard size limit": Case([b"{" + b" " * LIMITS.max_frame_bytes + b"}"], closes=1009, text_frame=True),
    "invalid UTF-8 in a text frame": Case([b'{"type": "speak", "text": "\xff\xfe"}'], closes=1007, text_frame=True),
}


class Bystander:
    """Speaks paragraphs back to back on its own connection, in a thread, until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.done = 0
        self.errors: list[dict] = []
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._thread)

    def _thread(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as e:  # reported by the test that checks the bystander
            self.failure = e

    async def _run(self) -> None:
        async with connection(self.url) as ws:
            client = Recorder(ws)
            await client.until("ready")
            while not self.stop.is_set():
                context = f"b{self.done}"
                await client.send(type="speak", context_id=context, text=workload("paragraph"))
                async with asyncio.timeout(60):
                    while (event := await client.read()).kind not in ("done", "error"):
                        pass
                if event.kind == "error":
                    self.errors.append(event.message)
                    return
                frames = client.audio(context)
                assert [f.seq for f in frames] == list(range(len(frames))) and frames[-1].last
                self.done += 1


@pytest.fixture(scope="module")
def bystander(gateway):
    b = Bystander(gateway)
    b.thread.start()
    yield b
    b.stop.set()
    b.thread.join(90)


async def run_case(url: str, case: Case) -> tuple[list[str], Recorder, int | None]:
    async with connection(url) as ws:
        client = Recorder(ws)
        await client.until("ready")
        for frame in case.frames:
            await ws.send(frame, text=True) if case.text_frame else await ws.send(frame)
        if case.closes is not None:
            with pytest.raises(websockets.ConnectionClosedError):
                await client.until("never", timeout=10)
            return [], client, ws.protocol.close_rcvd.code
        if case.speaks:
            await client.until("done", case.speaks, timeout=120)
        await client.send(type="speak", context_id="after", text="Still here.")
        await client.until("done", "after")
    return [e["code"] for e in client.messages("error")], client, None


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input(name, gateway, bystander):
    case = CASES[name]
    codes, client, close_code = asyncio.run(run_case(gateway, case))
    if case.closes is not None:
        assert close_code == case.closes
        codes, client, _ = asyncio.run(run_case(gateway, Case([])))  # the server still serves
        assert codes == []
        return
    assert codes == case.errors
    after = client.audio("after")
    assert after and after[-1].last and [f.seq for f in after] == list(range(len(after)))
    if case.speaks:
        frames = client.audio(case.speaks)
        assert frames and frames[-1].last and [f.seq for f in frames] == list(range(len(frames)))


def test_the_bystander_spoke_throughout_without_an_error(bystander):
    assert len(CASES) >= 40
    deadline = time.monotonic() + 60
    while bystander.done < 1 and bystander.thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert bystander.thread.is_alive()  # it only ends when stopped
    bystander.stop.set()
    bystander.thread.join(90)
    assert bystander.failure is None and bystander.errors == [] and bystander.done >= 1
