"""Triton shim for the tts_ar BLS model: sentences → talker → chunked code2wav → PCM
chunks (the engine is python_backends.ar.pipeline.speak; its stages, python_backends.ar.bls)."""

# The Python backend stub runs an isolated interpreter (PYTHONPATH is ignored); the
# launcher names the project and its virtual environment here instead.
import os
import sys

sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))

import asyncio
from contextlib import aclosing

from python_backends import contract as c
from python_backends.ar import orpheus
from python_backends.ar.bls import ArBlsStages
from python_backends.ar.pipeline import ar_outputs, speak
from python_backends.bls import BlsStages
from python_backends.requests import read_tts_ar_request
from python_backends.triton_glue import (
    FINAL,
    counter,
    declare,
    log_error,
    parameters,
    request_inputs,
    response,
    send_error,
)


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        return declare(config, c.TTS_AR_MODEL)

    def initialize(self, args):
        p = parameters(args)
        self.max_text_chars = int(p.get("max_text_chars", c.MAX_TEXT_CHARS))
        self.bls = BlsStages(waiters=int(p.get("max_streams", "256")))  # a Talker stream each
        counters = [counter(name, about) for name, about in (
            (c.TTS_AR_FIRST_CHUNKS_METRIC, "tts_ar requests that got a first chunk"),
            (c.TTS_AR_FIRST_FRAMES_METRIC, "seconds from tts_ar requests to their first chunk's frames (the Talker)"),
            (c.TTS_AR_FIRST_DECODE_METRIC, "seconds from those frames to their audio (Code2Wav)"),
        )]
        self.families = [family for family, _ in counters]
        self.first_chunks, self.first_frames_s, self.first_decode_s = (metric for _, metric in counters)

    async def execute(self, requests):
        await asyncio.gather(*(self._serve(request) for request in requests))

    async def _serve(self, request):
        sender = request.get_response_sender()
        try:
            tts = read_tts_ar_request(request_inputs(request, c.TTS_AR_MODEL), self.max_text_chars)
            stages = ArBlsStages(self.bls, tts.voice, tts.talker)
            chunks = speak(tts.sentences, stages, tts.chunking, orpheus.SAMPLES_PER_FRAME, request.is_cancelled)
            async with aclosing(chunks):
                async for chunk in chunks:
                    sender.send(response(ar_outputs(chunk)))
                    if chunk.index == 0:
                        self.first_chunks.increment(1)
                        self.first_frames_s.increment(chunk.frames_in_s)
                        self.first_decode_s.increment(chunk.decoded_s - chunk.frames_in_s)
            sender.send(flags=FINAL)
        except (c.InvalidRequest, c.StageError) as e:
            send_error(sender, str(e))
        except Exception as e:
            log_error(f"tts_ar: request failed: {e!r}")
            send_error(sender, f"tts_ar failed: {e}")

    def finalize(self):
        self.bls.close()
        del self.first_chunks, self.first_frames_s, self.first_decode_s  # metrics go before their families
        del self.families
