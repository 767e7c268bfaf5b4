"""`speechstream-listen`: dictate audio files through the gateway's speech recognizer,
or talk a spoken conversation with its chat model.

    speechstream-listen memo.wav                     # a line per utterance heard
    speechstream-listen --fast memo.mp3
    speechstream-listen --chat q1.wav q2.wav --out replies/

Each file (any format PyAV reads) is streamed up as a microphone sends its audio: 20 ms
messages in real time, or with --fast as far ahead of real time as the gateway takes.
Dictation prints each utterance's final transcript on a line of its own; on a terminal,
the partials on one line as they change. --chat speaks the files as the questions of one
conversation, each followed by silence until its reply has been heard (played out in
real time), and prints each chat turn's transcript, its reply, and the voice-to-voice latency:
the last sample of the question sent → the first audio of the reply. --out writes the
replies' audio as DIR/reply-N.wav. --api-key (default: the GATEWAY_API_KEY variable) for
a gateway that requires one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import websockets

from speechstream.client.asyncio_client import SpeechClient
from speechstream.client.events import Event, Heard, Microphone, SpeechError, SpeechStarted, SpeechStopped, Transcript
from speechstream.client.say import refusal_hint
from speechstream.media.decoding import AudioTooLong, UndecodableAudio, decode_audio
from speechstream.protocol import LISTEN_DEFAULT_ENDPOINT_MS, LISTEN_MAX_AHEAD_S, PROTOCOL_PATH

RATE = 16000  # the microphone's: the recognizer's own, so nothing is resampled
MESSAGE_MS = 20  # a microphone's message, as browsers' audio callbacks send them
STEP = RATE * MESSAGE_MS // 1000
FAST_AHEAD_S = LISTEN_MAX_AHEAD_S - 0.5  # --fast: within what the gateway takes, with a margin
REPLY_RATE = 24000  # the replies' PCM
# Dictation ends once every utterance is final and nothing more came for this long since
# the end of speech: the speech at the audio's very end may not have been found yet.
SETTLE_S = 1.5
HEARD_TIMEOUT_S = 120.0  # the longest a question may wait to be heard and answered, or dictation to settle
POLL_S = 0.05
MAX_FILE_S = 3600.0


@dataclass
class Utterance:
    """An utterance the recognizer heard (named by the server's `turn_id`), and in chat
    mode the reply to it: the two make a chat turn."""

    id: str
    text: str = ""  # the transcript so far
    final: bool = False
    speech_end_ms: int | None = None  # where the speech stopped, in the microphone's timeline
    outcome: str | None = None  # the reply's speculation outcome
    reply_text: str = ""
    first_audio_at: float | None = None  # when the reply's first frame came (time.perf_counter())
    audio: bytearray = field(default_factory=bytearray)  # the reply's PCM
    ended: bool = False  # nothing more is coming for it
    error: str | None = None

    def playing_until(self) -> float:
        """When a listener playing the reply from its first frame hears its end."""
        if self.first_audio_at is None:
            return 0.0
        return self.first_audio_at + len(self.audio) / 2 / REPLY_RATE


class Conversation:
    """What a listening connection heard, sans I/O: its utterances, built from the events
    of `SpeechClient.heard()`. In dictation an utterance ends with its final transcript;
    in chat mode with its reply's end (done, cancelled, an error), or a final of noise,
    which has none."""

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.utterances: dict[str, Utterance] = {}
        self.errors: list[str] = []  # the connection's, which name no utterance
        self.last_at = 0.0  # when the last event came

    def take(self, event: Heard) -> Utterance | None:
        """One event; the utterance it is of, if any."""
        self.last_at = event.at
        if isinstance(event, (SpeechStarted, Transcript, SpeechStopped)):
            utterance = self.utterances.setdefault(event.turn_id, Utterance(event.turn_id))
            if isinstance(event, SpeechStopped):
                utterance.speech_end_ms = event.audio_ms
            elif isinstance(event, Transcript):
                utterance.text, utterance.final = event.text, event.final
                utterance.ended = event.final and not (self.chat and event.text.strip())
            return utterance
        if (utterance := self.utterances.get(event.context_id)) is None:
            if event.kind == "error":
                self.errors.append(f"{event.message['code']}: {event.message['message']}")
            return None
        self._reply(utterance, event)
        return utterance

    @staticmethod
    def _reply(utterance: Utterance, event: Event) -> None:
        if event.frame is not None:
            utterance.first_audio_at = utterance.first_audio_at or event.at
            utterance.audio += event.frame.payload
        elif event.kind == "reply":
            utterance.outcome = event.message["outcome"]
        elif event.kind == "reply_text":
            utterance.reply_text += event.message["text"]
        elif event.kind in ("done", "cancelled", "error"):
            utterance.ended = True
            utterance.error = f"{event.message['code']}: {event.message['message']}" if event.kind == "error" else None

    def settled(self, since: float, now: float) -> bool:
        """Every utterance ended, and nothing came for SETTLE_S after `since` (the end of
        speech sent): dictation is over."""
        return all(u.ended for u in self.utterances.values()) and now - max(self.last_at, since) >= SETTLE_S

    def answered(self, since: int, now: float) -> bool:
        """An utterance began after the first `since`, and every one has ended and been
        heard whole, its reply included: the question asked is answered."""
        utterances = list(self.utterances.values())
        return len(utterances) > since and all(u.ended and u.playing_until() <= now for u in utterances)

    def latency_s(self, utterance: Utterance, microphone: Microphone) -> float | None:
        """Voice-to-voice: the question's last sample sent → the reply's first audio."""
        spoken_at = None if utterance.speech_end_ms is None else microphone.sent_at(utterance.speech_end_ms)
        if spoken_at is None or utterance.first_audio_at is None:
            return None
        return utterance.first_audio_at - spoken_at


class Lines:
    """The output: a line per final or reply; on a terminal, the partials on one line
    that each new one overwrites."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self._partial = False

    def partial(self, text: str) -> None:
        if self.tty:
            print(f"\r{text}\x1b[K", end="", flush=True)
            self._partial = True

    def line(self, text: str) -> None:
        print(f"\r{text}\x1b[K" if self._partial else text, flush=True)
        self._partial = False


class Pacer:
    """Sends the microphone's messages on time: in real time, or `ahead_s` ahead of it."""

    def __init__(self, client: SpeechClient, ahead_s: float) -> None:
        self.client = client
        self.ahead_s = ahead_s
        self.origin: float | None = None  # when the timeline's start would have been sent, in real time

    async def send(self, pcm: np.ndarray) -> None:
        """`pcm` (int16 at RATE), a message at a time, each when it is due. After a pause
        (dictation waiting between files) real time starts again from the pause's end,
        rather than the file's start going out at once to catch up."""
        for i in range(0, pcm.size, STEP):
            now, position_s = time.perf_counter(), self.client.microphone.ms / 1000
            if self.origin is None or self.origin + position_s < now - MESSAGE_MS / 1000:
                self.origin = now - position_s
            await asyncio.sleep(max(0.0, self.origin + position_s - self.ahead_s - now))
            await self.client.send_audio(pcm[i:i + STEP].tobytes())


class ListenError(Exception):
    """Listening could not go on: the connection ended, or the server took too long."""


class ListenConnection:
    """One connection listening, as speechstream-listen runs it: the microphone paced,
    and what it hears read into a Conversation and printed as it comes."""

    def __init__(self, client: SpeechClient, conversation: Conversation, lines: Lines, ahead_s: float,
                 out: Path | None) -> None:
        self.client = client
        self.conversation = conversation
        self.lines = lines
        self.pacer = Pacer(client, ahead_s)
        self.out = out
        self.replies = 0
        self.answered: set[str] = set()  # the utterances whose reply was printed (a barge-in's `cancelled` may follow `done`)
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for event in self.client.heard():
            utterance = self.conversation.take(event)
            if utterance is None:
                if event.kind == "error":
                    print(f"speechstream-listen: {self.conversation.errors[-1]}", file=sys.stderr)
            elif isinstance(event, Transcript):
                self._heard(utterance)
            elif utterance.ended and self.conversation.chat and utterance.id not in self.answered:
                self.answered.add(utterance.id)
                self._answered(utterance)

    def _heard(self, utterance: Utterance) -> None:
        if not utterance.final:
            self.lines.partial(utterance.text)
        elif utterance.text.strip():
            self.lines.line(f"you: {utterance.text}" if self.conversation.chat else utterance.text)

    def _answered(self, utterance: Utterance) -> None:
        if utterance.error:
            print(f"speechstream-listen: {utterance.id}: {utterance.error}", file=sys.stderr)
        latency = self.conversation.latency_s(utterance, self.client.microphone)
        said = f"{utterance.outcome or 'no reply'}" + ("" if latency is None else f", voice to voice {latency * 1000:.0f} ms")
        self.lines.line(f"bot: {utterance.reply_text.strip()}  [{said}]")
        if self.out is not None and utterance.audio:
            self.replies += 1
            write_wav(self.out / f"reply-{self.replies}.wav", bytes(utterance.audio))

    async def until(self, done: Callable[[float], bool], silence: bool) -> None:
        """Wait until `done(now)`, sending silence meanwhile if asked (a microphone goes
        on while the reply plays). ListenError if the connection ends or HEARD_TIMEOUT_S
        passes first."""
        deadline = time.perf_counter() + HEARD_TIMEOUT_S
        quiet = np.zeros(STEP, np.int16)
        while not done(now := time.perf_counter()):
            if self.reader.done():
                raise ListenError("the connection ended")
            if now > deadline:
                raise ListenError(f"nothing more was heard for {HEARD_TIMEOUT_S:g} s")
            await (self.pacer.send(quiet) if silence else asyncio.sleep(POLL_S))

    async def dictate(self, audio: np.ndarray) -> None:
        """Speak `audio`, end the utterance, and wait until every utterance heard has its final."""
        await self.pacer.send(audio)
        ended = await self.client.end_of_speech()
        await self.until(lambda now: self.conversation.settled(ended, now), silence=False)

    async def ask(self, question: np.ndarray) -> None:
        """Speak one question, then silence until its reply has been heard whole."""
        since = len(self.conversation.utterances)
        await self.pacer.send(question)
        await self.until(lambda now: self.conversation.answered(since, now), silence=True)

    async def close(self) -> None:
        await self.client.close()
        await asyncio.gather(self.reader, return_exceptions=True)


def write_wav(path: Path, pcm: bytes) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(REPLY_RATE)
        w.writeframes(pcm)


async def listen(url: str, audios: list[np.ndarray], chat: dict | None, fast: bool, out: Path | None,
                 api_key: str | None = None, endpoint_ms: int = LISTEN_DEFAULT_ENDPOINT_MS) -> Conversation:
    """Dictate `audios` one after another, or with `chat` (chat mode's settings) ask them
    as a conversation's questions; what was heard, once it is over."""
    config = {"format": "pcm_s16le", "sample_rate": REPLY_RATE, "listen": {"sample_rate": RATE, "endpoint_ms": endpoint_ms}}
    client = await SpeechClient.connect(url, api_key, **config, **({} if chat is None else {"chat": chat}))
    conversation = Conversation(chat is not None)
    connection = ListenConnection(client, conversation, Lines(sys.stdout.isatty()), FAST_AHEAD_S if fast else 0.0, out)
    try:
        for audio in audios:
            await (connection.dictate(audio) if chat is None else connection.ask(audio))
    finally:
        await connection.close()
    return conversation


def read_audio(path: Path) -> np.ndarray:
    """The file's audio, mono int16 at RATE."""
    return decode_audio(path.read_bytes(), RATE, MAX_FILE_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="speechstream-listen", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("files", nargs="+", type=Path, help="audio files (wav, mp3, ogg, flac, webm, m4a)")
    parser.add_argument("--chat", action="store_true", help="ask the files as the questions of a spoken conversation")
    parser.add_argument("--fast", action="store_true", help="send the audio as far ahead of real time as allowed (2 s)")
    parser.add_argument("--out", type=Path, help="with --chat: a directory for the replies' audio (reply-N.wav)")
    parser.add_argument("--speculation", choices=("off", "greedy", "top_k"), help="with --chat: input-time speculation")
    parser.add_argument("--system", help="with --chat: the chat model's system prompt")
    parser.add_argument("--max-tokens", type=int, help="with --chat: a reply's longest, in tokens")
    parser.add_argument("--endpoint-ms", type=int, default=LISTEN_DEFAULT_ENDPOINT_MS,
                        help="the silence after speech that ends an utterance (100 to 5000)")
    parser.add_argument("--url", default=f"ws://127.0.0.1:8080{PROTOCOL_PATH}", help="the gateway")
    parser.add_argument("--api-key", default=os.environ.get("GATEWAY_API_KEY"),
                        help="the gateway's API key, if it has one (default: $GATEWAY_API_KEY)")
    args = parser.parse_args(argv)
    settings = {"speculation": args.speculation, "system": args.system, "max_tokens": args.max_tokens}
    chat = {k: v for k, v in settings.items() if v is not None}
    if (args.out or chat) and not args.chat:
        parser.error("--out, --speculation, --system and --max-tokens are --chat's")
    try:
        audios = [read_audio(path) for path in args.files]
    except (OSError, UndecodableAudio, AudioTooLong) as e:
        parser.error(f"cannot read the audio: {e}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    try:
        asyncio.run(listen(args.url, audios, chat if args.chat else None, args.fast, args.out, args.api_key,
                           args.endpoint_ms))
    except (OSError, SpeechError, ListenError, websockets.WebSocketException) as e:  # refused, closed, bad URL
        print(f"speechstream-listen: {e}{refusal_hint(e)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
