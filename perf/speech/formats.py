"""Time to the first audio of `POST /v1/audio/speech` in each `response_format`, at one
client, against `pcm`'s (the format with nothing before its audio).

"First audio" is the first byte a player can use: for Ogg Opus the end of the first page
that carries audio (the header pages come first), for WAV and FLAC the first byte after
their headers, for mp3 the first frame after an ID3 tag, for pcm and ADTS aac the first
byte. `audio_offset` finds it in a body's first bytes; the rest times it on the wire.
"""

from __future__ import annotations

import statistics
import struct
import time

import aiohttp

from gateway.protocols.speech_api import RATES

FORMATS = tuple(RATES)
REFERENCE = "pcm"
OGG_HEADER = struct.Struct("<4sBBqIIIB")  # capture, version, flags, granule, serial, sequence, crc, segments


def _ogg(data: bytes) -> int | None:
    """The end of the first page with a granule position past 0: the first audio page."""
    at = 0
    while at + OGG_HEADER.size <= len(data):
        capture, _, _, granule, _, _, _, segments = OGG_HEADER.unpack_from(data, at)
        if capture != b"OggS":
            raise ValueError(f"not an Ogg page at byte {at}")
        table = data[at + OGG_HEADER.size : at + OGG_HEADER.size + segments]
        if len(table) < segments:
            return None
        end = at + OGG_HEADER.size + segments + sum(table)
        if granule > 0:
            return end if end <= len(data) else None
        at = end
    return None


def _flac(data: bytes) -> int | None:
    """The first byte after the metadata blocks (the last one has its top bit set)."""
    if len(data) >= 4 and data[:4] != b"fLaC":
        raise ValueError("not a FLAC stream")
    at = 4
    while at + 4 <= len(data):
        last, size = data[at] & 0x80, int.from_bytes(data[at + 1 : at + 4], "big")
        at += 4 + size
        if last:
            return at if at < len(data) else None
    return None


def _wav(data: bytes) -> int | None:
    at = data.find(b"data", 12)
    return at + 8 if at >= 0 and at + 8 < len(data) else None


def _mp3(data: bytes) -> int | None:
    at = 0
    if data[:3] == b"ID3":
        if len(data) < 10:
            return None
        at = 10 + sum((b & 0x7F) << (7 * (3 - i)) for i, b in enumerate(data[6:10]))  # a syncsafe size
    return at if at < len(data) else None


def audio_offset(fmt: str, data: bytes) -> int | None:
    """How many of a `fmt` body's first bytes must arrive before its first audio can be
    played (the first audio byte's index + 1 for the byte-streamed formats); None while
    `data` does not reach it yet."""
    if fmt == "opus":
        return _ogg(data)
    finders = {"flac": _flac, "wav": _wav, "mp3": _mp3}
    start = finders[fmt](data) if fmt in finders else (0 if data else None)
    return None if start is None else start + 1


async def first_audio_ms(session: aiohttp.ClientSession, base_url: str, text: str, fmt: str) -> float:
    """Milliseconds from sending the request to the arrival of the byte its first audio
    needs; the rest of the body is not waited for."""
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": fmt}
    sent, data = time.perf_counter(), b""
    async with session.post(base_url + "/audio/speech", json=body) as response:
        response.raise_for_status()
        async for piece in response.content.iter_any():
            data += piece
            if (needed := audio_offset(fmt, data)) is not None and len(data) >= needed:
                return (time.perf_counter() - sent) * 1000  # leaving closes the request: the server stops
    raise RuntimeError(f"a {fmt} body of {len(data)} bytes had no audio")


async def measure_formats(base_url: str, text: str, rounds: int) -> dict[str, dict[str, float]]:
    """Each format's first-audio time over `rounds` requests, one at a time, the formats
    interleaved round by round and each round starting one format later, so that drift on
    a shared machine, and the request just abandoned before, fall on all alike; with each
    format's median less pcm's."""
    times: dict[str, list[float]] = {fmt: [] for fmt in FORMATS}
    async with aiohttp.ClientSession() as session:
        await first_audio_ms(session, base_url, text, REFERENCE)  # warm the path
        for r in range(rounds):
            for fmt in FORMATS[r % len(FORMATS) :] + FORMATS[: r % len(FORMATS)]:
                times[fmt].append(await first_audio_ms(session, base_url, text, fmt))
    reference = statistics.median(times[REFERENCE])
    return {fmt: {"p50_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t),
                  "vs_pcm_ms": statistics.median(t) - reference, "rounds": len(t)} for fmt, t in times.items()}
