"""The gateway's HTTP endpoints: OpenAI's `POST /v1/audio/speech` (the body streams as
the audio is made, or comes whole with its length), the voices, health, metrics and the
page. The request and body formats are sans I/O in speech_api.py; this is their aiohttp
shell."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Mapping
from http import HTTPStatus
from pathlib import Path

import numpy as np
from aiohttp import web

from contract import models as c
from contract.text import split_sentences
from contract.voices import VoiceInfo
from gateway.backends.resumption import TtsChunk
from gateway.backends.synthesis import SynthesisFailed, Synthesizer
from gateway.conversation.pace import Pace
from gateway.conversation.segmenter import batches
from gateway.conversation.ssml import Pause, with_phonemes
from gateway.edge.access import (
    KeyFailures,
    cors_headers,
    json_response,
    preflight_headers,
    refused_origin,
    request_id,
    unauthorized,
)
from gateway.edge.metrics import merged
from gateway.edge.service import GATEWAY, Gateway
from gateway.edge.workers import siblings_say
from gateway.messages import OPENAI_VOICES, ProtocolError
from gateway.protocols.speech_api import (
    OPENAI_MODELS,
    ApiError,
    SpeechBody,
    SpeechRequest,
    parse_speech_request,
    streams_by_default,
)
from gateway.protocols.transcripts import TRANSCRIPTION_MODELS
from gateway.settings import Settings
from speechstream import protocol as v1

log = logging.getLogger("speechstream.gateway")

STATIC = Path(__file__).parent.parent / "static"
SPEECH_PATH = "/v1/audio/speech"
# The status of a failure before the first audio (or the transcript): Triton unreachable,
# or Triton failing.
FAILURE_STATUS = {
    v1.BACKEND_UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE, v1.SYNTHESIS_FAILED: HTTPStatus.INTERNAL_SERVER_ERROR,
    v1.RECOGNITION_FAILED: HTTPStatus.INTERNAL_SERVER_ERROR,
}
# The error code a refused request counts under in the metrics.
METRIC_CODES = {
    HTTPStatus.UNAUTHORIZED: "unauthorized", HTTPStatus.FORBIDDEN: "forbidden_origin",
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE: v1.MESSAGE_TOO_LARGE, HTTPStatus.UNSUPPORTED_MEDIA_TYPE: v1.INVALID_MESSAGE,
    HTTPStatus.REQUEST_TIMEOUT: "request_timeout", HTTPStatus.TOO_MANY_REQUESTS: "too_many_key_failures",
}


async def speech(request: web.Request) -> web.StreamResponse:
    """POST /v1/audio/speech: admitted, parsed, and counted among its client's streams
    while the body streams."""
    gateway = request.app[GATEWAY]
    try:
        speech_request = await read_speech_request(request, gateway.settings, gateway.key_failures, gateway.voices)
    except ApiError as e:
        return invalid(gateway, e)
    if refused_now := stream_refused(request, gateway):
        return refused_now
    client = request.remote or ""
    with gateway.http_stream(client) as pace:
        return await stream_speech(request, gateway, speech_request, client, pace)


def invalid(gateway: Gateway, error: ApiError) -> web.Response:
    """OpenAI's error for a request that could not be read, counted under its code."""
    return api_error(gateway, METRIC_CODES.get(error.status, v1.INVALID_MESSAGE), error)


def stream_refused(request: web.Request, gateway: Gateway) -> web.Response | None:
    """OpenAI's error for a request refused a stream now (Gateway.stream_refusal), or None."""
    if refusal := gateway.stream_refusal(request.remote or ""):
        return api_error(gateway, refusal.code, refusal_error(refusal))
    return None


def refusal_error(refusal: ProtocolError) -> ApiError:
    """OpenAI's error for a stream refused (Gateway.stream_refusal): 503 from a gateway
    that is stopping, else 429; both say when to try again."""
    retry_s = str(math.ceil(refusal.retry_after_ms / 1000))
    status = HTTPStatus.SERVICE_UNAVAILABLE if refusal.code == v1.SERVER_DRAINING else HTTPStatus.TOO_MANY_REQUESTS
    return ApiError(refusal.message, status=status, code=refusal.code, headers={"Retry-After": retry_s})


async def stream_speech(
    request: web.Request, gateway: Gateway, speech_request: SpeechRequest, client: str, pace: Pace
) -> web.StreamResponse:
    """The body, streamed as the audio is made. The status waits for the first audio, so a
    failure before it is an error response; one after it cuts the body short (a truncated
    chunked body, which clients report)."""
    started = time.monotonic()
    voice = gateway.voices[speech_request.voice]
    body = SpeechBody(speech_request, voice.sample_rate)
    async with contextlib.aclosing(synthesize(gateway.synthesizer, speech_request, voice, client)) as chunks:
        try:
            first = await anext(chunks)
        except SynthesisFailed as e:
            return api_error(gateway, e.code, ApiError(e.message, status=FAILURE_STATUS[e.code]))
        if not speech_request.stream:
            pace.streamed = False
            return await whole_speech(request, gateway, speech_request, body, first, chunks)
        response = web.StreamResponse(headers={"Content-Type": speech_request.content_type})
        await response.prepare(request)
        await response.write(body.push(first.pcm))
        pace.heard_at, pace.audio_s = time.monotonic(), body.audio_s
        gateway.metrics.first_audio(pace.heard_at - started)
        try:
            async for chunk in chunks:
                await response.write(body.push(chunk.pcm))
                pace.audio_s = body.audio_s
            await response.write(body.finish())
        except SynthesisFailed as e:
            gateway.metrics.error(e.code)
            log.warning("%s: cutting a streamed body short after %.2f s of audio", SPEECH_PATH, body.audio_s)
            request.transport.close()
            return response
        finally:
            gateway.metrics.audio(body.audio_s)
    await response.write_eof()
    return response


async def whole_speech(
    request: web.Request, gateway: Gateway, speech_request: SpeechRequest, body: SpeechBody, first: TtsChunk,
    chunks: AsyncIterator[TtsChunk],
) -> web.Response:
    """A whole body (`stream` false, or OpenAI's Python SDK's plain `create`): all of it,
    then sent at once with its length, so that WAV and FLAC headers say their exact sizes;
    a failure midway is an error response, since nothing was sent yet. It is held until
    sent: as long as `--max-text-chars` of text can be spoken. A client that hangs up
    stops it: nothing is written until the end, so no failed write would tell."""
    body.push(first.pcm)
    try:
        async for chunk in chunks:
            if hung_up(request):
                return web.Response(status=HTTPStatus.NO_CONTENT.value)  # sent to nobody; `chunks` closes
            body.push(chunk.pcm)
    except SynthesisFailed as e:
        return api_error(gateway, e.code, ApiError(e.message, status=FAILURE_STATUS[e.code]))
    data = body.finish()
    gateway.metrics.audio(body.audio_s)
    return web.Response(body=data, headers={"Content-Type": speech_request.content_type})


def hung_up(request: web.Request) -> bool:
    """Whether the client has closed its connection (aiohttp goes on running the handler)."""
    return request.transport is None or request.transport.is_closing()


async def synthesize(synthesizer: Synthesizer, speech_request: SpeechRequest, voice: VoiceInfo, client: str):
    """The text's audio, cut into sentences once (off the event loop: up to 0.1 s for the
    longest text) and sent in requests of whole sentences (segmenter.batches): each
    request is synthesized to its end, so this bounds the work for a client that stops
    reading. A request resuming after an outage only delays the body. SSML's pauses are
    silence between, and each of its rates is spoken in requests of its own."""
    requests = 0
    for piece in speech_request.pieces:
        if isinstance(piece, Pause):
            yield TtsChunk(np.zeros(piece.ms * voice.sample_rate // 1000, np.float32), 0, [])
            continue
        sentences = await asyncio.to_thread(split_sentences, piece.text, c.MAX_SENTENCE_CHARS, voice.language_family)
        for batch in batches(with_phonemes(sentences, piece, 0)):
            request = synthesizer.synthesize(batch, speech_request.params_at(piece.rate), client, voice.name,
                                             mid_stream=requests > 0)
            requests += 1
            async with contextlib.aclosing(request) as chunks:
                async for chunk in chunks:
                    if isinstance(chunk, TtsChunk):
                        yield chunk


async def read_speech_request(
    request: web.Request, settings: Settings, key_failures: KeyFailures, voices: Mapping[str, VoiceInfo]
) -> SpeechRequest:
    """The request, admitted and parsed, or the ApiError that refuses it. Only JSON bodies
    are taken: a browser sends a cross-origin `text/plain` POST without asking first."""
    if error := access_error(request, settings, key_failures):
        raise error
    if request.content_type != "application/json":
        raise ApiError(
            f"the body must be application/json, not {request.content_type}", status=HTTPStatus.UNSUPPORTED_MEDIA_TYPE
        )
    try:
        raw = await asyncio.wait_for(request.read(), settings.body_timeout_s or None)
    except asyncio.TimeoutError:  # not the builtin on Python 3.10
        raise ApiError(f"the body did not arrive within {settings.body_timeout_s:g} s",
                       status=HTTPStatus.REQUEST_TIMEOUT) from None
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(
            f"the body is over {settings.max_message_bytes} bytes", status=HTTPStatus.REQUEST_ENTITY_TOO_LARGE
        ) from None
    except web.RequestPayloadError as e:  # a bad Content-Encoding, a broken chunked body
        raise ApiError(f"the body cannot be read: {str(e).splitlines()[-1].strip()}") from None
    return parse_speech_request(raw, voices, settings.max_text_chars, streams_by_default(request.headers))


def api_error(gateway: Gateway, code: str, error: ApiError) -> web.Response:
    gateway.metrics.error(code)
    response = json_response(error.status, error.body())
    response.headers.update(error.headers)
    return response


async def healthz(request: web.Request) -> web.Response:
    """Liveness: 200 while the gateway answers, with what it knows of each Triton."""
    backends = request.app[GATEWAY].backends.all
    return json_response(HTTPStatus.OK, {"gateway": "ok", "backends": {b.url: b.state for b in backends}})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: 200 while at least one Triton can synthesize (up, and its last probe
    passed) and the gateway is not stopping, else 503; the body says why. Of several
    workers, whichever answers answers for all: ready only while every one is."""
    gateway = request.app[GATEWAY]
    ready, body = readiness(gateway)
    if gateway.worker:
        answers = await siblings_say(gateway.worker, "/readyz")
        each = {gateway.worker.index: ready, **{i: a is not None and a[0] == HTTPStatus.OK for i, a in answers.items()}}
        ready = all(each.values())
        body = {**body, "ready": ready, "workers": {str(i): each[i] for i in sorted(each)}}
    return json_response(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, body)


async def worker_readyz(request: web.Request) -> web.Response:
    """A worker's own readiness, on its loopback port."""
    ready, body = readiness(request.app[GATEWAY])
    return json_response(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, body)


def readiness(gateway: Gateway) -> tuple[bool, dict]:
    backends = gateway.backends.all
    ready = any(b.ready for b in backends) and not gateway.draining
    return ready, {"ready": ready, "draining": gateway.draining, "backends": {b.url: b.state for b in backends}}


async def metrics(request: web.Request) -> web.Response:
    """The metrics, behind the API key when there is one (Prometheus sends it as a bearer
    token: `authorization: {credentials: KEY}` in its scrape config). Of several workers,
    every worker's, each sample labelled with its `worker` (one that does not answer
    within a second is left out)."""
    gateway = request.app[GATEWAY]
    if refusal := unauthorized(request, gateway.settings, gateway.key_failures):
        return refusal.as_text()
    body, content_type = gateway.metrics.exposition()
    if gateway.worker:
        answers = await siblings_say(gateway.worker, "/metrics")
        texts = {gateway.worker.index: body.decode(), **{i: a[1] for i, a in answers.items() if a is not None}}
        body = merged(dict(sorted(texts.items())))
    return web.Response(body=body, headers={"Content-Type": content_type})


async def worker_metrics(request: web.Request) -> web.Response:
    """A worker's own metrics, on its loopback port."""
    body, content_type = request.app[GATEWAY].metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": content_type})


def access_error(request: web.Request, settings: Settings, key_failures: KeyFailures) -> ApiError | None:
    """OpenAI's error for a request without the key, or from an Origin not allowed."""
    if refusal := unauthorized(request, settings, key_failures) or refused_origin(request, settings):
        code = "invalid_api_key" if refusal.status == HTTPStatus.UNAUTHORIZED else None
        return ApiError(refusal.message, status=refusal.status, code=code, headers=refusal.headers)
    return None


def refused(request: web.Request) -> web.Response | None:
    """The JSON error response for a request not allowed in (access_error), or None."""
    gateway = request.app[GATEWAY]
    if error := access_error(request, gateway.settings, gateway.key_failures):
        return api_error(gateway, METRIC_CODES.get(error.status, v1.INVALID_MESSAGE), error)
    return None


async def voices(request: web.Request) -> web.Response:
    """GET /v1/voices: the voices, each with its sample rate, language and speakers (a
    multi-speaker voice's names for its speaker ids too)."""
    if refusal := refused(request):
        return refusal
    voices = request.app[GATEWAY].voices.values()
    return json_response(HTTPStatus.OK, {"voices": [
        {"id": v.name, "sample_rate": v.sample_rate, "language": v.language, "speakers": v.speakers,
         "family": v.family, "word_timestamps": v.word_timestamps}
        | ({"speaker_ids": dict(v.speaker_names)} if v.speaker_names else {})
        for v in voices
    ]})


async def audio_voices(request: web.Request) -> web.Response:
    """GET /v1/audio/voices: the voices and OpenAI's names, each with the voice it speaks with."""
    if refusal := refused(request):
        return refusal
    names = tuple(request.app[GATEWAY].voices)
    ours = [{"id": v, "name": v, "voice": v} for v in names]
    return json_response(HTTPStatus.OK, {"voices": ours + [{"id": v, "name": v, "voice": names[0]}
                                                           for v in OPENAI_VOICES]})


async def models(request: web.Request) -> web.Response:
    """GET /v1/models, as OpenAI lists them: the speech model names clients may pass, and
    the transcription models' where the recognizer is served."""
    if refusal := refused(request):
        return refusal
    gateway = request.app[GATEWAY]
    names = OPENAI_MODELS + (TRANSCRIPTION_MODELS if gateway.settings.listen else ())
    data = [{"id": m, "object": "model", "created": 0, "owned_by": "speechstream"} for m in names]
    return json_response(HTTPStatus.OK, {"object": "list", "data": data})


async def preflight(request: web.Request) -> web.Response:
    """OPTIONS: a browser asks whether a page on its Origin may call the API."""
    headers = preflight_headers(request, request.app[GATEWAY].settings)
    if headers is None:
        return web.Response(status=HTTPStatus.FORBIDDEN.value, text="this Origin is not allowed\n")
    return web.Response(status=HTTPStatus.NO_CONTENT.value, headers=headers)


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """Every response carries its request's X-Request-ID, and CORS headers for a page on
    an allowed Origin."""
    response.headers["X-Request-ID"] = request_id(request)
    response.headers.update(cors_headers(request, request.app[GATEWAY].settings))


async def page(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})
