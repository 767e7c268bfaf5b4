"""Triton shim for the tts BLS model: sentences → acoustic → chunked vocoder → PCM chunks
(the engine is python_backends.streaming.synthesize; its stages, python_backends.bls)."""

# The Python backend stub runs an isolated interpreter (PYTHONPATH is ignored); the
# launcher names the project and its virtual environment here instead.
import os
import sys

sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))

import asyncio

from python_backends import contract as c
from python_backends.bls import BlsStages
from python_backends.catalog import configured_voices
from python_backends.chunking import sized_for_load
from python_backends.requests import read_tts_request
from python_backends.scheduler import DeadlineScheduler, PlaybackClock, Streams
from python_backends.streaming import SENTENCE_LOOKAHEAD, synthesize, tts_outputs
from python_backends.triton_glue import (
    FINAL,
    declare,
    gauge,
    log_error,
    parameters,
    request_inputs,
    request_parameter,
    response,
    send_error,
)


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        return declare(config, c.TTS_MODEL)

    def initialize(self, args):
        p = parameters(args)
        self.max_text_chars = int(p.get("max_text_chars", c.MAX_TEXT_CHARS))
        # Each open acoustic request waits in a thread; a stream keeps SENTENCE_LOOKAHEAD open.
        self.stages = BlsStages(waiters=int(p.get("max_streams", "256")) * SENTENCE_LOOKAHEAD)
        # Calls in flight to both stages together, handed to the client with the fewest
        # running, then to the stream whose listener needs audio soonest: on a CPU the
        # stages share the cores, so no more calls run than there are cores and none of
        # them is a stream's work far ahead of its need.
        self.slots = DeadlineScheduler(int(p.get("slots", "0")) or os.cpu_count() or 1)
        self.pad_to_buckets = p.get("pad_to_buckets", "false") == "true"
        self.voices = configured_voices()
        self.metric_family, self.active = gauge(c.TTS_ACTIVE_METRIC, "tts requests being synthesized now")
        self.streams = Streams()

    async def execute(self, requests):
        await asyncio.gather(*(self._serve(request) for request in requests))

    async def _serve(self, request):
        sender = request.get_response_sender()
        client = request_parameter(request, c.CLIENT_PARAMETER)
        self.active.increment(1)
        try:
            with self.streams.serving(client):
                tts = read_tts_request(request_inputs(request, c.TTS_MODEL), self.max_text_chars, self.voices)
                rate = tts.voice_info.sample_rate
                loaded = self.streams.over_share(client, self.slots.share())
                chunking, head = sized_for_load(tts.chunking, tts.chunking_asked, loaded)
                chunks = synthesize(
                    tts.sentences, tts.voice, self.stages.for_voice(tts.voice_info.name, tts.speaker), chunking=chunking,
                    head=head, scheduler=self.slots.for_client(client), clock=PlaybackClock(rate),
                    is_cancelled=request.is_cancelled, pad_to_buckets=self.pad_to_buckets,
                )
                async for chunk in chunks:
                    self.slots.capacity.made(chunk.pcm.size / rate)
                    sender.send(response(tts_outputs(chunk, self.slots.capacity.streams)))
            sender.send(flags=FINAL)
        except (c.InvalidRequest, c.StageError) as e:
            send_error(sender, str(e))
        except Exception as e:
            log_error(f"tts: request failed: {e!r}")
            send_error(sender, f"tts failed: {e}")
        finally:
            self.active.increment(-1)

    def finalize(self):
        self.stages.close()
        del self.active  # a metric goes before its family
        del self.metric_family
