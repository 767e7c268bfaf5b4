"""Triton shim for the Talker of the autoregressive family: a sentence → frames of
codec codes, streamed from a vLLM engine (python_backends.ar.talker) that runs on an
event loop thread of its own, as Triton's vllm_backend runs it."""

# The stub's isolated interpreter ignores PYTHONPATH; the launcher names the project and
# the AR environment (vLLM, torch) here instead.
import os
import sys

sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_AR_PYTHONPATH", "").split(os.pathsep))
# vLLM runs its child processes (model inspection, at import; the engine) with
# sys.executable, which is the PATH's python in the stub: make it the AR environment's.
sys.executable = os.environ["SPEECHSTREAM_AR_PYTHON"]

import locale

locale.setlocale(locale.LC_CTYPE, "C.UTF-8")  # the stub starts with an ASCII locale; torch reads UTF-8 files

import asyncio
import multiprocessing
import threading
from contextlib import aclosing
from pathlib import Path

import numpy as np

from python_backends import contract as c
from python_backends.ar.orpheus import frame_budget
from python_backends.ar.talker import TalkerEngine, TalkerParams
from python_backends.requests import read_talker_request
from python_backends.triton_glue import FINAL, declare, gauge, log_error, parameters, request_inputs, response, send_error


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        return declare(config, c.TALKER_MODEL)

    def initialize(self, args):
        p = parameters(args)
        multiprocessing.set_executable(sys.executable)  # for vLLM's engine processes
        gauges = [gauge(name, about) for name, about in (
            (c.TALKER_RUNNING_METRIC, "Talker requests in vLLM's batch"),
            (c.TALKER_WAITING_METRIC, "Talker requests waiting for a place in vLLM's batch"),
            (c.TALKER_TOKENS_METRIC, "codec tokens vLLM has written since the Talker started"),
            (c.TALKER_PEAK_METRIC, "the most Talker requests vLLM has run in one batch since the Talker started"),
            (c.TALKER_GUIDED_METRIC, "Talker streams decoded as a classifier-free guidance pair"),
            (c.TALKER_GUIDANCE_LOST_METRIC, "guided Talker streams whose pair fell out of lock-step (decoded unguided from there)"),
        )]
        self.families = [family for family, _ in gauges]
        self.running, self.waiting, self.tokens, self.peak, self.guided, self.guidance_lost = (m for _, m in gauges)
        self.running_streams, self.stopped = set(), set()  # STREAM_IDs streaming, and those a STOP named
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="talker-loop", daemon=True)
        self.thread.start()
        model = Path(os.environ["SPEECHSTREAM_AR_MODEL"]) / "talker"
        start = self._start(model, p.get("dtype", "float32"), int(p.get("max_model_len", "4096")),
                            p.get("enforce_eager", "true") == "true")
        self.engine = asyncio.run_coroutine_threadsafe(start, self.loop).result()

    async def _start(self, model, dtype, max_model_len, eager):
        return TalkerEngine(model, dtype=dtype, max_model_len=max_model_len, eager=eager, on_stats=self._export)

    def _export(self, stats):
        """vLLM's counts on Triton's metrics port."""
        self.running.set(stats.running)
        self.waiting.set(stats.waiting)
        self.tokens.set(stats.generated_tokens)
        self.peak.set(stats.peak_running)
        self.guided.set(stats.guided)
        self.guidance_lost.set(stats.guidance_lost)

    def execute(self, requests):
        for request in requests:
            asyncio.run_coroutine_threadsafe(self._serve(request), self.loop)
        return None

    async def _serve(self, request):
        sender = request.get_response_sender()
        try:
            talk = read_talker_request(request_inputs(request, c.TALKER_MODEL))
            if isinstance(talk, str):  # STOP: the stream of that name, if it runs, ends at its next frame
                if talk in self.running_streams:
                    self.stopped.add(talk)
                sender.send(flags=FINAL)
                return
            budget = frame_budget(talk.text, talk.max_frames)
            params = TalkerParams(temperature=talk.temperature, seed=talk.seed, max_frames=budget,
                                  guidance_scale=talk.guidance_scale)
            self.running_streams.add(talk.stream_id)
            try:
                async with aclosing(self.engine.frames(talk.text, talk.voice, params)) as frames:
                    async for codes in frames:
                        if request.is_cancelled() or talk.stream_id in self.stopped:
                            break  # closing the frames aborts the vLLM request
                        sender.send(response({c.CODES: codes.astype(np.int32)}))
            finally:
                self.running_streams.discard(talk.stream_id)
                self.stopped.discard(talk.stream_id)
            sender.send(flags=FINAL)
        except c.InvalidRequest as e:
            send_error(sender, str(e))
        except Exception as e:
            log_error(f"talker: request failed: {e!r}")
            send_error(sender, f"talker failed: {e}")

    def finalize(self):
        self.engine.shutdown()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        del self.running, self.waiting, self.tokens, self.peak, self.guided, self.guidance_lost  # before their families
        del self.families
