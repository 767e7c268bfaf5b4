"""The gateway's code that talks to Triton: a `tts` request over a gRPC stream, and its
failures turned into the protocol's errors, once, for WebSocket and HTTP alike (chat
mode's Thinker requests, gateway/thinking.py, go through the same `responses`).

A request goes to the Triton server with the least outstanding work among those up
(backends.Backends). Triton unreachable, or a stage whose process died under the
request, is `backend_unavailable` (an unreachable server is marked down at once); Triton
refusing or failing the request otherwise is `synthesis_failed`. A request whose server
or stage went away (those, and no progress) resumes within a bound (gateway/resumption.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from types import MappingProxyType

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from contract import models as c
from contract.text import Sentence
from gateway.backends import NOT_PROBED, Backend, Backends, NoBackend, gateway_name
from gateway.resumption import Resumption, TtsChunk
from speechstream import protocol as v1

log = logging.getLogger("speechstream.gateway")


class SynthesisFailed(Exception):
    """A request that ended without its audio; `code` is protocol v1's error code. `gone`:
    its server or a stage went away (unreachable, a stub dead, no progress), so what it
    had not delivered may be issued again; by default, for `backend_unavailable`."""

    def __init__(self, code: str, message: str, gone: bool | None = None, served: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.gone = code == v1.BACKEND_UNAVAILABLE if gone is None else gone
        self.served = served  # False: no server was up to take it


@dataclass(frozen=True)
class Resuming:
    """A request's server or stage went away: what it had not delivered is being issued
    again, for up to `within_s`; the audio that follows continues where it stopped."""

    code: str
    message: str
    within_s: float


# How a call fails when Triton cannot be reached (or goes away mid-call).
UNREACHABLE = (grpc.aio.AioRpcError, ConnectionError, OSError)


def unreachable(error: Exception) -> str:
    """Why Triton could not be reached, in a line or more."""
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return str(error) or type(error).__name__


STREAM_CLOSE_S = 1.0  # how long a finished stream may take to close before it is cancelled
PROBE_TEXT = "Ready."  # what a readiness probe synthesizes: one word, through every stage
_PARAM_TYPES = {
    p.name: triton_to_np_dtype(p.triton_type.removeprefix("TYPE_")) for p in c.VOICE_PARAMS + c.CHUNK_PARAMS + c.AR_PARAMS
}


def infer_input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


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


async def responses(backend: Backend, request: dict, progress_s: float) -> AsyncIterator:
    """One decoupled request on a gRPC stream of its own, its responses (InferResult) up
    to the final one. Leaving early cancels the call, which makes Triton cancel the
    request. A response that takes more than `progress_s` after it was asked for fails
    the request: a stage that died or hangs must not hang the stream (the wait while
    the caller sends audio to a slow client does not count)."""
    sent = asyncio.Event()  # the request iterator stays open until the call ends

    async def requests():
        yield request
        await sent.wait()

    call = backend.triton.stream_infer(requests())
    replies = aiter(call)
    finished = False
    try:
        while True:
            try:
                result, error = await asyncio.wait_for(anext(replies), progress_s or None)
            except StopAsyncIteration:
                raise ConnectionError("Triton closed the stream") from None
            except asyncio.TimeoutError:  # not the builtin on Python 3.10
                raise SynthesisFailed(v1.SYNTHESIS_FAILED, f"Triton made no progress for {progress_s:g} s", gone=True) from None
            if error is not None:
                stage_lost = any(fault in error.message() for fault in c.STUB_FAULTS)
                raise SynthesisFailed(v1.BACKEND_UNAVAILABLE if stage_lost else v1.SYNTHESIS_FAILED, error.message())
            if result.get_response().parameters["triton_final_response"].bool_param:
                sent.set()
                finished = await _closed(replies)
                return
            yield result
    finally:
        sent.set()
        if not finished:
            call.cancel()


async def _stream(
    backend: Backend, request: dict, progress_s: float, first_response: Callable[[float], None] = lambda _: None,
) -> AsyncIterator[TtsChunk]:
    """A `tts` request's audio, chunk by chunk; the capacity the model says at its end is
    noted on `backend`."""
    start = time.monotonic()
    async with aclosing(responses(backend, request, progress_s)) as results:
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


async def _closed(replies: AsyncIterator, timeout_s: float = STREAM_CLOSE_S) -> bool:
    """Whether Triton ended a stream whose request is done and half-closed, within
    `timeout_s`. Cancelling it at once instead, when the final response was in, left
    Triton 2.51 holding the model now and then: its unload then waited out the exit
    timeout."""
    try:
        await asyncio.wait_for(anext(replies), timeout_s)
    except StopAsyncIteration:
        return True
    except (asyncio.TimeoutError, *UNREACHABLE):
        pass
    return False


@contextlib.asynccontextmanager
async def on_backend(backends: Backends) -> AsyncIterator[Backend]:
    """The least loaded Triton server that is up, for one request; its failures become
    SynthesisFailed with protocol v1's code, and a server that cannot be reached is
    marked down. A failure to reach a server already known to be down, the only one left
    to try, is not `served`: no server was up for the request."""
    try:
        backend = backends.acquire()
    except NoBackend as e:
        raise SynthesisFailed(v1.BACKEND_UNAVAILABLE, str(e), served=False) from None
    was_up = backend.up
    try:
        yield backend
    except SynthesisFailed as e:
        log.warning("Triton %s failed a request: %s", backend.url, e.message)
        raise
    except UNREACHABLE as e:
        why = unreachable(e)
        backend.mark(False, why.splitlines()[0])
        raise SynthesisFailed(v1.BACKEND_UNAVAILABLE, f"Triton unavailable: {why}", served=was_up) from None
    finally:
        backends.release(backend)


class Synthesizer:
    """Streams `tts` requests from the least loaded Triton server that is up, resuming
    those whose server or stage goes away for up to `resume_s` (0: never)."""

    def __init__(
        self, backends: Backends, progress_s: float, first_response: Callable[[float], None] = lambda _: None,
        models: Mapping[str, str] = MappingProxyType({}), resume_s: float = 0.0,
        resumed: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backends = backends
        self.models = models  # the Triton model of each voice not spoken by `tts`
        self.progress_s = progress_s  # the longest wait for a response before the request fails
        self.resume_s = resume_s
        self._first_response = first_response  # told each request's seconds to its first audio
        self._resumed = resumed  # told each outage a request resumes from
        self._clock = clock

    async def synthesize(
        self, sentences: Sequence[Sentence], params: tuple[tuple[str, float | int], ...] = (), client: str = "",
        voice: str = c.DEFAULT_VOICE, mid_stream: bool = False,
    ) -> AsyncIterator[TtsChunk | Resuming]:
        """The audio of `sentences` in `voice`, chunk by chunk, for `client` (its address);
        a Resuming before the audio goes on after an outage; SynthesisFailed if it cannot
        come. A new stream's request that finds no server up fails at once; `mid_stream`:
        the stream it continues has delivered audio already, so it waits for one within
        the bound too. Without a seed of the client's, the request gets one: a sentence
        issued again must sound the same."""
        if c.SEED not in dict(params):
            params += ((c.SEED, random.randrange(2**63)),)
        model = self.models.get(voice, c.TTS_MODEL)
        resumption = Resumption(sentences, mid_stream)
        while True:
            try:
                request = tts_request(resumption.rest, params, client, voice, model)
                async with aclosing(self._issue(request)) as chunks:
                    async for chunk in chunks:
                        if (whole := resumption.delivered(chunk)) is not None:
                            yield whole
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

    async def _issue(self, request: dict) -> AsyncIterator[TtsChunk]:
        async with on_backend(self.backends) as backend:
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
