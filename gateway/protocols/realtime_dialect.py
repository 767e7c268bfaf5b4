"""The Realtime API's vocabulary, sans I/O: its client events parsed and checked, its
session read and written in the GA shape or the beta's (flat, `pcm16`, older event
names), its audio formats, and what its settings mean for protocol v1's config.
gateway/protocols/realtime.py holds the session's rules."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import av
import numpy as np

from contract import models as c
from gateway.messages import DEFAULT_SYSTEM
from speechstream import protocol as v1

# OpenAI's voices: a client that names one gets the server's default voice.
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar")
SERVER_VAD = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500,
              "idle_timeout_ms": None, "create_response": True, "interrupt_response": True}
# semantic_vad's eagerness → how long an unfinished turn may pause (the smart detector's patience).
EAGERNESS_MS = {"low": 4000, "medium": 2000, "auto": 2000, "high": 1000}
(THINKER_MAX_TOKENS,) = [p for p in c.THINKER_PARAMS if p.name == c.MAX_TOKENS]
(ENDPOINT,) = c.ASR_PARAMS


class RealtimeError(Exception):
    """An event the server refuses: an `error` event {type, code, message, param}."""

    def __init__(self, message: str, code: str = "invalid_value", param: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.code, self.param, self.kind = code, param, kind


def error_kind(v1_code: str) -> str:
    """The Realtime error type of a protocol-v1 error code."""
    server = (v1.INTERNAL_ERROR, v1.BACKEND_UNAVAILABLE, v1.SYNTHESIS_FAILED, v1.RECOGNITION_FAILED, v1.SERVER_BUSY,
              v1.SERVER_DRAINING, v1.CHAT_UNAVAILABLE, v1.LISTEN_UNAVAILABLE)
    return "server_error" if v1_code in server else "invalid_request_error"


@dataclass(frozen=True)
class AudioFormat:
    """One of the API's audio formats: 24 kHz PCM, or G.711 at 8 kHz."""

    type: str = "audio/pcm"

    @property
    def rate(self) -> int:
        return 24000 if self.type == "audio/pcm" else v1.TELEPHONY_SAMPLE_RATE

    @property
    def v1_format(self) -> str:
        return {"audio/pcm": "pcm_s16le", "audio/pcmu": "mulaw", "audio/pcma": "alaw"}[self.type]

    @property
    def beta_name(self) -> str:
        return {"audio/pcm": "pcm16", "audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw"}[self.type]

    def ms(self, size: int) -> float:
        """The ms of audio in `size` bytes of this format."""
        return size / v1.BYTES_PER_SAMPLE[self.v1_format] * 1000 / self.rate

    def to_pcm(self, data: bytes) -> bytes:
        """Audio of this format as PCM s16le at its rate (what the recognizer is sent)."""
        if self.type == "audio/pcm":
            if len(data) % 2:
                raise RealtimeError("audio/pcm is 16-bit samples: an even number of bytes", param="audio")
            return data
        codec = av.CodecContext.create("pcm_mulaw" if self.type == "audio/pcmu" else "pcm_alaw", "r")
        codec.sample_rate, codec.layout = self.rate, "mono"
        frames = codec.decode(av.Packet(data)) if data else []
        return b"".join(np.ascontiguousarray(f.to_ndarray().reshape(-1), np.int16).tobytes() for f in frames)

    def ga(self) -> dict:
        return {"type": self.type, "rate": self.rate} if self.type == "audio/pcm" else {"type": self.type}


BETA_FORMATS = {f.beta_name: f for f in map(AudioFormat, ("audio/pcm", "audio/pcmu", "audio/pcma"))}


@dataclass(frozen=True)
class Settings:
    """A Realtime session's settings, in the server's terms."""

    voice: str
    transcription_only: bool = False  # a `transcription` session: transcripts, no responses
    instructions: str | None = None  # None: the server's default system prompt
    max_output_tokens: int | str = "inf"
    input: AudioFormat = AudioFormat()
    output: AudioFormat = AudioFormat()
    turn_detection: Mapping[str, Any] | None = field(default_factory=lambda: dict(SERVER_VAD))
    transcription: Mapping[str, Any] | None = None  # input_audio_transcription: its events are sent
    speed: float = 1.0

    @property
    def max_tokens(self) -> int:
        return THINKER_MAX_TOKENS.default if self.max_output_tokens == "inf" else int(self.max_output_tokens)

    @property
    def create_response(self) -> bool:
        """Whether a turn the server detects is answered at once (else at `response.create`)."""
        return bool(self.turn_detection) and bool(self.turn_detection.get("create_response", True))

    def system(self) -> str:
        """v1's chat.system: "" for none; the server's default unless instructions were given."""
        return DEFAULT_SYSTEM if self.instructions is None else self.instructions

    def fixed(self) -> tuple:
        """What the inner v1 session fixes at its config."""
        return self.transcription_only, self.input, self.output, dict(self.turn_detection or {}), self.speed

    def v1_config(self) -> dict:
        """Protocol v1's config for these settings: listen mode, with chat unless transcribing."""
        detection = dict(self.turn_detection or {})
        listen = {"format": "pcm_s16le", "sample_rate": self.input.rate,
                  "barge_in": bool(detection.get("interrupt_response", True)),
                  "reply": self.create_response}
        if detection.get("type") == "semantic_vad":
            listen |= {"turn_detection": "smart", "endpoint_ms": EAGERNESS_MS[detection.get("eagerness", "auto")]}
        else:  # server_vad, or none (the client commits; the longest silence ends a turn regardless)
            listen["endpoint_ms"] = detection.get("silence_duration_ms", 500) if detection else ENDPOINT.maximum
        config = {"type": "config", "voice": self.voice, "format": self.output.v1_format,
                  "sample_rate": self.output.rate, "timestamps": True, "listen": listen}
        if self.speed != 1.0:
            config["length_scale"] = 1 / self.speed
        if not self.transcription_only:
            config["chat"] = {"system": self.system(), "max_tokens": self.max_tokens}
        return config


def parse_event(frame: str | bytes) -> dict:
    """A client event, checked to be a JSON object with a `type`."""
    if isinstance(frame, bytes):
        raise RealtimeError("the Realtime API's events are JSON text frames; audio goes in input_audio_buffer.append",
                            code="invalid_event")
    try:
        event = json.loads(frame)
    except (ValueError, RecursionError) as e:
        raise RealtimeError(f"the event is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise RealtimeError("an event is a JSON object with a `type`", code="missing_required_parameter", param="type")
    return event


def read_item(item: Any) -> dict:
    """A `conversation.item.create`'s item: a user message of text (what this server's chat model takes)."""
    if not isinstance(item, dict):
        raise RealtimeError("conversation.item.create needs an `item` object", code="missing_required_parameter",
                            param="item")
    kind = item.get("type", "message")
    if kind in ("function_call", "function_call_output"):
        raise RealtimeError("function calls are not supported: this server's chat model takes no tools",
                            param="item.type")
    if kind != "message":
        raise RealtimeError(f"item.type {kind!r} is not supported; create `message` items", param="item.type")
    if item.get("role") != "user":
        raise RealtimeError("only user messages can be created here (the server's chat model keeps its own "
                            "instructions and replies)", param="item.role")
    content = item.get("content")
    if not isinstance(content, list) or not content:
        raise RealtimeError("item.content must be a non-empty list", param="item.content")
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "input_text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else None
            why = ("audio items are not supported: append the audio to input_audio_buffer" if kind == "input_audio"
                   else "images are not supported: the chat model reads text" if kind == "input_image"
                   else "each content part must be {type: input_text, text}")
            raise RealtimeError(why, param="item.content")
        texts.append(part["text"])
    if not "".join(texts).strip():
        raise RealtimeError("the item's text is empty", param="item.content")
    out = {"type": "message", "role": "user", "status": "completed",
           "content": [{"type": "input_text", "text": "\n".join(texts)}]}
    if isinstance(item.get("id"), str) and item["id"]:
        out["id"] = item["id"]
    return out


def read_response_options(options: Any) -> dict | None:
    """A `response.create`'s `response`, checked: what this server can honour, or an error
    naming the field; its `metadata`, which the response echoes."""
    if options is None:
        return None
    if not isinstance(options, dict):
        raise RealtimeError("`response` must be an object", param="response")
    if options.get("conversation", "auto") != "auto":
        raise RealtimeError("out-of-band responses are not supported: responses join the conversation",
                            param="response.conversation")
    if options.get("tools"):
        raise RealtimeError("tools are not supported: this server's chat model takes none", param="response.tools")
    if options.get("input") is not None:
        raise RealtimeError("a response's own input is not supported: create items first", param="response.input")
    if options.get("instructions") is not None:
        raise RealtimeError("per-response instructions are not supported: set them with session.update",
                            param="response.instructions")
    for key in ("output_modalities", "modalities"):
        if key in options and "audio" not in (options[key] or []):
            raise RealtimeError("responses are spoken on this server: text-only output is not supported",
                                param=f"response.{key}")
    metadata = options.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise RealtimeError("metadata is an object of strings", param="response.metadata")
    return metadata


# The beta's names of the GA server events it named otherwise.
BETA_NAMES = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "conversation.item.added": "conversation.item.created",
}


@dataclass(frozen=True)
class Dialect:
    """GA, or the beta (header `OpenAI-Beta: realtime=v1`): event names and the session's shape."""

    beta: bool

    def name(self, event: str) -> str:
        """A server event's name in this dialect (`event`: its GA name)."""
        return BETA_NAMES.get(event, event) if self.beta else event

    @property
    def audio_content(self) -> str:
        """The type of an assistant item's audio content (a response's content part is "audio" in both)."""
        return "audio" if self.beta else "output_audio"

    def session(self, s: Settings, session_id: str, model: str) -> dict:
        common = {"id": session_id, "object": "realtime.session", "model": model, "instructions": s.instructions or "",
                  "tools": [], "tool_choice": "auto"}
        if self.beta:
            return common | {
                "modalities": ["audio", "text"], "voice": s.voice, "input_audio_format": s.input.beta_name,
                "output_audio_format": s.output.beta_name, "input_audio_transcription": s.transcription,
                "turn_detection": s.turn_detection, "speed": s.speed, "max_response_output_tokens": s.max_output_tokens}
        return common | {
            "type": "transcription" if s.transcription_only else "realtime", "output_modalities": ["audio"],
            "max_output_tokens": s.max_output_tokens,
            "audio": {"input": {"format": s.input.ga(), "transcription": s.transcription, "noise_reduction": None,
                                "turn_detection": s.turn_detection},
                      "output": {"format": s.output.ga(), "voice": s.voice, "speed": s.speed}}}

    def response_shape(self, s: Settings) -> dict:
        if self.beta:
            return {"modalities": ["audio", "text"], "voice": s.voice, "output_audio_format": s.output.beta_name,
                    "max_output_tokens": s.max_output_tokens}
        return {"output_modalities": ["audio"], "max_output_tokens": s.max_output_tokens,
                "audio": {"output": {"format": s.output.ga(), "voice": s.voice}}}

    def read_session(self, raw: Any, s: Settings, voices: Mapping[str, Any]) -> Settings:
        """`s` updated by a session.update's `session` (either shape: a beta client may
        send the GA shape, and the reverse)."""
        if not isinstance(raw, dict):
            raise RealtimeError("session.update needs a `session` object", code="missing_required_parameter",
                                param="session")
        raw = dict(raw)
        raw.pop("model", None)  # the server's chat model answers, whatever the client names
        for ignored in ("tracing", "prompt", "include", "truncation", "temperature", "reasoning", "id", "object",
                        "client_secret", "expires_at"):
            raw.pop(ignored, None)  # accepted and ignored (docs/realtime.md)
        updates: dict[str, Any] = {}
        if "type" in raw:
            kind = raw.pop("type")
            if kind not in ("realtime", "transcription"):
                raise RealtimeError(f"session.type {kind!r} is not realtime or transcription", param="session.type")
            updates["transcription_only"] = kind == "transcription"
        if "instructions" in raw:
            instructions = raw.pop("instructions")
            if not isinstance(instructions, str) or len(instructions) > c.MAX_MESSAGES_CHARS // 4:
                raise RealtimeError(f"instructions must be text of at most {c.MAX_MESSAGES_CHARS // 4} characters",
                                    param="session.instructions")
            updates["instructions"] = instructions
        for key in ("max_output_tokens", "max_response_output_tokens"):
            if key in raw:
                updates["max_output_tokens"] = read_max_tokens(raw.pop(key), f"session.{key}")
        for key in ("output_modalities", "modalities"):
            if key in raw and "audio" not in (raw.pop(key) or []):
                raise RealtimeError("this server speaks its replies: text-only output is not supported",
                                    param=f"session.{key}")
        tools = raw.pop("tools", None)
        if tools:
            raise RealtimeError("tools are not supported: this server's chat model takes none", param="session.tools")
        if raw.pop("tool_choice", "auto") not in ("auto", "none"):
            raise RealtimeError("tool_choice other than auto or none needs tools, which are not supported",
                                param="session.tool_choice")
        audio = raw.pop("audio", None)
        if audio is not None:
            updates |= read_audio(audio, voices)
        updates |= read_flat(raw, voices)  # the beta's fields, where a client sends them
        if raw:
            raise RealtimeError(f"unknown session fields: {', '.join(sorted(raw))}", code="unknown_parameter",
                                param=f"session.{sorted(raw)[0]}")
        return dataclasses.replace(s, **updates)


def read_max_tokens(value: Any, param: str) -> int | str:
    if value == "inf":
        return value
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= THINKER_MAX_TOKENS.maximum:
        raise RealtimeError(f"max output tokens must be 1 to {THINKER_MAX_TOKENS.maximum} or \"inf\"", param=param)
    return value


def read_voice(value: Any, voices: Mapping[str, Any], param: str) -> str:
    if value in OPENAI_VOICES:
        return next(iter(voices))  # the server's default voice
    if value not in voices:
        raise RealtimeError(f"voice {value!r} is not one of this server's ({', '.join(voices)}) or OpenAI's names",
                            param=param)
    return value


def read_format(value: Any, param: str) -> AudioFormat:
    if isinstance(value, str) and value in BETA_FORMATS:
        return BETA_FORMATS[value]
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in ("audio/pcm", "audio/pcmu", "audio/pcma"):
        raise RealtimeError("the audio format must be audio/pcm (24 kHz), audio/pcmu or audio/pcma", param=param)
    if kind == "audio/pcm" and value.get("rate", 24000) != 24000:
        raise RealtimeError("audio/pcm is 24000 Hz", param=f"{param}.rate")
    return AudioFormat(kind)


def read_turn_detection(value: Any, param: str) -> dict | None:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in ("server_vad", "semantic_vad"):
        raise RealtimeError("turn_detection is server_vad, semantic_vad or null", param=f"{param}.type")
    if value["type"] == "semantic_vad":
        eagerness = value.get("eagerness", "auto")
        if eagerness not in EAGERNESS_MS:
            raise RealtimeError(f"eagerness is one of {', '.join(EAGERNESS_MS)}", param=f"{param}.eagerness")
        return {"type": "semantic_vad", "eagerness": eagerness,
                "create_response": bool(value.get("create_response", True)),
                "interrupt_response": bool(value.get("interrupt_response", True))}
    detection = SERVER_VAD | {k: v for k, v in value.items() if k in SERVER_VAD}
    silence = detection["silence_duration_ms"]
    if not isinstance(silence, int) or not ENDPOINT.minimum <= silence <= ENDPOINT.maximum:
        raise RealtimeError(f"silence_duration_ms must be {ENDPOINT.minimum} to {ENDPOINT.maximum}",
                            param=f"{param}.silence_duration_ms")
    return detection


def read_transcription(value: Any, param: str) -> dict | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RealtimeError("transcription is an object or null", param=param)
    if value.get("language") not in (None, "", "en"):
        raise RealtimeError("the recognizer is English only (Whisper tiny.en)", param=f"{param}.language")
    return {"model": value.get("model") or "whisper-tiny.en", "language": "en", "prompt": value.get("prompt") or ""}


def read_speed(value: Any, param: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.25 <= value <= 1.5:
        raise RealtimeError("speed must be 0.25 to 1.5", param=param)
    return float(value)


def read_audio(audio: Any, voices: Mapping[str, Any]) -> dict:
    """The GA session's `audio` {input, output}."""
    if not isinstance(audio, dict):
        raise RealtimeError("session.audio must be an object", param="session.audio")
    updates: dict[str, Any] = {}
    given_in, given_out = audio.get("input") or {}, audio.get("output") or {}
    if "format" in given_in:
        updates["input"] = read_format(given_in["format"], "session.audio.input.format")
    if "turn_detection" in given_in:
        updates["turn_detection"] = read_turn_detection(given_in["turn_detection"], "session.audio.input.turn_detection")
    if "transcription" in given_in:
        updates["transcription"] = read_transcription(given_in["transcription"], "session.audio.input.transcription")
    if "format" in given_out:
        updates["output"] = read_format(given_out["format"], "session.audio.output.format")
    if "voice" in given_out:
        updates["voice"] = read_voice(given_out["voice"], voices, "session.audio.output.voice")
    if "speed" in given_out:
        updates["speed"] = read_speed(given_out["speed"], "session.audio.output.speed")
    return updates  # noise_reduction: accepted and ignored (the recognizer's VAD takes the audio as it comes)


def read_flat(raw: dict, voices: Mapping[str, Any]) -> dict:
    """The beta's flat session fields (taken out of `raw`)."""
    readers = {
        "voice": ("voice", lambda v: read_voice(v, voices, "session.voice")),
        "input_audio_format": ("input", lambda v: read_format(v, "session.input_audio_format")),
        "output_audio_format": ("output", lambda v: read_format(v, "session.output_audio_format")),
        "turn_detection": ("turn_detection", lambda v: read_turn_detection(v, "session.turn_detection")),
        "input_audio_transcription": ("transcription",
                                      lambda v: read_transcription(v, "session.input_audio_transcription")),
        "speed": ("speed", lambda v: read_speed(v, "session.speed")),
    }
    updates = {}
    for key, (name, read) in readers.items():
        if key in raw:
            updates[name] = read(raw.pop(key))
    raw.pop("input_audio_noise_reduction", None)  # accepted and ignored
    return updates
