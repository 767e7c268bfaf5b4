"""Triton shim for the acoustic stage (Talker): text → one response per sentence, the
first sentence in two pieces when HEAD_FRAMES asks for its first frames early."""

# The Python backend stub runs an isolated interpreter (PYTHONPATH is ignored); the
# launcher names the project and its virtual environment here instead.
import os
import sys

sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from python_backends import contract as c
from python_backends.chunking import flow_pieces
from python_backends.engines import FLOW_CONTEXT, AcousticEngine
from python_backends.requests import read_params, read_text, read_voice_params
from python_backends.text import split_sentences
from python_backends.triton_glue import FINAL, declare, log_error, parameters, request_inputs, response, send_error
from python_backends.voice import DEFAULT_VOICE, load_voice


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        return declare(config, c.ACOUSTIC_MODEL)

    def initialize(self, args):
        p = parameters(args)
        self.engine = AcousticEngine(load_voice(p.get("voice", DEFAULT_VOICE)))
        self.max_text_chars = int(p.get("max_text_chars", c.MAX_TEXT_CHARS))
        # Sentences of all streams share these workers in arrival order, so a new
        # stream's first sentence waits for at most one sentence per worker.
        self.workers = ThreadPoolExecutor(int(p.get("workers", "2")), thread_name_prefix="acoustic")

    async def execute(self, requests):
        await asyncio.gather(*(self._serve(request) for request in requests))

    async def _serve(self, request):
        sender = request.get_response_sender()
        loop = asyncio.get_running_loop()
        try:
            inputs = request_inputs(request, c.ACOUSTIC_MODEL)
            text = read_text(inputs, self.max_text_chars)
            params = read_voice_params(inputs, self.engine.default_params())
            head = read_params(inputs, (c.HEAD_PARAM,))[c.HEAD_FRAMES]
            for index, sentence in enumerate(split_sentences(text, c.MAX_SENTENCE_CHARS)):
                if request.is_cancelled():
                    break
                prior = await loop.run_in_executor(self.workers, self.engine.prior, index, sentence, params)
                for start, end in flow_pieces(prior.frames, head if index == 0 else 0, FLOW_CONTEXT):
                    latent = await loop.run_in_executor(self.workers, self.engine.flow, prior, start, end)
                    sender.send(response(piece(prior, latent, first=start == 0)))
            sender.send(flags=FINAL)
        except c.InvalidRequest as e:
            send_error(sender, str(e))
        except Exception as e:
            log_error(f"acoustic: request failed: {e!r}")
            send_error(sender, f"acoustic stage failed: {e}")

    def finalize(self):
        self.workers.shutdown(cancel_futures=True)


def piece(prior, latent, first: bool) -> dict:
    """One response's outputs: a run of the sentence's frames; the first carries its
    timing (durations, phoneme ids, words), later ones empty word arrays."""
    words = prior.words if first else []
    return {
        c.LATENT: latent,
        c.DURATIONS: prior.durations if first else np.empty(0, np.int32),
        c.PHONEME_IDS: prior.phoneme_ids if first else np.empty(0, np.int64),
        c.WORDS: np.array([w.encode() for w, _, _ in words], dtype=object),
        c.WORD_FRAMES: np.array([(a, b) for _, a, b in words], dtype=np.int32).reshape(-1, 2),
        c.SENTENCE_INDEX: np.array([prior.index], dtype=np.int32),
        c.TEXT_SPAN: np.array([prior.sentence.start, prior.sentence.end], dtype=np.int32),
    }
