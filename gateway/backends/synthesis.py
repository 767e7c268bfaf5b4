"""Synthesis: a `tts` (or `tts_ar`) request over a gRPC stream (gateway/backends/requests.py),
its audio chunk by chunk and its failures as SynthesisFailed, once, for WebSocket and
HTTP alike; the readiness probe and the health watch over the servers.

A request whose server or stage went away (unreachable, a stub dead, no progress)
resumes within a bound (gateway/backends/resumption.py). A request whose client has not
read more than a bounded lead of its audio is paused between two sentences: closed, so
that Triton makes nothing more for it, and issued again from the next sentence once the
client has read half of the lead.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from contract import models as c
from contract.text import Sentence
from gateway.backends.requests import UNREACHABLE, BackendFailed, infer_input, on_backend, responses, unreachable
from gateway.backends.resumption import Resumption, TtsChunk
from gateway.backends.servers import NOT_PROBED, Backend, Backends, gateway_name
from speechstream import protocol as v1

log = logging.getLogger("speechstream.gateway")


class SynthesisFailed(BackendFailed):
    """A `tts` request that ended without its audio."""

    code = v1.SYNTHESIS_FAILED  # Triton refused or failed it


@dataclass(frozen=True)
class Resuming:
    """A request's server or stage went away: what it had not delivered is being issued
    again, for up to `within_s`; the audio that follows continues where it stopped."""

    code: str
    message: str
    within_s: float


PAUSE_POLL_S = 0.1  # how often a paused request asks whether its client has read
PROBE_TEXT = "Ready."  # what a readiness probe synthesizes: one word, through every stage
_PARAM_TYPES = {
    p.name: triton_to_np_dtype(p.triton_type.removeprefix("TYPE_")) for p in c.VOICE_PARAMS + c.CHUNK_PARAMS + c.AR_PARAMS
}


@functools.cache
def _input_names(model: str) -> frozenset[str]:
    return frozenset(tensor["name"] for tensor in c.model_inputs(model))


def tts_request(
    sentences: Sequence[Sentence], params: tuple[tuple[str, float | int], ...] = (), client: str = "",
    voice: str = c.DEFAULT_VOICE, model: str = c.TTS_MODEL,
) -> dict:
    """A request to `model` (`tts`, or the AR family's `tts_ar`) for sentences already
    cut, in `voice`; `params` are (tensor name, value) pairs, those the model does not
    take left out (the AR family has no Piper scales, nor PHONEMES: it reads the text);
    `client` names who asked, for the model's fair share."""
    inputs = [infer_input(c.SENTENCES, np.array([s.text.encode() for s in sentences], dtype=object))]
    inputs.append(infer_input(c.VOICE, np.array([voice.encode()], dtype=object)))
    takes = _input_names(model)
    if c.PHONEMES in takes and any(s.phonemes for s in sentences):
        phonemes = [c.encode_phonemes(s.phonemes).encode() for s in sentences]
        inputs.append(infer_input(c.PHONEMES, np.array(phonemes, dtype=object)))
    inputs += [infer_input(name, np.array([value], dtype=_PARAM_TYPES[name])) for name, value in params if name in takes]
    parameters = {"triton_enable_empty_final_response": True, c.CLIENT_PARAMETER: client,
                  c.GATEWAY_PARAMETER: gateway_name()}
    return {"model_name": model, "inputs": inputs, "parameters": parameters}


async def _stream(
    backend: Backend, request: dict, progress_s: float, first_response: Callable[[float], None] = lambda _: None,
) -> AsyncIterator[TtsChunk]:
    """A `tts` request's audio, chunk by chunk; the capacity the model says at its end is
    noted on `backend`."""
    start = time.monotonic()
    async with aclosing(responses(backend, request, progress_s, SynthesisFailed)) as results:
        async for result in results:
            if (capacity := result.as_numpy(c.CAPACITY)) is not None:
                backend.capacity_by_model[request["model_name"]] = float(capacity[0])
            if (pcm := result.as_numpy(c.PCM)) is not None:
                if start is not None:
                    first_response(time.monotonic() - start)
                    start = None
                names, spans = result.as_numpy(c.WORDS), result.as_numpy(c.WORD_SAMPLES)
                words = [] if names is None else [(w.decode(), int(a), int(b)) for w, (a, b) in zip(names, spans)]
                yield TtsChunk(pcm, int(result.as_numpy(c.SENTENCE_INDEX)[0]), words)


class Synthesizer:
    """Streams `tts` requests from the least loaded Triton server that is up, resuming
    those whose server or stage goes away for up to `resume_s` (0: never)."""

    def __init__(
        self, backends: Backends, progress_s: float, first_response: Callable[[float], None] = lambda _: None,
        models: Mapping[str, str] = MappingProxyType({}), resume_s: float = 0.0,
        resumed: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic,
        max_lead_s: float = 0.0, paused: Callable[[int], None] = lambda _: None,
    ) -> None:
        self.backends = backends
        self.models = models  # the Triton model of each voice not spoken by `tts`
        self.progress_s = progress_s  # the longest wait for a response before the request fails
        self.resume_s = resume_s
        self._first_response = first_response  # told each request's seconds to its first audio
        self._resumed = resumed  # told each outage a request resumes from
        self._clock = clock
        self.max_lead_s = max_lead_s  # the most audio a client may leave unread before its request pauses (0: any)
        self._paused = paused  # told +1 when a request pauses, -1 when it goes on

    async def synthesize(
        self, sentences: Sequence[Sentence], params: tuple[tuple[str, float | int], ...] = (), client: str = "",
        voice: str = c.DEFAULT_VOICE, mid_stream: bool = False, unread: Callable[[], float] | None = None,
    ) -> AsyncIterator[TtsChunk | Resuming]:
        """The audio of `sentences` in `voice`, chunk by chunk, for `client` (its address);
        a Resuming before the audio goes on after an outage; SynthesisFailed if it cannot
        come. A new stream's request that finds no server up fails at once; `mid_stream`:
        the stream it continues has delivered audio already, so it waits for one within
        the bound too. Without a seed of the client's, the request gets one: a sentence
        issued again must sound the same. `unread`: the seconds of audio its client has
        not taken, asked at each sentence's start, where the request pauses past the lead."""
        if c.SEED not in dict(params):
            params += ((c.SEED, random.randrange(2**63)),)
        model = self.models.get(voice, c.TTS_MODEL)
        resumption = Resumption(sentences, mid_stream)
        while True:
            try:
                request = tts_request(resumption.rest, params, client, voice, model)
                async with aclosing(self._issue(request)) as chunks:
                    async for chunk in chunks:
                        if self._ahead(unread, resumption, chunk):
                            break  # closing the request: Triton makes nothing more of it
                        if (whole := resumption.delivered(chunk)) is not None:
                            yield whole
                    else:
                        return
            except SynthesisFailed as e:
                if (wait_s := resumption.failed(e.gone, self._clock(), self.resume_s, e.served)) is None:
                    raise
                outage_began = resumption.attempts == 1  # logged once: an outage can take many attempts
                log.log(logging.WARNING if outage_began else logging.DEBUG,
                        "a request lost its server or a stage (%s); issuing its last %d of %d sentences again in "
                        "%.2f s, attempt %d, for up to %g s", e.message.splitlines()[0], len(resumption.rest),
                        len(resumption.sentences), wait_s, resumption.attempts, self.resume_s)
                if outage_began:
                    self._resumed()
                    yield Resuming(e.code, e.message, self.resume_s)
                await asyncio.sleep(wait_s)
                continue
            resumption.paused_before(resumption.first + chunk.sentence_index)
            await self._until_read(unread)

    def _ahead(self, unread: Callable[[], float] | None, resumption: Resumption, chunk: TtsChunk) -> bool:
        """Whether `chunk` begins a sentence after others delivered whole, and the client
        has more than the lead of audio unread."""
        begins = resumption.first + chunk.sentence_index != resumption.sentence
        return begins and unread is not None and self.max_lead_s > 0 and unread() > self.max_lead_s

    async def _until_read(self, unread: Callable[[], float]) -> None:
        """Wait, holding no compute, until the client has read down to half the lead."""
        self._paused(1)
        try:
            while unread() > self.max_lead_s / 2:
                await asyncio.sleep(PAUSE_POLL_S)
        finally:
            self._paused(-1)

    async def _issue(self, request: dict) -> AsyncIterator[TtsChunk]:
        async with on_backend(self.backends, SynthesisFailed) as backend:
            # Closed at once when the reader stops (a cancel, a client gone): that ends the call.
            async with aclosing(_stream(backend, request, self.progress_s, self._first_response)) as chunks:
                async for chunk in chunks:
                    yield chunk

    async def probe(self, backend: Backend) -> None:
        """Synthesize a word through every stage of `backend` and note the outcome: the
        readiness that Triton's own (a model can be loaded and its stub dead) cannot tell."""
        try:
            async for _ in _stream(backend, tts_request([Sentence(0, len(PROBE_TEXT), PROBE_TEXT)]), self.progress_s):
                pass
        except SynthesisFailed as e:
            backend.probed(e.message)
        except UNREACHABLE as e:
            backend.probed(f"Triton unavailable: {unreachable(e).splitlines()[0]}")
        else:
            backend.probed(None)

    async def watch(self, poll_s: float, probe_s: float) -> None:
        """Ask every server whether it is up every `poll_s`, and probe each one that is
        every `probe_s`, and at once when it comes up (`probe_s` 0: never; up is ready);
        not one draining, which takes no new request."""
        last_probe = -math.inf
        while True:
            await self.backends.poll()
            due = probe_s and time.monotonic() - last_probe >= probe_s
            last_probe = time.monotonic() if due else last_probe
            up = [b for b in self.backends.all if b.up and not b.draining]
            if not probe_s:
                for backend in up:
                    backend.probed(None)
            await asyncio.gather(*(self.probe(b) for b in up if probe_s and (due or b.probe_error == NOT_PROBED)))
            await asyncio.sleep(poll_s)
