"""`speechstream-say`: speak text through the gateway into an .ogg (Opus), .wav, .flac or
raw .pcm file, or to the speakers.

    speechstream-say "Hello there." --out hello.ogg
    speechstream-say --file story.txt --out story.wav
    speechstream-say "Hello there." --play

Prints the time to first audio and the audio's duration. --play streams PCM into a
player command as it arrives (aplay, pw-cat or paplay, whichever is installed, or --player).
--api-key (default: the GATEWAY_API_KEY variable) for a gateway that requires one. When
the gateway goes away mid-text (a rolling update), the rest is spoken by another: the
same URL again (a Service in front of several), or the next --url given.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import websockets

from speechstream.client.asyncio_client import SpeechClient
from speechstream.client.events import SpeechError, audio_end_s
from speechstream.media.containers import FRAME_FORMATS, ContainerWriter
from speechstream.protocol import PROTOCOL_PATH

RATE = 48000
FRAME_MS = 20
SUFFIXES = {".ogg": "opus", ".opus": "opus", ".wav": "wav", ".flac": "flac", ".pcm": "pcm", ".raw": "pcm", ".mp3": "mp3", ".aac": "aac"}


class FileWriter:
    """A container file, chosen by the suffix (see SUFFIXES)."""

    def __init__(self, path: Path, fmt: str) -> None:
        self._file = path.open("wb")
        self._container = ContainerWriter(fmt, RATE, RATE * FRAME_MS // 1000, self._file)

    def write(self, payload: bytes, sample_offset: int) -> None:
        self._container.push(payload, sample_offset)

    def close(self) -> None:
        self._container.finish()
        self._file.close()


class PlayerWriter:
    """Raw s16le mono PCM into a player's standard input, as it arrives."""

    def __init__(self, command: str) -> None:
        self._player = subprocess.Popen(shlex.split(command), stdin=subprocess.PIPE)

    def write(self, payload: bytes, sample_offset: int) -> None:
        self._player.stdin.write(payload)
        self._player.stdin.flush()

    def close(self) -> None:
        self._player.stdin.close()
        self._player.wait()


PLAYERS = {
    "aplay": f"aplay -q -t raw -f S16_LE -c 1 -r {RATE}",
    "pw-cat": f"pw-cat --playback --format s16 --channels 1 --rate {RATE} -",
    "paplay": f"paplay --raw --format=s16le --channels=1 --rate={RATE}",
}


def default_player() -> str | None:
    return next((command for name, command in PLAYERS.items() if shutil.which(name)), None)


async def say(urls: list[str], text: str, out: Path | None, player: str | None = None, api_key: str | None = None,
              **voice) -> tuple[float, float]:
    """Speak `text` into `out` (or into `player`) through the first of `urls`, resuming on
    the next where one goes away; return (seconds to first audio, audio seconds)."""
    container = None if out is None else SUFFIXES[out.suffix.lower()]
    config = {"format": FRAME_FORMATS.get(container, "pcm_s16le"), "sample_rate": RATE, "frame_ms": FRAME_MS}
    client = await SpeechClient.connect(
        urls, api_key, resume=True, **config, **{k: v for k, v in voice.items() if v is not None}
    )
    writer = PlayerWriter(player) if out is None else FileWriter(out, container)
    first, seconds = None, 0.0
    try:
        context = client.context()
        sent = await context.speak(text)
        async for event in context.events():
            if event.frame:
                first = first if first is not None else event.at - sent
                writer.write(event.frame.payload, event.frame.sample_offset)
                seconds = audio_end_s(event.frame, client.ready)
    finally:
        writer.close()
        await client.close()
    return first or 0.0, seconds


REFUSAL_HINTS = {
    401: "the gateway needs its API key: --api-key KEY or GATEWAY_API_KEY",
    403: "the gateway refused this client (its Origin, or the key failed too often)",
    429: "too many connections or wrong keys from this address; try again in a minute",
    503: "the gateway is at its connection limit or has no Triton up; try again shortly",
}


def refusal_hint(error: Exception) -> str:
    """What to do about a refused handshake, after its status."""
    status = getattr(getattr(error, "response", None), "status_code", None)
    return f" ({REFUSAL_HINTS[status]})" if status in REFUSAL_HINTS else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="speechstream-say", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("text", nargs="?", help="text to speak (or --file)")
    parser.add_argument("--file", type=Path, help="read the text from this file")
    output = parser.add_mutually_exclusive_group(required=True)
    output.add_argument("--out", type=Path, help="output file: .ogg/.opus (Opus), .wav, .flac or .pcm (s16le)")
    output.add_argument("--play", action="store_true", help="play through the speakers")
    parser.add_argument("--player", help="player command reading raw s16le mono 48 kHz PCM on stdin")
    parser.add_argument("--url", action="append", help=(
        f"the gateway (default ws://127.0.0.1:8080{PROTOCOL_PATH}); again for others to go on with if one goes away"))
    parser.add_argument("--api-key", default=os.environ.get("GATEWAY_API_KEY"),
                        help="the gateway's API key, if it has one (default: $GATEWAY_API_KEY)")
    parser.add_argument("--voice", help="a voice the server speaks with (GET /v1/voices; default: its default)")
    parser.add_argument("--speed", type=float, help="1 is normal, 2 twice as fast")
    parser.add_argument("--seed", type=int, help="same seed, same audio")
    args = parser.parse_args(argv)
    text = args.file.read_text(encoding="utf-8") if args.file else args.text
    if not text:
        parser.error("give the text, or --file")
    if args.out and args.out.suffix.lower() not in SUFFIXES:
        parser.error(f"--out must end in one of {', '.join(SUFFIXES)}")
    player = args.player or default_player() if args.play else None
    if args.play and not player:
        parser.error(f"no player found ({', '.join(PLAYERS)}); give --player or --out")
    length_scale = 1 / args.speed if args.speed else None
    try:
        first, seconds = asyncio.run(
            say(args.url or [f"ws://127.0.0.1:8080{PROTOCOL_PATH}"], text, args.out, player, args.api_key,
                voice=args.voice, length_scale=length_scale, seed=args.seed)
        )
    except (OSError, SpeechError, websockets.WebSocketException) as e:  # refused (401, 403, 429), closed, bad URL
        print(f"speechstream-say: {e}{refusal_hint(e)}", file=sys.stderr)
        return 1
    where = f"written to {args.out}" if args.out else "played"
    print(f"first audio: {first * 1000:.0f} ms; {seconds:.2f} s of audio {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
