"""OpenAI's `POST /v1/audio/transcriptions`, sans I/O: the form's fields parsed and
checked, a file's recognizer events gathered into segments, and the response body in
each `response_format`. The HTTP shell (the upload read, decoded, and sent through the
recognizer) is transcription_api.py."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from contract import models as c
from gateway.protocols.speech_api import ApiError

# OpenAI's transcription model names and ours, listed by GET /v1/models; any name is
# accepted, as for speech: one recognizer serves them all.
TRANSCRIPTION_MODELS = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe", "speechstream-asr")
CONTENT_TYPES = {
    "json": "application/json", "verbose_json": "application/json", "text": "text/plain; charset=utf-8",
    "srt": "text/plain; charset=utf-8", "vtt": "text/vtt; charset=utf-8",
}
LANGUAGES = {"en": "english"}  # ISO-639-1 → the name verbose_json gives; the recognizer is English only
GRANULARITIES = ("segment",)  # no word timings: the recognizer gives an utterance's start and end only


@dataclass(frozen=True)
class TranscriptionRequest:
    audio: bytes  # the file as uploaded
    model: str
    response_format: str = "json"
    language: str = "en"

    @property
    def content_type(self) -> str:
        return CONTENT_TYPES[self.response_format]


def parse_transcription_form(fields: Sequence[tuple[str, str]], audio: bytes | None) -> TranscriptionRequest:
    """The request in a form's text fields (name, value), in order, and its `file`; or
    ApiError saying which field is wrong. Fields it does not name (`prompt`,
    `temperature`: they steer Whisper's decoding, which the recognizer does on its own
    terms) are accepted and change nothing."""
    if audio is None:
        raise ApiError("'file' is required: the audio, as a multipart/form-data file field", "file")
    if not audio:
        raise ApiError("'file' is empty", "file")
    values = dict(fields)
    if not (model := values.get("model", "")):
        raise ApiError("'model' is required", "model")
    fmt = values.get("response_format", "json")
    if fmt not in CONTENT_TYPES:
        raise ApiError(f"response_format '{fmt}' is not supported; use one of {', '.join(CONTENT_TYPES)}",
                       "response_format")
    language = values.get("language", "en")
    if language not in LANGUAGES:
        raise ApiError(f"language '{language}' is not supported: this server transcribes English only ('en')",
                       "language")
    for name, value in fields:
        if name in ("timestamp_granularities[]", "timestamp_granularities") and value not in GRANULARITIES:
            raise ApiError(f"timestamp granularity '{value}' is not served; only 'segment' is",
                           "timestamp_granularities")
    if values.get("stream", "false").lower() != "false":
        raise ApiError("streamed transcription is not served: leave 'stream' out (protocol v1's listen mode "
                       "streams transcripts)", "stream")
    return TranscriptionRequest(audio, model, fmt, language)


@dataclass(frozen=True)
class Segment:
    """One utterance of the file: where its speech started and stopped, and its words."""

    start_s: float
    end_s: float
    text: str


@dataclass
class _Utterance:
    start_ms: int
    stop_ms: int | None = None
    text: str | None = None  # its final's, once it came
    final_ms: int = 0


class Transcript:
    """A file's recognizer events (finals only, and speech start and stop), gathered
    into segments in the order the utterances began."""

    def __init__(self) -> None:
        self._utterances: dict[object, _Utterance] = {}

    def heard(self, kind: str, utterance: object, audio_ms: int, text: str) -> None:
        """One recognizer event (contract.models.ASR_EVENTS) of `utterance`."""
        u = self._utterances.setdefault(utterance, _Utterance(audio_ms))
        if kind == c.SPEECH_STARTED:
            u.start_ms = audio_ms
        elif kind == c.SPEECH_STOPPED:
            u.stop_ms = audio_ms
        elif kind == c.FINAL:
            u.text, u.final_ms = text.strip(), audio_ms

    def segments(self, duration_s: float) -> list[Segment]:
        """The utterances with words (a final of noise is empty), within the audio's
        `duration_s`; one ended by the file's end without a speech_stopped ends where
        its final heard to."""
        segments = []
        for u in self._utterances.values():
            if u.text:
                end_ms = u.final_ms if u.stop_ms is None else u.stop_ms
                start_s = min(max(u.start_ms / 1000, 0.0), duration_s)
                segments.append(Segment(start_s, min(max(end_ms / 1000, start_s), duration_s), u.text))
        return sorted(segments, key=lambda s: s.start_s)


def transcription_body(request: TranscriptionRequest, segments: Sequence[Segment], duration_s: float) -> bytes:
    """The response body in the request's `response_format`."""
    text = " ".join(s.text for s in segments)
    usage = {"type": "duration", "seconds": math.ceil(duration_s)}
    if request.response_format == "json":
        return json.dumps({"text": text, "usage": usage}).encode()
    if request.response_format == "verbose_json":
        return json.dumps({
            "task": "transcribe", "language": LANGUAGES[request.language], "duration": round(duration_s, 3),
            "text": text, "segments": [_verbose_segment(i, s) for i, s in enumerate(segments)], "usage": usage,
        }).encode()
    if request.response_format == "srt":
        return "".join(f"{i}\n{_time(s.start_s, ',')} --> {_time(s.end_s, ',')}\n{s.text}\n\n"
                       for i, s in enumerate(segments, 1)).encode()
    if request.response_format == "vtt":
        cues = "".join(f"{_time(s.start_s, '.')} --> {_time(s.end_s, '.')}\n{s.text}\n\n" for s in segments)
        return f"WEBVTT\n\n{cues}".encode()
    return f"{text}\n".encode()


def _verbose_segment(i: int, s: Segment) -> dict:
    """A segment as Whisper's verbose_json gives it. Its decoding statistics (tokens,
    temperature, log probability, compression ratio, no-speech probability) are not the
    recognizer's to give: they are there, neutral, for clients that read them."""
    return {
        "id": i, "seek": round(s.start_s * 100), "start": round(s.start_s, 3), "end": round(s.end_s, 3),
        "text": s.text, "tokens": [], "temperature": 0.0, "avg_logprob": 0.0, "compression_ratio": 1.0,
        "no_speech_prob": 0.0,
    }


def _time(seconds: float, decimal: str) -> str:
    """HH:MM:SS,mmm (SRT) or HH:MM:SS.mmm (WebVTT)."""
    ms = round(seconds * 1000)
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}{decimal}{ms % 1000:03d}"
