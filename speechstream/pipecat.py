"""A Pipecat TTS service over a speechstream server's WebSocket protocol v1.

    from speechstream.pipecat import SpeechstreamTTSService

    tts = SpeechstreamTTSService(url="ws://127.0.0.1:8080/v1/stream", voice="en_US-joe-medium")
    pipeline = Pipeline([transport.input(), stt, user_aggregator, llm, tts, transport.output(), ...])

How it maps Pipecat onto protocol v1 (docs/protocol.md, docs/pipecat.md):

- One socket per service: a `SpeechClient` connection opened at setup and closed at
  stop or cancel. Every turn is a context on it, several at once where turns overlap.
- A turn is one context, named by Pipecat's turn context id. The LLM's text goes to it
  as `text` deltas as it arrives (the server cuts sentences and speaks each as soon as
  it is complete); the end of the turn sends `close` (a `flush`, and `done` after the
  last audio, which ends Pipecat's audio context).
- Audio: `pcm_s16le` at the pipeline's output rate, which the server resamples to (a rate
  it does not serve is asked at the next one above and resampled here).
- Word timings: `timestamps` messages become Pipecat's timed word frames
  (`add_word_timestamps`), as Cartesia's and ElevenLabs' services do.
- Interruption: a `cancel` of the turn's context; the socket stays, and the next turn
  speaks on it.
- Metrics: time to first byte and to first audio, through the base class.
- A gateway going away (close 1001 or 1012) is resumed by the client (`resume=True`):
  the turn goes on over a new connection, each word heard once. A connection that ended
  otherwise (the gateway's idle timeout closes with 1000) is replaced at the next turn.

It imports only `speechstream`'s client, Pipecat and the standard library: it runs in
the user's process, beside their framework, and never beside the server's packages.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import websockets
from loguru import logger
from pipecat.audio.resamplers.base_audio_resampler import BaseAudioResampler
from pipecat.audio.utils import create_stream_resampler
from pipecat.frames.frames import CancelFrame, EndFrame, ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, TTSService
from pipecat.utils.tracing.service_decorators import traced_tts

from speechstream import protocol as v1
from speechstream.client import Context, Event, SpeechClient, SpeechError

DEFAULT_URL = "ws://127.0.0.1:8080/v1/stream"
# A send or connect that fails with these failed for the connection (closed, refused,
# unreachable; SpeechError: the client's reader ended with it), not for the message.
GONE = (SpeechError, websockets.WebSocketException, OSError, TimeoutError)


def server_rate(rate: int) -> int:
    """The sample rate to ask the server for: `rate` where it serves it, else the next
    rate above it (so that resampling here only goes down), else its highest."""
    if rate in v1.SAMPLE_RATES:
        return rate
    return min((r for r in v1.SAMPLE_RATES if r > rate), default=max(v1.SAMPLE_RATES))


def word_times(timestamps: Mapping[str, Any]) -> list[tuple[str, float]]:
    """A `timestamps` message as Pipecat's (word, seconds from the context's first audio)."""
    return [(word, ms / 1000) for word, ms in zip(timestamps["words"], timestamps["start_ms"], strict=True)]


class SpeechstreamTTSService(TTSService):
    """Pipecat's TTS over a speechstream server: one WebSocket, a context per turn, the
    LLM's text streamed in, word timestamps, interruption by `cancel`.

    Event handlers (as Pipecat's WebSocket services): on_connected, on_disconnected,
    on_connection_error (with the error's text), on_tts_request."""

    Settings = TTSSettings
    _settings: TTSSettings

    def __init__(
        self,
        *,
        url: str | Sequence[str] = DEFAULT_URL,
        api_key: str | None = None,
        voice: str | None = None,
        voice_params: Mapping[str, Any] | None = None,
        sample_rate: int | None = None,
        resume: bool = True,
        config: Mapping[str, Any] | None = None,
        settings: TTSSettings | None = None,
        text_aggregation_mode: TextAggregationMode | None = None,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            url: the gateway's protocol-v1 URL, or several: the first is connected to;
                when one goes away mid-turn, the next (see `resume`).
            api_key: the gateway's API key, where it requires one (--api-key).
            voice: one of the server's voices (GET /v1/voices); None for its default.
                Changed at run time with TTSUpdateSettingsFrame(delta=TTSSettings(voice=...)),
                from the next turn on.
            voice_params: the voice parameters each turn's context opens with
                (length_scale, noise_scale, noise_w, seed, speaker, temperature,
                guidance_scale: see docs/protocol.md).
            sample_rate: the audio's rate; None for the pipeline's output rate.
            resume: when the gateway goes away (closes with 1001 or 1012), go on with the
                turn over a new connection (the client library's `resume=True`).
            config: more of protocol v1's `config` fields, such as `queue` (wait in the
                admission queue at capacity instead of being refused `server_busy`).
            settings: Pipecat's runtime settings (voice); over `voice` where both are given.
            text_aggregation_mode: TOKEN (the default) streams the LLM's text to the
                server as it comes, which cuts sentences itself; SENTENCE waits for
                Pipecat's sentences first.
            **kwargs: TTSService's.
        """
        default_settings = TTSSettings(model=None, voice=voice, language=None)
        if settings is not None:
            default_settings.apply_update(settings)
        super().__init__(
            # The server cuts sentences as text arrives: cutting them here first only
            # waits for the next sentence's first token.
            text_aggregation_mode=text_aggregation_mode or TextAggregationMode.TOKEN,
            # The words are pushed as they are spoken, from the word timestamps.
            push_text_frames=False,
            # The base opens each audio context with TTSStartedFrame and starts TTFB there.
            push_start_frame=True,
            sample_rate=sample_rate,
            settings=default_settings,
            **kwargs,
        )
        self._urls = [url] if isinstance(url, str) else list(url)
        self._api_key = api_key
        self._voice_params = dict(voice_params or {})
        self._resume = resume
        self._config = dict(config or {})
        self._server_rate = 0  # known at setup, from the pipeline's rate
        self._client: SpeechClient | None = None
        self._contexts: dict[str, Context] = {}  # the turns being spoken: Pipecat's context id → ours
        self._receivers: dict[str, asyncio.Task] = {}  # a task per context, reading its events

    def can_generate_metrics(self) -> bool:
        return True

    @property
    def supports_processing_metrics(self) -> bool:
        """False: `run_tts` hands the text to the socket, so it would time the send only."""
        return False

    @property
    def client(self) -> SpeechClient | None:
        """The service's connection: None before setup and after stop; one the server
        ended (not resumed) stays here until the next turn replaces it."""
        return self._client

    #
    # Lifecycle: one connection, opened at setup, closed at stop, cancel or cleanup.
    #

    async def setup(self, setup: FrameProcessorSetup) -> None:
        await super().setup(setup)
        self._server_rate = server_rate(self.sample_rate)
        try:
            await self._connect()
        except Exception as e:  # the first turn tries again
            await self.push_error(error_msg=f"{self}: cannot connect to {self._urls[0]}: {e}", exception=e)

    async def stop(self, frame: EndFrame) -> None:
        await super().stop(frame)  # the audio still queued plays first
        await self._disconnect()

    async def cancel(self, frame: CancelFrame) -> None:
        await super().cancel(frame)
        await self._disconnect()

    async def cleanup(self) -> None:
        await super().cleanup()
        await self._disconnect()

    async def _connect(self) -> SpeechClient:
        """The open connection, or a new one."""
        if self._client is None:
            try:
                self._client = await SpeechClient.connect(
                    self._urls, api_key=self._api_key, resume=self._resume,
                    **{"format": "pcm_s16le", "sample_rate": self._server_rate, "timestamps": True, **self._config},
                )
            except Exception as e:
                await self._call_event_handler("on_connection_error", str(e))
                raise
            logger.debug(f"{self}: connected to {self._urls[0]}, session {self._client.ready.get('session_id')}")
            await self._call_event_handler("on_connected")
        return self._client

    async def _disconnect(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()  # ends every context's events: their readers return
            await self._call_event_handler("on_disconnected")
        for task in list(self._receivers.values()):
            await self.cancel_task(task)
        self._receivers.clear()
        self._contexts.clear()

    #
    # A turn: its context opened by its first text, fed its deltas, closed at its end.
    #

    @traced_tts
    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Send `text` to the turn's context (opening it with the first); the audio comes
        back on the context's reader."""
        try:
            if (context := self._contexts.get(context_id)) is None:
                await self._open(context_id, text)
            else:
                await context.text(text)
            await self.start_tts_usage_metrics(text)
        except GONE as e:
            yield ErrorFrame(error=f"{self}: cannot send to the server: {e}")
            return
        yield None  # the audio arrives on the reader

    async def _open(self, context_id: str, text: str) -> None:
        """Open a context with the turn's first text, the voice and its parameters."""
        opening = {**self._voice_params, **({"voice": self._settings.voice} if self._settings.voice else {})}
        client = await self._connect()
        try:
            context = client.context(context_id)
            await context.text(text, **opening)
        except GONE as e:
            # The connection ended since the last turn and the client did not resume it
            # (an idle timeout closes with 1000): this turn goes on a new one.
            logger.info(f"{self}: the connection ended ({e}); connecting again")
            await self._disconnect()
            context = (await self._connect()).context(context_id)
            await context.text(text, **opening)
        self._contexts[context_id] = context
        self._receivers[context_id] = self.create_task(self._receive(context), name=f"speechstream-{context_id}")

    async def flush_audio(self, context_id: str | None = None) -> None:
        """The turn's text is all sent: `close` its context, so that what is buffered is
        spoken now and `done` follows the last audio."""
        context = self._contexts.get(context_id or self.get_active_audio_context_id() or "")
        if context is None:
            return
        try:
            await context.close()
        except GONE as e:
            await self.push_error(error_msg=f"{self}: cannot close context {context.id}: {e}", exception=e)

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        """Barge-in: `cancel` the context; the connection stays for the next turn."""
        await self.cancel_ttfb_metrics()  # no first byte to report for a turn cut short
        # Forgotten first, so that its reader drops what still comes until `cancelled`.
        if (context := self._contexts.pop(context_id, None)) is not None:
            try:
                await context.cancel()
            except GONE:
                pass  # the connection is gone, and the context with it
        await super().on_audio_context_interrupted(context_id)

    async def _receive(self, context: Context) -> None:
        """Hand a context's audio and word timings to its audio context, through `done`
        (or `cancelled`, or an error); then end the audio context."""
        # A resampler of its own, where the pipeline's rate is not the server's: it holds
        # the last few ms back, flushed at the end, so no turn's tail opens the next.
        resampler = None if self._server_rate == self.sample_rate else create_stream_resampler(clear_after_secs=None)
        try:
            async for event in context.events():
                if self._contexts.get(context.id) is context:  # not interrupted
                    await self._handle(context.id, event, resampler)
        except SpeechError as e:
            if self._contexts.get(context.id) is context:
                await self.push_error(error_msg=f"{self}: context {context.id}: {e}", exception=e)
        finally:
            self._receivers.pop(context.id, None)
        if self._contexts.get(context.id) is context:
            del self._contexts[context.id]
            if self.audio_context_available(context.id):
                if resampler is not None and (tail := await resampler.flush()):
                    await self.append_to_audio_context(context.id, self._audio(tail, context.id))
                await self.append_to_audio_context(context.id, TTSStoppedFrame(context_id=context.id))
                await self.remove_audio_context(context.id)

    async def _handle(self, context_id: str, event: Event, resampler: BaseAudioResampler | None) -> None:
        if event.frame is not None:
            audio = event.frame.payload
            if resampler is not None:
                audio = await resampler.resample(audio, self._server_rate, self.sample_rate)
            await self.append_to_audio_context(context_id, self._audio(audio, context_id))
        elif event.kind == "timestamps":
            await self.add_word_timestamps(word_times(event.message), context_id)
        elif event.kind == "resuming":
            logger.info(f"{self}: context {context_id} resuming after {event.message.get('code')}")

    def _audio(self, pcm: bytes, context_id: str) -> TTSAudioRawFrame:
        return TTSAudioRawFrame(pcm, self.sample_rate, 1, context_id=context_id)
