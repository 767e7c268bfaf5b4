"""The gateway's HTTP endpoints: OpenAI's `POST /v1/audio/speech` (the body streams as
the audio is made), the voices, health, metrics and the page. The request and body
formats are sans I/O in speech_api.py; this is their aiohttp shell."""

from __future__ import annotations

import contextlib
import logging
import time
from http import HTTPStatus
from pathlib import Path

from aiohttp import web

from python_backends import contract as c
from python_backends.text import split_sentences

from .access import json_response, unauthorized
from .segmenter import batches
from .service import GATEWAY, Gateway
from .session import VOICES
from .speech_api import ApiError, SpeechBody, SpeechRequest, parse_speech_request
from .synthesis import SynthesisFailed, Synthesizer

log = logging.getLogger("speechstream.gateway")

STATIC = Path(__file__).parent / "static"
SPEECH_PATH = "/v1/audio/speech"
# The status of a failure before the first audio: Triton unreachable, or Triton failing.
FAILURE_STATUS = {c.BACKEND_UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE, c.SYNTHESIS_FAILED: HTTPStatus.INTERNAL_SERVER_ERROR}


async def speech(request: web.Request) -> web.StreamResponse:
    """POST /v1/audio/speech. The status waits for the first audio, so a failure before
    it is an error response; one after it cuts the body short (a truncated chunked body,
    which clients report)."""
    gateway = request.app[GATEWAY]
    if refusal := unauthorized(request, gateway.settings):
        return refusal
    try:
        speech_request = parse_speech_request(await request.read(), VOICES, gateway.settings.max_text_chars)
    except ApiError as e:
        return api_error(gateway, c.INVALID_MESSAGE, e)
    except web.HTTPRequestEntityTooLarge:
        return api_error(gateway, c.MESSAGE_TOO_LARGE, ApiError(
            f"the body is over {gateway.settings.max_message_bytes} bytes", status=HTTPStatus.REQUEST_ENTITY_TOO_LARGE
        ))
    started = time.monotonic()
    body = SpeechBody(speech_request, c.VOICE_SAMPLE_RATES[speech_request.voice])
    async with contextlib.aclosing(synthesize(gateway.synthesizer, speech_request)) as chunks:
        try:
            first = await anext(chunks)
        except SynthesisFailed as e:
            return api_error(gateway, e.code, ApiError(e.message, status=FAILURE_STATUS[e.code]))
        response = web.StreamResponse(headers={"Content-Type": speech_request.content_type})
        await response.prepare(request)
        await response.write(body.push(first.pcm))
        gateway.metrics.first_audio(time.monotonic() - started)
        try:
            async for chunk in chunks:
                await response.write(body.push(chunk.pcm))
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


async def synthesize(synthesizer: Synthesizer, speech_request: SpeechRequest):
    """The text's audio, cut into sentences once and sent in requests of whole sentences
    (segmenter.batches): each request is synthesized to its end, so this bounds the work
    for a client that stops reading."""
    for batch in batches(split_sentences(speech_request.text, c.MAX_SENTENCE_CHARS)):
        async for chunk in synthesizer.synthesize([s.text for s in batch], speech_request.voice_params):
            yield chunk


def api_error(gateway: Gateway, code: str, error: ApiError) -> web.Response:
    gateway.metrics.error(code)
    return json_response(error.status, error.body())


async def healthz(request: web.Request) -> web.Response:
    """200 while at least one Triton is ready, as the health poll and the streams last saw."""
    backends = request.app[GATEWAY].backends.all
    ready = any(b.up for b in backends)
    return json_response(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, {
        "gateway": "ok",
        "triton": "ready" if ready else "unavailable",
        "backends": {b.url: "ready" if b.up else "unavailable" for b in backends},
    })


async def metrics(request: web.Request) -> web.Response:
    body, content_type = request.app[GATEWAY].metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": content_type})


async def voices(request: web.Request) -> web.Response:
    if refusal := unauthorized(request, request.app[GATEWAY].settings):
        return refusal
    return json_response(HTTPStatus.OK, {"voices": [{"id": v, "sample_rate": c.VOICE_SAMPLE_RATES[v]} for v in VOICES]})


async def page(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})
