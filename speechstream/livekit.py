"""A LiveKit Agents TTS plugin for a speechstream server, over protocol v1 (docs/livekit.md).

    from speechstream.livekit import TTS
    session = AgentSession(stt=..., llm=..., tts=TTS(url="ws://127.0.0.1:8080/v1/stream"))

- `TTS`: a streaming TTS with word-aligned transcripts. One WebSocket (a `SpeechClient`
  with `resume=True`: a gateway that goes away with 1001 or 1012 hands its contexts on to
  the next connection) is shared by every stream of the TTS, each stream a context on it.
- `SynthesizeStream`: text pushed as it arrives (an LLM's deltas) goes out at once as
  `text` messages; the server cuts it into sentences and speaks each as soon as it is
  complete. `flush` → protocol `flush`, `end_input` → `close`; closing the stream before
  its end (an interruption) → `cancel` of its context, on the same socket.
- `ChunkedStream` (`synthesize`): one `speak`, on the same socket.
- Word timings: protocol v1's `timestamps` messages become LiveKit `TimedString`s on the
  frames, as LiveKit's native plugins give them, cut so that they join into the text sent.

It needs `livekit-agents` (`pip install "./speechstream[livekit]"`) and imports only
`speechstream`'s client, never the server's packages.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import websockets
from livekit.agents import APIConnectionError, APIConnectOptions, APIError, APIStatusError, APITimeoutError, tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS
from livekit.agents.voice.io import TimedString

from speechstream import protocol as v1
from speechstream.client import Context, SpeechClient, SpeechError
from speechstream.client.events import CONNECTION_CLOSED, RESUME_FAILED
from speechstream.client.resume import RESUMABLE_CLOSES

DEFAULT_URL = "ws://127.0.0.1:8080/v1/stream"
API_KEY_ENV = "GATEWAY_API_KEY"  # the gateway's own variable, as speechstream-say reads it
# Errors after which the same request may succeed later or on another connection; the
# rest (unknown_voice, invalid_field, text_too_long, ...) would fail again as they are.
RETRYABLE = {
    v1.SERVER_BUSY, v1.TOO_MANY_STREAMS, v1.SERVER_DRAINING, v1.BACKEND_UNAVAILABLE, v1.SYNTHESIS_FAILED,
    v1.INTERNAL_ERROR, v1.IDLE_TIMEOUT, CONNECTION_CLOSED, RESUME_FAILED,
}
# After these the client cannot be used for new contexts: a new connection is opened.
CONNECTION_LOST = {CONNECTION_CLOSED, RESUME_FAILED, v1.SERVER_DRAINING, v1.IDLE_TIMEOUT}


@dataclass
class _Options:
    voice: str | None
    speed: float | None
    voice_options: dict[str, Any]

    def opening(self) -> dict[str, Any]:
        """The fields of the message that opens a context: its voice and voice parameters.
        Per context, not per connection, so `update_options` needs no new connection."""
        fields = dict(self.voice_options)
        if self.voice is not None:
            fields["voice"] = self.voice
        if self.speed is not None:
            fields["length_scale"] = 1 / self.speed  # Piper's: a longer scale is slower speech
        return fields


class TTS(tts.TTS):
    """Streaming text to speech from a speechstream gateway, PCM at `sample_rate`."""

    def __init__(
        self,
        *,
        url: str | Sequence[str] = DEFAULT_URL,
        voice: str | None = None,
        sample_rate: int = 24000,
        speed: float | None = None,
        api_key: str | None = None,
        seed: int | None = None,
        word_timestamps: bool = True,
        **voice_options: Any,
    ) -> None:
        """`url`: the gateway's protocol-v1 address, or several (a connection that goes
        away goes on at the next). `voice`: one of the server's voices (GET /v1/voices;
        None: its default). `sample_rate`: 48000, 24000, 16000 or 8000. `speed`: 1 is
        normal, 2 twice as fast. `api_key`: for a gateway that requires one (default: the
        GATEWAY_API_KEY variable). `seed`: the same seed, the same audio. `word_timestamps`:
        aligned transcripts. `voice_options`: the voice's other parameters (noise_scale,
        noise_w, speaker, temperature, ...; docs/protocol.md)."""
        if sample_rate not in v1.SAMPLE_RATES:
            raise ValueError(f"sample_rate must be one of {v1.SAMPLE_RATES}, not {sample_rate}")
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=word_timestamps),
            sample_rate=sample_rate,
            num_channels=1,
        )
        self._urls = [url] if isinstance(url, str) else list(url)
        self._api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._config: dict[str, Any] = {"format": "pcm_s16le", "sample_rate": sample_rate,
                                        "timestamps": word_timestamps}
        if seed is not None:
            self._config["seed"] = seed
        self._opts = _Options(voice, speed, voice_options)
        self._connecting: asyncio.Task[SpeechClient] | None = None
        self._retired: list[SpeechClient] = []  # left for new streams, closed with the TTS
        self._streams: weakref.WeakSet[SynthesizeStream] = weakref.WeakSet()

    @property
    def provider(self) -> str:
        return "speechstream"

    @property
    def model(self) -> str:
        return self._opts.voice or "default"

    @property
    def session_id(self) -> str | None:
        """The server's id of the connection open now (its `ready`), for its logs; None
        before the first connection."""
        client = self._connected()
        return client.ready.get("session_id") if client else None

    def update_options(self, *, voice: str | None = None, speed: float | None = None, **voice_options: Any) -> None:
        """For the streams opened from now on; the connection stays."""
        if voice is not None:
            self._opts.voice = voice
        if speed is not None:
            self._opts.speed = speed
        self._opts.voice_options.update(voice_options)

    def prewarm(self) -> None:
        """Open the connection now, so that the first stream does not wait for it."""
        self._connection()

    def synthesize(self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> ChunkedStream:
        return ChunkedStream(tts=self, input_text=text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> SynthesizeStream:
        stream = SynthesizeStream(tts=self, conn_options=conn_options)
        self._streams.add(stream)
        return stream

    async def aclose(self) -> None:
        """Close the streams still open (cancelling their contexts), then the socket."""
        for stream in list(self._streams):
            await stream.aclose()
        clients = self._retired + ([c] if (c := self._connected()) else [])
        if self._connecting is not None and not self._connecting.done():
            await utils.aio.cancel_and_wait(self._connecting)
        self._connecting, self._retired = None, []
        for client in clients:
            await client.close()

    # The shared connection.

    def _connected(self) -> SpeechClient | None:
        task = self._connecting
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result()

    def _connection(self) -> asyncio.Task[SpeechClient]:
        """The task opening (or that opened) the shared connection; a new one where there
        is none yet, the last failed, or the socket closed for good."""
        task = self._connecting
        failed = task is not None and task.done() and (task.cancelled() or task.exception() is not None)
        if task is None or failed or _lost(self._connected()):
            self._connecting = asyncio.ensure_future(
                SpeechClient.connect(self._urls, self._api_key, resume=True, **self._config))
            # A prewarm's failure nobody waits for is not an unretrieved exception: the next stream retries.
            self._connecting.add_done_callback(lambda t: t.cancelled() or t.exception())
        return self._connecting

    async def _client(self, timeout: float) -> SpeechClient:
        # Shielded: a stream that gives up waiting must not cancel the connection others wait for.
        try:
            return await asyncio.wait_for(asyncio.shield(self._connection()), timeout)
        except asyncio.TimeoutError:
            raise APITimeoutError(f"no connection to {self._urls[0]} within {timeout} s") from None
        except websockets.InvalidStatus as e:  # refused: 401/403 (key), 429 (too many wrong keys)
            raise APIStatusError(f"the gateway refused the connection: {e}",
                                 status_code=e.response.status_code) from None
        except SpeechError as e:  # the config refused
            raise _api_error(e) from None
        except (OSError, websockets.WebSocketException) as e:
            raise APIConnectionError(f"cannot connect to {self._urls[0]}: {e}") from e

    def _retire(self, client: SpeechClient) -> None:
        """Open no more contexts on `client` (it is closing or draining); its open
        contexts go on there, and it is closed with the TTS."""
        if self._connected() is client:
            self._connecting = None
            self._retired.append(client)


def _lost(client: SpeechClient | None) -> bool:
    """Whether the socket closed for good (an idle timeout, a close the client does not
    resume). A close it resumes (1001, 1012) is not: the client is connecting again."""
    code = None if client is None else client.ws.close_code
    return code is not None and code not in RESUMABLE_CLOSES


def _api_error(e: SpeechError) -> APIError:
    """LiveKit's error for the server's (or the client's) code, retryable where it may pass."""
    if e.code in (CONNECTION_CLOSED, RESUME_FAILED):
        return APIConnectionError(str(e))
    return APIError(str(e), body={"code": e.code, "retry_after_ms": e.retry_after_ms}, retryable=e.code in RETRYABLE)


class _Aligner:
    """Protocol v1's `timestamps` (a sentence's words, their times, its span in the text)
    → TimedStrings that join into the text sent: each word runs to the next word's start,
    the first takes in what was not spoken before it (punctuation, spaces), the last the
    spaces after its sentence."""

    def __init__(self) -> None:
        self.covered = 0  # the text the TimedStrings so far add up to

    def words(self, text: str, message: dict) -> list[TimedString]:
        start, end = message["text_span"]
        tail = end + len(text[end:]) - len(text[end:].lstrip())
        starts, cursor = [], start
        for word in message["words"]:
            at = text.find(word, cursor, end)
            if at < 0:  # not the text's own words: give them as they are, spaced
                self.covered = max(self.covered, tail)
                return self._timed([w + " " for w in message["words"]], message)
            starts.append(at)
            cursor = at + len(word)
        if not starts:
            return []
        bounds = [min(self.covered, start), *starts[1:], tail]
        self.covered = tail
        return self._timed([text[a:b] for a, b in zip(bounds, bounds[1:])], message)

    @staticmethod
    def _timed(pieces: list[str], message: dict) -> list[TimedString]:
        return [TimedString(piece, start_time=a / 1000, end_time=b / 1000)
                for piece, a, b in zip(pieces, message["start_ms"], message["end_ms"])]


class _Speech:
    """One protocol-v1 context as a LiveKit stream speaks it: the text sent to it (the
    timestamps' spans index it), its audio and word timings into the emitter, and its end."""

    def __init__(self, tts_: TTS, client: SpeechClient, emitter: tts.AudioEmitter) -> None:
        self.tts, self.client, self.emitter = tts_, client, emitter
        self.context: Context = client.context(f"lk-{utils.shortuuid()}")
        self.opening = tts_._opts.opening()
        self.text = ""  # all the text sent
        self.ended = False  # its `done` or `cancelled` came: nothing left to cancel
        self._aligner = _Aligner()

    async def send(self, delta: str) -> None:
        first = not self.text
        self.text += delta  # before it goes: its timestamps may come before the send returns
        await self.context.text(delta, **(self.opening if first else {}))

    async def speak(self, text: str) -> None:
        self.text = text
        await self.context.speak(text, **self.opening)

    async def receive(self) -> None:
        """Its audio and timings into the emitter, through `done`."""
        async for event in self.context.events():
            if event.frame is not None:
                self.emitter.push(event.frame.payload)
            elif event.kind == "timestamps":
                self.emitter.push_timed_transcript(self._aligner.words(self.text, event.message))
            elif event.kind == "flushed":
                self.emitter.flush()  # all of the segment so far: let the emitter's held-back tail go
        self.ended = True
        if self.context.done is None:  # cancelled by someone else, or the connection ended quietly
            raise APIConnectionError(f"context {self.context.id} ended without its audio")

    async def cancel(self) -> None:
        """Stop the context on the server (an interruption); the socket stays. Shielded, so
        the `cancel` goes out even when the stream is being cancelled meanwhile."""
        if self.text and not self.ended:
            self.ended = True
            await asyncio.shield(self._send_cancel())

    async def _send_cancel(self) -> None:
        try:
            await self.context.cancel()
        except (SpeechError, websockets.ConnectionClosed):
            pass  # the connection is gone: so is the context

    def failed(self, e: SpeechError) -> APIError:
        if e.code in CONNECTION_LOST:
            self.tts._retire(self.client)
        return _api_error(e)


class ChunkedStream(tts.ChunkedStream):
    """`synthesize`: the whole text in one `speak`, on the shared connection."""

    def __init__(self, *, tts: TTS, input_text: str, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._tts: TTS = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(request_id=utils.shortuuid(), sample_rate=self._tts.sample_rate,
                                  num_channels=1, mime_type="audio/pcm")
        if not self._input_text.strip():
            return  # nothing to say: no context to open
        speech = _Speech(self._tts, await self._tts._client(self._conn_options.timeout), output_emitter)
        try:
            await speech.speak(self._input_text)
            await speech.receive()
        except SpeechError as e:
            raise speech.failed(e) from None
        finally:
            await speech.cancel()


class SynthesizeStream(tts.SynthesizeStream):
    """Text in as it comes, one context; closed early, the context is cancelled."""

    def __init__(self, *, tts: TTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._tts: TTS = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        request_id = utils.shortuuid()
        output_emitter.initialize(request_id=request_id, sample_rate=self._tts.sample_rate,
                                  num_channels=1, mime_type="audio/pcm", stream=True)
        speech = _Speech(self._tts, await self._tts._client(self._conn_options.timeout), output_emitter)
        opened = asyncio.Event()  # set at the first text sent, or at an end of input without any
        sending = asyncio.create_task(self._send(speech, opened))
        receiving: asyncio.Task[None] | None = None
        try:
            await opened.wait()
            if speech.text:
                output_emitter.start_segment(segment_id=speech.context.id)
                receiving = asyncio.create_task(speech.receive())
                await _both(sending, receiving)
            await sending  # its error, if it failed before any text
        except SpeechError as e:
            raise speech.failed(e) from None
        finally:
            await utils.aio.cancel_and_wait(*[t for t in (sending, receiving) if t is not None])
            await speech.cancel()

    async def _send(self, speech: _Speech, opened: asyncio.Event) -> None:
        """The input channel → `text`, `flush`, then `close` at its end."""
        try:
            unflushed = False
            async for item in self._input_ch:
                if isinstance(item, self._FlushSentinel):
                    # end_input() flushes then closes: `close` flushes already.
                    if unflushed and not (self._input_ch.closed and self._input_ch.empty()):
                        await speech.context.flush()
                        unflushed = False
                elif item:
                    self._mark_started()
                    await speech.send(item)
                    unflushed = True
                    opened.set()
            if speech.text:
                await speech.context.close()
        finally:
            opened.set()


async def _both(first: asyncio.Task[None], second: asyncio.Task[None]) -> None:
    """Wait for both tasks; the first error ends the wait (and is raised) at once."""
    done, _ = await asyncio.wait((first, second), return_when=asyncio.FIRST_EXCEPTION)
    for task in done:
        if task.exception() is not None:
            raise task.exception()
    await asyncio.gather(first, second)
