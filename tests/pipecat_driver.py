"""Runs `speechstream.pipecat.SpeechstreamTTSService` in a real Pipecat pipeline against a
real gateway and prints what came out of it as JSON. Runs in the frameworks' environment
(.venv-agents, tests/agents-requirements.txt) with the repository's root on its path;
driven by tests/integration/test_pipecat.py, and by perf for time to first audio:

    .venv-agents/bin/python tests/pipecat_driver.py turns URL RATE SEED TEXT LONG
    .venv-agents/bin/python tests/pipecat_driver.py resume URL_A URL_B PID SEED TEXT
    .venv-agents/bin/python tests/pipecat_driver.py speak URL RATE PAUSE_S TEXT [VOICE]
    .venv-agents/bin/python tests/pipecat_driver.py {ttfa,ttfa-floor} URL N TEXT

- `turns`: three LLM turns on one service, fed as an LLM feeds them (a start frame, the
  text in deltas, an end frame): TEXT; LONG, interrupted at its first audio; TEXT again.
- `resume`: one turn of TEXT with the service given both gateways; at the turn's third
  audio frame the first gateway (process PID) is told to stop (SIGTERM).
- `speak`: TEXT twice as a TTSSpeakFrame, PAUSE_S seconds apart, at the pipeline's RATE;
  the second in VOICE, where given, set with a TTSUpdateSettingsFrame between them.
- `ttfa`: N pipelines at once, each speaking TEXT as one turn: the seconds from its first
  text frame queued to its first audio frame out of the service, per turn. `ttfa-floor`:
  the same through a service that answers at once (AnswerAtOnce), Pipecat's own share.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import AsyncGenerator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[1]))

from pipecat.frames.frames import (  # noqa: E402
    EndFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    MetricsFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
    TTSUpdateSettingsFrame,
)
from pipecat.metrics.metrics import TTFBMetricsData  # noqa: E402
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: E402
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.services.settings import TTSSettings  # noqa: E402
from pipecat.services.tts_service import TextAggregationMode, TTSService  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402

from speechstream.pipecat import SpeechstreamTTSService  # noqa: E402
from tests.agent_turns import deltas, gateway_metrics  # noqa: E402

SEED_OF_SPEAK = 11  # tests/integration/test_speech_http.py's SEED


class Sink(FrameProcessor):
    """What a transport's output would get: every frame noted with where it came in the
    stream and the pipeline clock's time."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[tuple[int, Frame]] = []  # (clock ns, frame) in order
        self.first_audio: dict[str, asyncio.Future] = {}  # per context: the perf_counter of its first audio
        self.stopped: dict[str, asyncio.Future] = {}  # per context: its TTSStoppedFrame came
        self.new_context: asyncio.Queue[str] = asyncio.Queue()  # contexts as their TTSStartedFrame comes

    def _future(self, table: dict[str, asyncio.Future], context_id: str) -> asyncio.Future:
        return table.setdefault(context_id, asyncio.get_running_loop().create_future())

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        self.frames.append((self.get_clock().get_time(), frame))
        if isinstance(frame, TTSStartedFrame):
            self.new_context.put_nowait(frame.context_id)
        elif isinstance(frame, TTSAudioRawFrame) and not self._future(self.first_audio, frame.context_id).done():
            self.first_audio[frame.context_id].set_result(time.perf_counter())
        elif isinstance(frame, TTSStoppedFrame) and not self._future(self.stopped, frame.context_id).done():
            self.stopped[frame.context_id].set_result(True)
        await self.push_frame(frame, direction)

    def audio(self, context_id: str) -> dict:
        """The context's audio as it came out: its PCM's rate, channels, samples and level."""
        frames = [f for _, f in self.frames if isinstance(f, TTSAudioRawFrame) and f.context_id == context_id]
        pcm = np.frombuffer(b"".join(f.audio for f in frames), "<i2").astype(np.float64) / 32768
        return {
            "rates": sorted({f.sample_rate for f in frames}), "channels": sorted({f.num_channels for f in frames}),
            "frames": len(frames), "samples": pcm.size,
            "peak": float(np.abs(pcm).max(initial=0)), "rms": float(np.sqrt(np.mean(pcm**2))) if pcm.size else 0.0,
        }

    def words(self, context_id: str) -> list[tuple[str, float]]:
        """The context's timed words, each at its seconds after the context's first audio
        frame came out (where the service starts timing words)."""
        first = next((at for at, f in self.frames if isinstance(f, TTSAudioRawFrame) and f.context_id == context_id), 0)
        return [(f.text, (f.pts - first) / 1e9) for _, f in self.frames
                if isinstance(f, TTSTextFrame) and f.context_id == context_id and f.pts is not None]

    def ttfb(self) -> list[float]:
        return [d.value for _, f in self.frames if isinstance(f, MetricsFrame)
                for d in f.data if isinstance(d, TTFBMetricsData) and "Speechstream" in d.processor]


class AnswerAtOnce(TTSService):
    """Pipecat's own floor for perf.frameworks.agents: a TTS service whose audio is there the
    moment its text is (a frame of silence for each text frame), on the same audio
    context path as ours; what a turn takes through it is the pipeline's alone."""

    def __init__(self) -> None:
        # Its turn ends (TTSStoppedFrame) a moment after its last text: nothing more comes.
        super().__init__(text_aggregation_mode=TextAggregationMode.TOKEN, push_text_frames=False,
                         push_start_frame=True, push_stop_frames=True, stop_frame_timeout_s=0.2)

    def can_generate_metrics(self) -> bool:
        return True

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        yield TTSAudioRawFrame(bytes(2 * self.sample_rate // 50), self.sample_rate, 1, context_id=context_id)


class Bot:
    """One pipeline, the service and a sink, run by a runner of its own."""

    def __init__(self, url: str | list[str], rate: int, seed: int | None = None, floor: bool = False) -> None:
        self.tts = AnswerAtOnce() if floor else SpeechstreamTTSService(
            url=url, voice_params={} if seed is None else {"seed": seed})
        self.sink = Sink()
        self.errors: list[str] = []
        self.connected = self.disconnected = 0
        self.worker = PipelineWorker(
            Pipeline([self.tts, self.sink]), idle_timeout_secs=None,
            params=PipelineParams(audio_out_sample_rate=rate, enable_metrics=True, send_initial_empty_metrics=False),
        )
        self.started = asyncio.Event()
        self.worker.event_handler("on_pipeline_started")(self._started)
        self.worker.event_handler("on_pipeline_error")(self._error)
        self.tts.event_handler("on_connected")(self._connected)
        self.tts.event_handler("on_disconnected")(self._disconnected)
        self.running: asyncio.Task | None = None

    async def _started(self, worker, frame) -> None:
        self.started.set()

    async def _error(self, worker, frame) -> None:
        self.errors.append(str(frame.error))

    async def _connected(self, tts) -> None:
        self.connected += 1

    async def _disconnected(self, tts) -> None:
        self.disconnected += 1

    async def start(self) -> None:
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        self.running = asyncio.create_task(runner.run())
        await asyncio.wait_for(self.started.wait(), 30)

    async def say(self, text: str, end: bool = True) -> tuple[str, float]:
        """Queue an LLM turn; its context's id and when its first text frame was queued."""
        queued = time.perf_counter()
        await self.worker.queue_frames([LLMFullResponseStartFrame(), *map(LLMTextFrame, deltas(text)),
                                        *([LLMFullResponseEndFrame()] if end else [])])
        return await asyncio.wait_for(self.sink.new_context.get(), 30), queued

    async def end(self) -> None:
        await self.worker.queue_frame(EndFrame())
        await asyncio.wait_for(self.running, 60)


async def turns(url: str, rate: int, seed: int, text: str, long: str) -> dict:
    bot = Bot(url, rate, seed)
    await bot.start()
    sink = bot.sink
    served = [gateway_metrics(url)["speechstream_audio_seconds_total"]]
    session = bot.tts.client.ready["session_id"]

    a, _ = await bot.say(text)
    await asyncio.wait_for(sink._future(sink.stopped, a), 60)
    served.append(gateway_metrics(url)["speechstream_audio_seconds_total"])

    # An LLM turn interrupted at its first audio, as a user barging in: no end frame.
    b, _ = await bot.say(long, end=False)
    await asyncio.wait_for(sink._future(sink.first_audio, b), 60)
    await bot.worker.queue_frame(InterruptionFrame())
    deadline, metrics = time.monotonic() + 10, gateway_metrics(url)
    while metrics["speechstream_contexts"] and time.monotonic() < deadline:  # the cancel closes it
        await asyncio.sleep(0.05)
        metrics = gateway_metrics(url)
    served.append(metrics["speechstream_audio_seconds_total"])
    interrupted_at = next(i for i, (_, f) in enumerate(sink.frames) if isinstance(f, InterruptionFrame))
    after = [f for _, f in sink.frames[interrupted_at:] if isinstance(f, TTSAudioRawFrame) and f.context_id == b]

    c, _ = await bot.say(text)
    await asyncio.wait_for(sink._future(sink.first_audio, c), 60)
    during = gateway_metrics(url)["speechstream_connections"]
    await asyncio.wait_for(sink._future(sink.stopped, c), 60)
    served.append(gateway_metrics(url)["speechstream_audio_seconds_total"])
    same_session = bot.tts.client.ready["session_id"] == session
    resumes = bot.tts.client.resumes
    await bot.end()

    return {
        "turns": [{"context_id": ctx, **sink.audio(ctx), "words": sink.words(ctx), "served_s": served[i + 1] - served[i]}
                  for i, ctx in enumerate((a, b, c))],
        "interrupted": {"open_contexts_after": metrics["speechstream_contexts"], "audio_frames_after": len(after)},
        "connections_during_last_turn": during, "same_session": same_session, "resumes": resumes,
        "connected": bot.connected, "disconnected": bot.disconnected,
        "ttfb": sink.ttfb(), "errors": bot.errors,
    }


async def resume(url_a: str, url_b: str, pid: int, seed: int, text: str) -> dict:
    bot = Bot([url_a, url_b], 24000, seed)
    await bot.start()
    sink = bot.sink
    context, _ = await bot.say(text)
    while sum(isinstance(f, TTSAudioRawFrame) for _, f in sink.frames) < 3:
        await asyncio.sleep(0.005)
    os.kill(pid, signal.SIGTERM)
    await asyncio.wait_for(sink._future(sink.stopped, context), 120)
    resumes = bot.tts.client.resumes
    await bot.end()
    return {"context_id": context, **sink.audio(context), "words": sink.words(context), "resumes": resumes,
            "connected": bot.connected, "errors": bot.errors}


async def speak(url: str, rate: int, pause_s: float, text: str, voice: str | None) -> dict:
    """TEXT twice as a TTSSpeakFrame (a bot's greeting), `pause_s` apart; the second with
    `voice`, where given, set as a bot sets it at run time."""
    bot = Bot(url, rate, SEED_OF_SPEAK)
    await bot.start()
    contexts = []
    for i in range(2):
        if i:
            await asyncio.sleep(pause_s)
            if voice:
                await bot.worker.queue_frame(TTSUpdateSettingsFrame(delta=TTSSettings(voice=voice)))
        await bot.worker.queue_frame(TTSSpeakFrame(text))
        contexts.append(await asyncio.wait_for(bot.sink.new_context.get(), 30))
        await asyncio.wait_for(bot.sink._future(bot.sink.stopped, contexts[-1]), 60)
    await bot.end()
    return {"turns": [{"context_id": c, **bot.sink.audio(c)} for c in contexts],
            "connected": bot.connected, "disconnected": bot.disconnected, "errors": bot.errors}


async def ttfa(url: str, n: int, text: str, floor: bool = False) -> dict:
    """N bots at once, each one turn after a warm-up turn of its own (the connection and
    the server warm, as the other paths of perf.frameworks.agents): from its first text frame
    queued to its first audio."""
    bots = [Bot(url, 24000, floor=floor) for _ in range(n)]
    await asyncio.gather(*(bot.start() for bot in bots))
    for bot in bots:
        warm_up, _ = await bot.say("Ready.")
        await asyncio.wait_for(bot.sink._future(bot.sink.stopped, warm_up), 120)

    async def one(bot: Bot) -> float:
        context, queued = await bot.say(text)
        first = await asyncio.wait_for(bot.sink._future(bot.sink.first_audio, context), 120)
        await asyncio.wait_for(bot.sink._future(bot.sink.stopped, context), 120)
        return first - queued

    seconds = await asyncio.gather(*(one(bot) for bot in bots))
    await asyncio.gather(*(bot.end() for bot in bots))
    return {"ttfa_s": seconds, "errors": [e for bot in bots for e in bot.errors]}


async def run(mode: str, args: list[str]) -> dict:
    """The mode's result; on a failure, the traceback and exit status 1 at once (a
    pipeline still running would hold asyncio.run's shutdown)."""
    try:
        if mode == "turns":
            url, rate, seed, text, long = args
            return await turns(url, int(rate), int(seed), text, long)
        if mode == "resume":
            url_a, url_b, pid, seed, text = args
            return await resume(url_a, url_b, int(pid), int(seed), text)
        if mode == "speak":
            url, rate, pause_s, text, *voice = args
            return await speak(url, int(rate), float(pause_s), text, voice[0] if voice else None)
        if mode in ("ttfa", "ttfa-floor"):
            url, n, text = args
            return await ttfa(url, int(n), text, floor=mode == "ttfa-floor")
        raise ValueError(f"unknown mode {mode!r}")
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def main() -> None:
    print(json.dumps(asyncio.run(run(sys.argv[1], sys.argv[2:]))))


if __name__ == "__main__":
    main()
