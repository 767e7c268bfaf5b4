"""OpenAI's `POST /v1/audio/speech`, sans I/O: the request body parsed and checked, errors
in OpenAI's shape, and the server-sent events of `stream_format: "sse"`.

The HTTP shell that will serve it is not built yet; this is its contract, tested alone.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from python_backends.contract import LENGTH_SCALE, VOICE_PARAMS

from .containers import CONTENT_TYPES, FRAME_FORMATS

# OpenAI's voice names, so that clients written for it work unchanged: each speaks with
# the default voice (only one is embedded).
OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse", "marin", "cedar",
)
STREAM_FORMATS = ("audio", "sse")
DEFAULT_FORMAT = "wav"  # OpenAI's default is mp3, which this server does not make
RATES = {"pcm": 24000, "wav": 24000, "flac": 24000, "opus": 48000}  # OpenAI's pcm is 24 kHz
_SPEED = next(p for p in VOICE_PARAMS if p.name == LENGTH_SCALE)  # speed = 1 / length_scale


class ApiError(Exception):
    """A refused request, answered as OpenAI answers: status and an `error` object."""

    def __init__(self, message: str, param: str | None = None, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.message, self.param, self.status = message, param, status

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": "invalid_request_error", "param": self.param, "code": None}}


@dataclass(frozen=True)
class SpeechRequest:
    text: str
    voice: str
    response_format: str
    speed: float
    stream_format: str

    @property
    def length_scale(self) -> float:
        return 1 / self.speed

    @property
    def frame_format(self) -> str:
        """The gateway frame format (`opus` or `pcm_s16le`) the container is fed with."""
        return FRAME_FORMATS[self.response_format]

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


def parse_speech_request(raw: bytes, voices: tuple[str, ...], max_chars: int) -> SpeechRequest:
    """The request in `raw` (a JSON body), or ApiError saying which field is wrong."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError("the body must be JSON") from None
    if not isinstance(body, dict):
        raise ApiError("the body must be a JSON object")
    _string(body, "model")  # any model name: one model serves them all
    text = _string(body, "input")
    if not text.strip():
        raise ApiError("'input' is empty", "input")
    if len(text) > max_chars:
        raise ApiError(f"'input' has {len(text)} characters; the limit is {max_chars}", "input")
    voice = _string(body, "voice")
    if voice not in voices and voice not in OPENAI_VOICES:
        raise ApiError(f"unknown voice '{voice}'; use one of {', '.join(voices + OPENAI_VOICES)}", "voice")
    fmt = _string(body, "response_format", DEFAULT_FORMAT)
    if fmt not in RATES:
        raise ApiError(f"response_format '{fmt}' is not supported; use one of {', '.join(RATES)}", "response_format")
    stream_format = _string(body, "stream_format", "audio")
    if stream_format not in STREAM_FORMATS:
        raise ApiError(f"stream_format must be one of {', '.join(STREAM_FORMATS)}", "stream_format")
    speed = body.get("speed", 1.0)
    low, high = 1 / _SPEED.maximum, 1 / _SPEED.minimum
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not low <= speed <= high:
        raise ApiError(f"'speed' must be a number from {low:g} to {high:g}", "speed")
    return SpeechRequest(text, voices[0] if voice in OPENAI_VOICES else voice, fmt, float(speed), stream_format)


def sse_delta(audio: bytes) -> bytes:
    """One `speech.audio.delta` event: a piece of the response_format's bytes, base64."""
    return _event({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode()})


def sse_done() -> bytes:
    return _event({"type": "speech.audio.done"})


def _event(data: dict) -> bytes:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
