"""Load clients for the benchmark: one per system, each reducing an utterance to a
`perf.tools.metrics.Stream` (when the request went out, when each piece of audio came back).

- `GatewayClient`: ours, protocol v1 over WebSocket (`client.SpeechClient`), Opus.
- `PiperHttpClient`: Piper's HTTP server, `POST /synthesize`, which answers with the whole WAV.
- `WyomingClient`: wyoming-piper over TCP, the Wyoming protocol (a JSON header line, then
  optional JSON data and a binary payload), which streams PCM sentence by sentence.

`run_level` puts N clients on one text at once, each on its own connection;
`run_arrivals` lets listeners arrive one by one, at the times `poisson_arrivals` draws.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import aiohttp
import websockets

from contract.models import PLAYER_LEAD_S
from perf.tools.metrics import Stream, WavProgress
from perf.tools.playback import stalls
from speechstream.client import SpeechClient, SpeechError, audio_end_s

STREAM_TIMEOUT_S = 600.0  # one utterance (32 whole WAVs at once on a busy machine take minutes)


class Client(Protocol):
    async def speak(self, text: str) -> Stream: ...

    async def close(self) -> None: ...


Connect = Callable[[], Awaitable[Client]]


class GatewayClient:
    """Our gateway: one WebSocket, one context per utterance, Opus frames; the times are
    the client library's (the `speak` going out, each frame's arrival)."""

    def __init__(self, client: SpeechClient) -> None:
        self.client = client

    @classmethod
    async def connect(cls, url: str) -> GatewayClient:
        return cls(await SpeechClient.connect(url, format="opus"))

    async def speak(self, text: str) -> Stream:
        context = self.client.context()
        stream = Stream(await context.speak(text))
        try:
            stream.arrivals = [(e.at, audio_end_s(e.frame, self.client.ready)) async for e in context.events() if e.frame]
        except SpeechError as e:  # `server_busy` is a refusal, not a failure: timed from the speak
            stream.error, stream.answered = e.code, time.perf_counter()
            stream.retry_after_s = e.retry_after_ms / 1000 if e.retry_after_ms is not None else None
            return stream
        if context.done is None:
            stream.error = "ended_without_done"
        return stream

    async def close(self) -> None:
        await self.client.close()


class PiperHttpClient:
    """Piper's Flask server: one keep-alive HTTP connection, the WAV body timed as it arrives."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url

    @classmethod
    async def connect(cls, url: str) -> PiperHttpClient:
        return cls(aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)), url)

    async def speak(self, text: str) -> Stream:
        stream, body = Stream(time.perf_counter()), WavProgress()
        async with self.session.post(self.url, json={"text": text}) as response:
            if response.status != 200:
                stream.error = f"http_{response.status}"
                return stream
            async for piece in response.content.iter_any():
                body.feed(time.perf_counter(), piece)
        stream.arrivals = body.arrivals
        return stream

    async def close(self) -> None:
        await self.session.close()


async def read_wyoming_event(reader: asyncio.StreamReader) -> tuple[str, dict, bytes]:
    """One Wyoming event: (type, data, payload). The header line may carry `data` inline
    and announce more of it (`data_length`) and a payload (`payload_length`) after it."""
    line = await reader.readline()
    if not line:
        raise ConnectionError("wyoming server closed the connection")
    header = json.loads(line)
    data = dict(header.get("data") or {})
    if header.get("data_length"):
        data.update(json.loads(await reader.readexactly(header["data_length"])))
    payload = await reader.readexactly(header["payload_length"]) if header.get("payload_length") else b""
    return header["type"], data, payload


def wyoming_event(kind: str, data: dict) -> bytes:
    return json.dumps({"type": kind, "data": data}).encode() + b"\n"


class WyomingClient:
    """wyoming-piper: one TCP connection, a `synthesize` event per utterance, then
    audio-start, audio-chunk (PCM) ... audio-stop."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, host: str, port: int) -> WyomingClient:
        return cls(*await asyncio.open_connection(host, port, limit=2**22))

    async def speak(self, text: str) -> Stream:
        stream, audio_s = Stream(time.perf_counter()), 0.0
        self.writer.write(wyoming_event("synthesize", {"text": text}))
        await self.writer.drain()
        while True:
            kind, data, payload = await read_wyoming_event(self.reader)
            if kind == "audio-chunk":
                audio_s += len(payload) / (data["width"] * data["channels"]) / data["rate"]
                stream.arrivals.append((time.perf_counter(), audio_s))
            elif kind == "audio-stop":
                return stream
            elif kind == "error":
                stream.error = f"wyoming_{data.get('code')}"
                return stream

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def speak_rounds(
    client: Client, text: str, rounds: int, listen: bool, until: float, retry: bool = True
) -> list[Stream]:
    """`rounds` utterances back to back, none started after `until` but the first (so a
    slow system bounds the run's time); with `listen`, each after the previous one's
    simulated player has finished (a listener rather than a saturating client), and a
    refused one after the wait the refusal asked for (unless not `retry`)."""
    streams: list[Stream] = []
    for _ in range(rounds):
        if streams and time.perf_counter() > until:
            break
        try:
            stream = await asyncio.wait_for(client.speak(text), STREAM_TIMEOUT_S)
        except (TimeoutError, OSError, ValueError, aiohttp.ClientError, websockets.ConnectionClosed) as e:
            stream = Stream(time.perf_counter(), error=type(e).__name__)
        streams.append(stream)
        if listen and retry and stream.retry_after_s is not None:  # a listener refused tries again when told
            await asyncio.sleep(stream.retry_after_s)
        elif listen and stream.ok:
            stalled_s = stalls(stream.arrivals, PLAYER_LEAD_S)[1] / 1000
            ends = stream.arrivals[0][0] + PLAYER_LEAD_S + stream.audio_s + stalled_s
            await asyncio.sleep(max(0.0, ends - time.perf_counter()))
    return streams


async def run_level(connect: Connect, text: str, level: int, rounds: int, listen: bool = False,
                    seconds: float = math.inf) -> list[Stream]:
    """`level` clients, each on its own connection, all speaking `text` `rounds` times, or
    fewer (but once) where that would start an utterance more than `seconds` in."""
    clients = await asyncio.gather(*(connect() for _ in range(level)))
    until = time.perf_counter() + seconds
    try:
        per_client = await asyncio.gather(*(speak_rounds(c, text, rounds, listen, until) for c in clients))
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    return [stream for streams in per_client for stream in streams]


def poisson_arrivals(rate_per_s: float, seconds: float, seed: int = 0) -> list[float]:
    """Arrival times (s from the start, ascending) of a Poisson process of `rate_per_s`
    over `seconds`: independent users, as a public service sees them. Seeded, so that
    runs compare on the same arrivals."""
    rng = random.Random(seed)
    times, at = [], rng.expovariate(rate_per_s)
    while at < seconds:
        times.append(at)
        at += rng.expovariate(rate_per_s)
    return times


async def run_arrivals(connect: Connect, text: str, arrivals: list[float]) -> list[Stream]:
    """A listener at each of `arrivals` (s from now): it connects, speaks `text` once,
    listens to its end in real time and leaves. A refused listener leaves at once."""
    start = time.perf_counter()

    async def listener(at: float) -> Stream:
        await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
        try:
            client = await connect()
        except (OSError, aiohttp.ClientError, websockets.InvalidHandshake) as e:
            return Stream(time.perf_counter(), error=type(e).__name__)
        try:
            return (await speak_rounds(client, text, 1, listen=True, until=math.inf, retry=False))[0]
        finally:
            await client.close()

    return list(await asyncio.gather(*(listener(at) for at in arrivals)))
