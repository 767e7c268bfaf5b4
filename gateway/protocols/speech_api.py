"""OpenAI's `POST /v1/audio/speech`, sans I/O: the request body parsed and checked, errors
in OpenAI's shape, whether the body streams or comes whole, and the response body made
from PCM as it comes (frames, container, and the server-sent events of
`stream_format: "sse"`). The HTTP shell is in http_api.py.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import numpy as np

from contract.models import CLIENT_PARAMS, LENGTH_SCALE, SPEAKER
from contract.voices import VoiceInfo
from gateway.conversation.audio import FrameEncoder
from gateway.conversation.ssml import Pause, Spoken, SsmlError, looks_like_ssml, read_ssml
from gateway.messages import OPENAI_VOICES, ProtocolError, is_unicode, resolve_voice, voice_params
from speechstream.media.containers import CONTENT_TYPES, FRAME_FORMATS, ContainerWriter

# OpenAI's speech model names, listed by GET /v1/models; any name is accepted.
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
STREAM_FORMATS = ("audio", "sse")
DEFAULT_FORMAT = "mp3"  # as OpenAI's: clients that name no format expect it
RATES = {"pcm": 24000, "wav": 24000, "flac": 24000, "opus": 48000, "mp3": 24000, "aac": 24000}  # OpenAI's pcm is 24 kHz
FRAME_MS = 20
# Formats sent whole whatever the request: a FLAC header written before the audio cannot
# say its length (total samples 0, "unknown"), which libsndfile refuses; and FLAC is no
# low-latency format.
ALWAYS_WHOLE = ("flac",)
# OpenAI's Python SDK names itself on every request, and asks for the body as it comes
# only from `with_streaming_response`; without that header it reads the whole body
# before returning (its own test, in _base_client.py, is on the same header).
SDK_LANGUAGE, SDK_RAW_RESPONSE = "X-Stainless-Lang", "X-Stainless-Raw-Response"
_SPEED = next(p for p in CLIENT_PARAMS if p.name == LENGTH_SCALE)  # speed = 1 / length_scale


class ApiError(Exception):
    """A refused request, answered as OpenAI answers: status and an `error` object.
    `code` is OpenAI's (e.g. `invalid_api_key`); `headers` go with the response."""

    def __init__(
        self, message: str, param: str | None = None, status: HTTPStatus = HTTPStatus.BAD_REQUEST,
        code: str | None = None, headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        error = {"message": self.message, "type": "invalid_request_error", "param": self.param, "code": self.code}
        return {"error": error}


@dataclass(frozen=True)
class SpeechRequest:
    text: str
    voice: str
    response_format: str
    speed: float
    stream_format: str
    extra_params: tuple[tuple[str, float | int], ...] = ()  # noise_scale, noise_w, seed, speaker
    pace: float = 1.0  # the voice's own length_scale: speed 1
    stream: bool = True  # False: the whole body at once (SSE: in one event), with exact sizes in WAV and FLAC headers
    document: tuple[Spoken | Pause, ...] | None = None  # the input read as SSML (gateway/conversation/ssml.py)

    @property
    def length_scale(self) -> float:
        return self.pace / self.speed

    @property
    def pieces(self) -> tuple[Spoken | Pause, ...]:
        """What to say: the SSML's text at its rates and its pauses, or the input as it is."""
        return self.document if self.document is not None else (Spoken(self.text),)

    def params_at(self, rate: float) -> tuple[tuple[str, float | int], ...]:
        """The voice parameters for text read `rate` times as fast (SSML's <prosody rate>)."""
        if rate == 1:
            return self.voice_params
        return ((LENGTH_SCALE, self.length_scale / rate),) + self.extra_params

    @property
    def frame_format(self) -> str:
        """The gateway frame format (`opus` or `pcm_s16le`) the container is fed with."""
        return FRAME_FORMATS[self.response_format]

    @property
    def voice_params(self) -> tuple[tuple[str, float | int], ...]:
        """The `tts` request's voice parameters (speed is the inverse of length_scale)."""
        speed = () if self.speed == 1 else ((LENGTH_SCALE, self.length_scale),)
        return speed + self.extra_params

    @property
    def sample_rate(self) -> int:
        return RATES[self.response_format]

    @property
    def content_type(self) -> str:
        return "text/event-stream" if self.stream_format == "sse" else CONTENT_TYPES[self.response_format]


def _string(body: dict, name: str, default: str | None = None) -> str:
    value = body.get(name, default)
    if value is None:
        raise ApiError(f"'{name}' is required", name)
    if not isinstance(value, str):
        raise ApiError(f"'{name}' must be a string", name)
    return value


def streams_by_default(headers: Mapping[str, str]) -> bool:
    """Whether a request whose body does not say `stream` gets its body streamed: every
    request but the plain `create` of OpenAI's Python SDK, which reads the body whole
    before its caller sees a byte, so a whole body with exact WAV and FLAC sizes costs it
    nothing. `headers` are case-insensitive, as aiohttp's are."""
    return headers.get(SDK_LANGUAGE) != "python" or headers.get(SDK_RAW_RESPONSE) == "stream"


def parse_speech_request(
    raw: bytes, voices: Mapping[str, VoiceInfo], max_chars: int, stream_default: bool = True
) -> SpeechRequest:
    """The request in `raw` (a JSON body), or ApiError saying which field is wrong.
    `stream_default` is what a body without `stream` gets (streams_by_default); SSE
    always streams."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError("the body must be JSON") from None
    if not isinstance(body, dict):
        raise ApiError("the body must be a JSON object")
    _string(body, "model")  # any model name: one model serves them all
    text = _string(body, "input")
    if not is_unicode(text):
        raise ApiError("'input' holds a lone surrogate (\\ud800-\\udfff escape)", "input")
    if not text.strip():
        raise ApiError("'input' is empty", "input")
    if len(text) > max_chars:
        raise ApiError(f"'input' has {len(text)} characters; the limit is {max_chars}", "input")
    asked = _string(body, "voice")
    if (voice := resolve_voice(asked, tuple(voices))) is None:
        raise ApiError(f"unknown voice '{asked}'; use one of {', '.join((*voices, *OPENAI_VOICES))}", "voice")
    fmt = _string(body, "response_format", DEFAULT_FORMAT)
    if fmt not in RATES:
        raise ApiError(f"response_format '{fmt}' is not supported; use one of {', '.join(RATES)}", "response_format")
    stream_format = _string(body, "stream_format", "audio")
    if stream_format not in STREAM_FORMATS:
        raise ApiError(f"stream_format must be one of {', '.join(STREAM_FORMATS)}", "stream_format")
    stream = body.get("stream", stream_default or stream_format == "sse")
    if not isinstance(stream, bool):
        raise ApiError("'stream' must be true or false", "stream")
    if not stream and stream_format == "sse":
        raise ApiError("'stream': false needs stream_format 'audio'", "stream")
    stream = stream and fmt not in ALWAYS_WHOLE
    speed = body.get("speed", 1.0)
    low, high = 1 / _SPEED.maximum, 1 / _SPEED.minimum
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not low <= speed <= high:
        raise ApiError(f"'speed' must be a number from {low:g} to {high:g}", "speed")
    extra = _extra_params(body)
    if problem := voices[voice].speaker_problem(dict(extra).get(SPEAKER, 0)):
        raise ApiError(problem, "speaker")
    return SpeechRequest(text, voice, fmt, float(speed), stream_format, extra, voices[voice].length_scale, stream,
                         _document(body, text))


def _document(body: dict, text: str) -> tuple[Spoken | Pause, ...] | None:
    """The input read as SSML: when `ssml` says so, or, without it, when the input is a
    <speak> document (as Azure's, Google's and Polly's clients send it)."""
    ssml = body.get("ssml", looks_like_ssml(text))
    if not isinstance(ssml, bool):
        raise ApiError("'ssml' must be true or false", "ssml")
    if not ssml:
        return None
    try:
        return tuple(read_ssml(text))
    except SsmlError as e:
        raise ApiError(str(e), "input") from None


def _extra_params(body: dict) -> tuple[tuple[str, float | int], ...]:
    """Protocol v1's voice and sampling parameters as extension fields (`extra_body` in
    OpenAI's SDK); speed stands for length_scale."""
    params: list[tuple[str, float | int]] = []
    for key in (p.name.lower() for p in CLIENT_PARAMS if p.name != LENGTH_SCALE):
        try:
            params += voice_params({key: body[key]}) if key in body else ()
        except ProtocolError as e:
            raise ApiError(e.message, key) from None
    return tuple(params)


class SpeechBody:
    """The response body of one request: voice-rate PCM in, body bytes out as soon as
    the container has them (frames encoded, muxed, and wrapped in events for SSE); or,
    for a request with `stream` false (FLAC's, always), all of it from `finish`, its
    headers complete."""

    def __init__(self, request: SpeechRequest, source_rate: int) -> None:
        self._encoder = FrameEncoder(source_rate, request.sample_rate, FRAME_MS, request.frame_format)
        self._whole = None if request.stream else io.BytesIO()  # seekable: the muxer completes its header
        self._writer = ContainerWriter(
            request.response_format, request.sample_rate, self._encoder.frame_samples, self._whole
        )
        self._sse = request.stream_format == "sse"
        self._rate = request.sample_rate

    @property
    def audio_s(self) -> float:
        """Seconds of audio in the body so far."""
        return self._encoder.samples / self._rate

    def push(self, pcm: np.ndarray) -> bytes:
        return self._wrap(self._mux(self._encoder.push(pcm)))

    def finish(self) -> bytes:
        """The body's last bytes: the padded last frame, the container's trailer, `done`."""
        data = self._wrap(self._mux(self._encoder.finish()) + self._writer.finish())
        if self._whole is not None:
            data = self._wrap(self._whole.getvalue())
        return data + sse_done() if self._sse else data

    def _mux(self, payloads: list[bytes]) -> bytes:
        step = self._encoder.frame_samples
        first = self._encoder.samples - len(payloads) * step
        return b"".join(self._writer.push(payload, first + i * step) for i, payload in enumerate(payloads))

    def _wrap(self, data: bytes) -> bytes:
        return sse_delta(data) if self._sse and data else data


def sse_delta(audio: bytes) -> bytes:
    """One `speech.audio.delta` event: a piece of the response_format's bytes, base64."""
    return _event({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode()})


def sse_done() -> bytes:
    return _event({"type": "speech.audio.done"})


def _event(data: dict) -> bytes:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
