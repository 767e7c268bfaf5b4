"""Triton shim for the acoustic stage (Talker): one sentence → its latent frames, in two
responses when HEAD_FRAMES asks for its first frames early (AcousticEngine.pieces)."""

# The Python backend stub runs an isolated interpreter (PYTHONPATH is ignored); the
# launcher names the project and its virtual environment here instead.
import os
import sys

sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))

import asyncio
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing

from python_backends import contract as c
from python_backends.engines import AcousticEngine
from python_backends.catalog import configured_voices
from python_backends.requests import read_params, read_text, read_voice, read_voice_params
from python_backends.streaming import acoustic_outputs
from python_backends.triton_glue import FINAL, declare, log_error, parameters, request_inputs, response, send_error
from python_backends.voice import load_voice


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        return declare(config, c.ACOUSTIC_MODEL)

    def initialize(self, args):
        p = parameters(args)
        self.voices = configured_voices()
        self.engines = {name: AcousticEngine(load_voice(info)) for name, info in self.voices.items()}
        # Sentences of all streams share these workers in arrival order, so a new
        # stream's first sentence waits for at most one job (a prior or a flow) per worker.
        self.workers = ThreadPoolExecutor(int(p.get("workers", "2")), thread_name_prefix="acoustic")

    async def execute(self, requests):
        await asyncio.gather(*(self._serve(request) for request in requests))

    async def _serve(self, request):
        sender = request.get_response_sender()
        try:
            inputs = request_inputs(request, c.ACOUSTIC_MODEL)
            text = read_text(inputs, c.MAX_SENTENCE_CHARS)
            voice = read_voice(inputs, self.voices)
            engine = self.engines[voice.name]
            params = read_voice_params(inputs, engine.default_params(), voice)
            head = read_params(inputs, (c.HEAD_PARAM,))[c.HEAD_FRAMES]
            async with aclosing(engine.pieces(text, params, head, self.workers)) as pieces:
                async for piece in pieces:
                    if request.is_cancelled():
                        break
                    sender.send(response(acoustic_outputs(piece)))
            sender.send(flags=FINAL)
        except c.InvalidRequest as e:
            send_error(sender, str(e))
        except Exception as e:
            log_error(f"acoustic: request failed: {e!r}")
            send_error(sender, f"acoustic stage failed: {e}")

    def finalize(self):
        self.workers.shutdown(cancel_futures=True)

