"""`POST /v1/audio/transcriptions`: OpenAI's transcription API over the recognizer that
serves listen mode (Triton's `asr` model).

The upload (multipart/form-data, up to --max-upload-bytes) is decoded by PyAV to the
recognizer's 16 kHz mono (up to --max-audio seconds), then sent on a recognizer stream
of its own, finals only, a second of audio a request, then its end and STOP; each
utterance's final, placed where its speech started and stopped, is a segment. The form
and the bodies are sans I/O in transcripts.py; this is their aiohttp shell.
"""

from __future__ import annotations

import asyncio
import uuid
from http import HTTPStatus

import numpy as np
from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from contract import models as c
from gateway.backends.recognition import Recognition, RecognitionFailed
from gateway.backends.servers import Backends
from gateway.edge.service import GATEWAY, Gateway
from gateway.protocols.http_api import FAILURE_STATUS, api_error, invalid, refused, stream_refused
from gateway.protocols.speech_api import ApiError
from gateway.protocols.transcripts import Transcript, TranscriptionRequest, parse_transcription_form, transcription_body
from gateway.settings import Settings
from speechstream import protocol as v1
from speechstream.media.decoding import AudioTooLong, UndecodableAudio, decode_audio

TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
FIELD_BYTES = 64 * 1024  # a text field's most: a prompt is a few hundred words
CHUNK_BYTES = 64 * 1024  # what the upload is read in
REQUEST_SAMPLES = c.ASR_SAMPLE_RATE  # audio per recognizer request: a second
ENDPOINT_MS = next(p.default for p in c.ASR_PARAMS if p.name == c.ENDPOINT_MS)


async def transcriptions(request: web.Request) -> web.Response:
    """POST /v1/audio/transcriptions: admitted, read, decoded and recognized, counted
    among its client's streams until answered."""
    gateway = request.app[GATEWAY]
    if refusal := refused(request):
        return refusal
    if not gateway.settings.listen:
        return api_error(gateway, v1.LISTEN_UNAVAILABLE, ApiError(
            "this server runs no speech recognizer: transcription needs a gateway started with --listen, in front of "
            "a Triton serving the asr model", status=HTTPStatus.NOT_FOUND, code=v1.LISTEN_UNAVAILABLE))
    try:
        transcription = parse_transcription_form(*await read_form(request, gateway.settings))
    except ApiError as e:
        return invalid(gateway, e)
    if refused_now := stream_refused(request, gateway):
        return refused_now
    with gateway.http_stream(request.remote or "") as pace:
        pace.streamed = False  # nothing is played as it comes: no lead for admission to weigh
        return await transcribe(gateway, transcription)


async def transcribe(gateway: Gateway, transcription: TranscriptionRequest) -> web.Response:
    """The file decoded (off the event loop: seconds of CPU for a long one) and recognized."""
    settings = gateway.settings
    try:
        audio = await asyncio.to_thread(decode_audio, transcription.audio, c.ASR_SAMPLE_RATE, settings.max_audio_s)
    except (UndecodableAudio, AudioTooLong) as e:
        problem = e if isinstance(e, AudioTooLong) else f"could not decode the audio file ({e})"
        return api_error(gateway, v1.INVALID_MESSAGE, ApiError(str(problem), "file"))
    duration_s = audio.size / c.ASR_SAMPLE_RATE
    try:
        bound_s = settings.stage_timeout_s and settings.stage_timeout_s + duration_s  # slower than real time: failing
        transcript = await recognize(gateway.backends, audio, bound_s)
    except RecognitionFailed as e:
        return api_error(gateway, e.code, ApiError(e.message, status=FAILURE_STATUS[e.code]))
    body = transcription_body(transcription, transcript.segments(duration_s), duration_s)
    return web.Response(body=body, headers={"Content-Type": transcription.content_type})


async def recognize(backends: Backends, audio: np.ndarray, timeout_s: float) -> Transcript:
    """The recognizer's finals of `audio` (16 kHz int16), on a stream of its own: the
    audio in requests of a second, the last one ending the utterance, then STOP; every
    event awaited, within `timeout_s` (0: no bound). RecognitionFailed if it fails."""
    transcript = Transcript()

    async def heard(kind: str, utterance: object, audio_ms: int, text: str) -> None:
        transcript.heard(kind, utterance, audio_ms, text)

    recognition = Recognition(backends, f"transcription-{uuid.uuid4().hex}", ENDPOINT_MS, 0, heard, partials=False)
    running = asyncio.create_task(recognition.run())
    try:
        for start in range(0, max(audio.size, 1), REQUEST_SAMPLES):
            recognition.hear(audio[start:start + REQUEST_SAMPLES], end=start + REQUEST_SAMPLES >= audio.size)
        await recognition.finish(running, timeout_s or None)
    finally:
        running.cancel()  # a client gone, or a failure: the stream ends with the request
    return transcript


async def read_form(request: web.Request, settings: Settings) -> tuple[list[tuple[str, str]], bytes | None]:
    """The form's text fields (name, value) and its file, each within its size; ApiError
    for a body that is no form, too large (413), or silent for --body-timeout (408)."""
    if request.content_type != "multipart/form-data":
        raise ApiError(f"the body must be multipart/form-data, not {request.content_type}",
                       status=HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
    fields, audio = [], None
    try:
        reader = await request.multipart()
        while (part := await _within(reader.next(), settings.body_timeout_s)) is not None:
            if not isinstance(part, BodyPartReader):
                raise ApiError("a form field holds a multipart body of its own")
            if part.name == "file":
                audio = await read_part(part, settings.max_upload_bytes, settings.body_timeout_s)
            else:
                value = await read_part(part, FIELD_BYTES, settings.body_timeout_s)
                fields.append((part.name or "", value.decode("utf-8", "replace")))
    except (ValueError, HttpProcessingError, web.RequestPayloadError) as e:  # aiohttp's words for a broken form
        why = e.message if isinstance(e, HttpProcessingError) else str(e)
        raise ApiError(f"the form cannot be read: {' '.join(why.split()) or type(e).__name__}") from None
    return fields, audio


async def read_part(part: BodyPartReader, limit: int, timeout_s: float) -> bytes:
    """A form field's bytes; ApiError past `limit` (413), or when nothing comes for `timeout_s`."""
    data = bytearray()
    while chunk := await _within(part.read_chunk(CHUNK_BYTES), timeout_s):
        data += chunk
        if len(data) > limit:
            what = "the file" if part.name == "file" else f"field '{part.name}'"
            raise ApiError(f"{what} is over {limit} bytes", part.name, status=HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    return bytes(data)


async def _within(awaitable, timeout_s: float):
    """`awaitable`, or a 408 ApiError when it takes over `timeout_s` (0: no bound): a
    client that stops sending its upload."""
    try:
        return await asyncio.wait_for(awaitable, timeout_s or None)
    except asyncio.TimeoutError:  # not the builtin on Python 3.10
        raise ApiError(f"the upload sent nothing for {timeout_s:g} s", status=HTTPStatus.REQUEST_TIMEOUT) from None
