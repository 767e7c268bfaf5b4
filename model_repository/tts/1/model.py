"""Triton shim for the tts BLS model: streams acoustic → chunked vocoder → PCM chunks."""

# The Python backend stub runs an isolated interpreter (PYTHONPATH is ignored); the
# launcher names the project and its virtual environment here instead.
import os
import sys

sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))

import asyncio
import collections
import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils

from python_backends import contract as c
from python_backends.chunking import sized_for_load
from python_backends.requests import read_chunk_params, read_params, read_text
from python_backends.scheduler import DeadlineScheduler, PlaybackClock
from python_backends.streaming import (
    SENTENCE_LOOKAHEAD, LatentPiece, latent_sentence, sentence_latents, stream_pcm, tts_outputs,
)
from python_backends.text import split_sentences
from python_backends.triton_glue import FINAL, declare, gauge, log_error, parameters, request_inputs, response, send_error
from python_backends.voice import DEFAULT_VOICE, sample_rate


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        return declare(config, c.TTS_MODEL)

    def initialize(self, args):
        p = parameters(args)
        self.max_text_chars = int(p.get("max_text_chars", c.MAX_TEXT_CHARS))
        # The BLS response iterator blocks; each acoustic request parks a thread on it,
        # and a stream has up to SENTENCE_LOOKAHEAD of them open.
        waiters = int(p.get("max_streams", "256")) * SENTENCE_LOOKAHEAD
        self.waiters = ThreadPoolExecutor(waiters, thread_name_prefix="acoustic-wait")
        self.metric_family, self.active = gauge(c.TTS_ACTIVE_METRIC, "tts requests being synthesized now")
        # Calls in flight to both stages together, handed to the stream whose listener
        # needs audio soonest: on a CPU the stages share the cores, so no more calls run
        # than there are cores and none of them is a stream's work far ahead of its need.
        self.slots = DeadlineScheduler(int(p.get("slots", "0")) or os.cpu_count() or 1)
        self.streams = 0  # requests being served now: the load that sizes first chunks
        self.pad_to_buckets = p.get("pad_to_buckets", "false") == "true"
        self.rate = sample_rate(p.get("voice", DEFAULT_VOICE))

    async def execute(self, requests):
        await asyncio.gather(*(self._serve(request) for request in requests))

    async def _serve(self, request):
        sender = request.get_response_sender()
        self.active.increment(1)
        self.streams += 1
        try:
            inputs = request_inputs(request, c.TTS_MODEL)
            text = read_text(inputs, self.max_text_chars)
            read_params(inputs, c.VOICE_PARAMS)
            loaded = self.streams > self.slots.slots
            chunking, head = sized_for_load(read_chunk_params(inputs), c.INITIAL_CHUNK_FRAMES in inputs, loaded)
            voice = {p.name: inputs[p.name] for p in c.VOICE_PARAMS if p.name in inputs}
            clock = PlaybackClock(self.rate)
            synthesize = functools.partial(self._acoustic, voice, head)
            sentences = sentence_latents(
                split_sentences(text, c.MAX_SENTENCE_CHARS), synthesize, clock, request.is_cancelled
            )
            chunks = stream_pcm(
                sentences, self._vocode, chunking, clock, request.is_cancelled, pad_to_buckets=self.pad_to_buckets
            )
            async for chunk in chunks:
                sender.send(response(tts_outputs(chunk)))
            sender.send(flags=FINAL)
        except (c.InvalidRequest, c.StageError) as e:
            send_error(sender, str(e))
        except Exception as e:
            log_error(f"tts: request failed: {e!r}")
            send_error(sender, f"tts failed: {e}")
        finally:
            self.active.increment(-1)
            self.streams -= 1

    async def _acoustic(self, voice, head, index, sentence, deadline):
        """One sentence's latent frames from the acoustic model, as soon as its first
        piece is in (the first sentence's first `head` frames come alone, so that
        vocoding starts before its flow has run to the end).

        One request per sentence, issued only as far ahead as the stream needs, so a
        cancelled stream stops acoustic work too (Triton 2.51's BLS cannot cancel a
        request it has sent). The request holds its slot to its last response, even if
        the stream is cancelled meanwhile: a response iterator dropped unread deadlocks
        the 2.51 stub when the model unloads.
        """
        head = head if index == 0 else 0
        return await latent_sentence(
            index, (sentence.start, sentence.end),
            lambda: self._acoustic_pieces(voice, head, sentence),
            lambda read: self.slots.run(deadline, read),
        )

    async def _acoustic_pieces(self, voice, head, sentence):
        inputs = [pb_utils.Tensor(c.TEXT, np.array([sentence.text.encode()], dtype=object))]
        inputs += [pb_utils.Tensor(name, value) for name, value in voice.items()]
        if head:
            inputs.append(pb_utils.Tensor(c.HEAD_FRAMES, np.array([head], dtype=np.int32)))
        acoustic = pb_utils.InferenceRequest(
            model_name=c.ACOUSTIC_MODEL, inputs=inputs,
            requested_output_names=[c.LATENT, c.DURATIONS, c.WORDS, c.WORD_FRAMES],
        )
        responses = iter(await acoustic.async_exec(decoupled=True))
        loop = asyncio.get_running_loop()
        read_all = False
        try:
            # The iterator blocks: each response is awaited in a waiter thread.
            while (r := await loop.run_in_executor(self.waiters, next, responses, None)) is not None:
                if r.has_error():
                    raise c.StageError(r.error().message())
                if pb_utils.get_output_tensor_by_name(r, c.LATENT) is not None:  # None: the empty final response
                    yield latent_piece(r)
            read_all = True
        finally:
            if not read_all:
                await loop.run_in_executor(self.waiters, collections.deque, responses, 0)  # read to the end

    async def _vocode(self, window, deadline):
        return await self.slots.run(deadline, lambda: self._vocoder_call(window))

    async def _vocoder_call(self, window):
        vocoder = pb_utils.InferenceRequest(
            model_name=c.VOCODER_MODEL,
            inputs=[pb_utils.Tensor(c.LATENT, window[None])],
            requested_output_names=[c.PCM],
        )
        r = await vocoder.async_exec()
        if r.has_error():
            raise c.StageError(r.error().message())
        return pb_utils.get_output_tensor_by_name(r, c.PCM).as_numpy()[0]

    def finalize(self):
        self.waiters.shutdown(cancel_futures=True)
        del self.active  # a metric goes before its family
        del self.metric_family


def latent_piece(response) -> LatentPiece:
    """An acoustic response's frames; the first of a sentence carries its frame count
    (its durations' sum) and words, later ones empty arrays."""
    output = functools.partial(pb_utils.get_output_tensor_by_name, response)
    spans, names = output(c.WORD_FRAMES).as_numpy(), output(c.WORDS).as_numpy()
    words = tuple((w.decode(), int(a), int(b)) for w, (a, b) in zip(names, spans))
    return LatentPiece(output(c.LATENT).as_numpy(), int(output(c.DURATIONS).as_numpy().sum()), words)
