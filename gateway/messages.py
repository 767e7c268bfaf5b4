"""Protocol v1's messages, sans I/O: client messages parsed and checked, server messages
built. No sockets here; the contract is docs/protocol.md, its vocabulary and the binary
audio frame header speechstream/protocol.py.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from contract import models as c
from speechstream import protocol as v1


class ProtocolError(Exception):
    """A message the server refuses; sent to the client as an `error` frame."""

    def __init__(
        self, code: str, message: str, context_id: str | None = None, retry_after_ms: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.context_id = context_id
        self.retry_after_ms = retry_after_ms  # when trying again may succeed


class Speculation(enum.Enum):
    OFF = "off"
    GREEDY = "greedy"  # keep the draft where it is the argmax: the reply is the one without speculation
    TOP_K = "top_k"  # keep it where it is among the best top_k: more kept, a reply that may differ


MAX_SENTENCES = 100  # chat.max_sentences' range: 0 (no limit) to this
# A small chat model left without a system prompt wanders (the embedded one answered
# "What is the capital of France?" with a loop in French): spoken replies are asked to be short.
DEFAULT_SYSTEM = "Answer in one or two short sentences, in the language of the question."


@dataclass(frozen=True)
class ChatConfig:
    speculation: Speculation = Speculation.GREEDY
    top_k: int = 3
    system: str | None = DEFAULT_SYSTEM  # None: no system prompt
    max_tokens: int = 256
    temperature: float = 0.0
    seed: int | None = None  # sampling's, above temperature 0: the same seed, the same replies
    max_sentences: int = 0  # a spoken reply ends after this many sentences; 0: no limit

    @property
    def k(self) -> int:
        """The verification's k: 1 when greedy."""
        return self.top_k if self.speculation is Speculation.TOP_K else 1


@dataclass(frozen=True)
class ListenConfig:
    """Listen mode's settings: the microphone's audio format, and how a spoken turn ends."""

    format: str = "pcm_s16le"
    sample_rate: int = v1.LISTEN_DEFAULT_RATES["pcm_s16le"]
    endpoint_ms: int = v1.LISTEN_DEFAULT_ENDPOINT_MS  # the silence after speech that ends a turn
    barge_in: bool = True  # speech that starts while a reply is spoken cancels that reply
    turn_detection: str = v1.LISTEN_DEFAULT_TURN_DETECTION  # "smart": the turn detector may end a turn sooner
    reply: bool = True  # with chat, each utterance is answered; false: the client asks with `user` (push to talk)


@dataclass(frozen=True)
class Config:
    voice: str
    format: str = v1.DEFAULT_FORMAT
    sample_rate: int = v1.DEFAULT_SAMPLE_RATE
    frame_ms: int = v1.DEFAULT_FRAME_MS
    timestamps: bool = False
    queue: bool = False  # at capacity, wait in the admission queue rather than be refused
    # Extension of v1: Piper's voice parameters and a seed, by their lower-case tensor
    # names (length_scale, noise_scale, noise_w, seed), passed to Triton as they are.
    voice_params: tuple[tuple[str, float | int], ...] = ()
    chat: ChatConfig | None = None  # chat mode's settings, when the config carries `chat`
    listen: ListenConfig | None = None  # listen mode's settings, when the config carries `listen`
    ssml: bool = False  # every `speak` is an SSML document (gateway/conversation/ssml.py)
    first_phrase: bool = False  # a context's text is first spoken from its first phrase, not its first sentence


@dataclass(frozen=True)
class UserMessage:
    """Chat mode: the user's turn so far (the whole transcript, replacing the last), or its end."""

    turn_id: str
    text: str
    final: bool


@dataclass(frozen=True)
class EndOfSpeech:
    """Listen mode: the speaker's turn ends now (push-to-talk), without waiting for the endpoint."""


@dataclass(frozen=True)
class ContextMessage:
    """speak, text, flush, close or cancel for one context."""

    type: str
    context_id: str
    text: str = field(default="")
    # speak and text only: the voice and voice parameters of the context they open, over
    # the connection's config (None and () keep the config's)
    voice: str | None = None
    voice_params: tuple[tuple[str, float | int], ...] = ()
    ssml: bool | None = None  # speak only: its text is an SSML document (None: as the config says)


CONTEXT_TYPES = ("speak", "text", "flush", "close", "cancel")
TEXT_TYPES = ("speak", "text")


def _field(message: dict, name: str, kind: type | tuple[type, ...], default: Any = None, required: bool = False) -> Any:
    if name not in message:
        if required:
            raise ProtocolError(v1.MISSING_FIELD, f"'{message.get('type')}' needs the field '{name}'", _context(message))
        return default
    value = message[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
        expected = " or ".join(k.__name__ for k in kinds)
        raise ProtocolError(v1.INVALID_FIELD, f"'{name}' must be {expected}, got {type(value).__name__}", _context(message))
    return value


def _context(message: dict) -> str | None:
    value = message.get("context_id", message.get("turn_id"))
    return value if isinstance(value, str) else None


# OpenAI's voice names, so that clients written for it work unchanged: each speaks with
# the default voice (the first).
OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse", "marin", "cedar",
)


def resolve_voice(name: str, voices: tuple[str, ...]) -> str | None:
    """The voice `name` speaks with: itself, or the default for an OpenAI name; None if unknown."""
    if name in voices:
        return name
    return voices[0] if name in OPENAI_VOICES else None


def parse_voice(message: dict, voices: tuple[str, ...], default: str | None) -> str | None:
    """The voice a message's `voice` names (`default` without one), or UNKNOWN_VOICE."""
    asked = _field(message, "voice", str, default)
    if asked is None:
        return None
    if (voice := resolve_voice(asked, voices)) is None:
        raise ProtocolError(
            v1.UNKNOWN_VOICE, f"unknown voice '{asked}'; available: {', '.join(voices + OPENAI_VOICES)}", _context(message)
        )
    return voice


def parse_config(message: dict, voices: tuple[str, ...]) -> Config:
    voice = parse_voice(message, voices, voices[0])
    fmt = _field(message, "format", str, v1.DEFAULT_FORMAT)
    if fmt not in v1.FORMATS:
        raise ProtocolError(v1.UNSUPPORTED_FORMAT, f"unsupported format '{fmt}'; use one of {', '.join(v1.FORMATS)}")
    telephony = fmt in v1.TELEPHONY_FORMATS
    rate = _field(message, "sample_rate", int, v1.TELEPHONY_SAMPLE_RATE if telephony else v1.DEFAULT_SAMPLE_RATE)
    if rate not in v1.SAMPLE_RATES:
        raise ProtocolError(v1.INVALID_FIELD, f"sample_rate {rate} is not one of {v1.SAMPLE_RATES}")
    if telephony and rate != v1.TELEPHONY_SAMPLE_RATE:
        raise ProtocolError(v1.INVALID_FIELD, f"{fmt} is {v1.TELEPHONY_SAMPLE_RATE} Hz only, not {rate}")
    frame_ms = _field(message, "frame_ms", int, v1.DEFAULT_FRAME_MS)
    if frame_ms not in v1.FRAME_MS:
        raise ProtocolError(v1.INVALID_FIELD, f"frame_ms {frame_ms} is not one of {v1.FRAME_MS}")
    return Config(
        voice, fmt, rate, frame_ms, _field(message, "timestamps", bool, False), _field(message, "queue", bool, False),
        voice_params(message), parse_chat(message), parse_listen(message), _field(message, "ssml", bool, False),
        _field(message, "first_phrase", bool, False),
    )


def parse_listen(message: dict) -> ListenConfig | None:
    """The config's `listen`: {format, sample_rate, endpoint_ms, barge_in, turn_detection, reply}."""
    listen = _field(message, "listen", dict)
    if listen is None:
        return None
    listen = listen | {"type": "config"}
    unknown = set(listen) - {"type", "format", "sample_rate", "endpoint_ms", "barge_in", "turn_detection", "reply"}
    if unknown:
        raise ProtocolError(v1.INVALID_FIELD, f"listen has unknown fields: {', '.join(sorted(unknown))}")
    fmt = _field(listen, "format", str, ListenConfig.format)
    if fmt not in v1.LISTEN_FORMATS:
        raise ProtocolError(v1.UNSUPPORTED_FORMAT, f"listen.format '{fmt}' is not one of {', '.join(v1.LISTEN_FORMATS)}")
    rate = _field(listen, "sample_rate", int, v1.LISTEN_DEFAULT_RATES[fmt])
    if rate not in v1.LISTEN_SAMPLE_RATES or (fmt == "opus" and rate != v1.LISTEN_DEFAULT_RATES["opus"]):
        rates = (v1.LISTEN_DEFAULT_RATES["opus"],) if fmt == "opus" else v1.LISTEN_SAMPLE_RATES
        raise ProtocolError(v1.INVALID_FIELD, f"listen.sample_rate {rate} is not one of {rates} for {fmt}")
    (endpoint,) = c.ASR_PARAMS
    endpoint_ms = _field(listen, "endpoint_ms", int, ListenConfig.endpoint_ms)
    if not endpoint.minimum <= endpoint_ms <= endpoint.maximum:
        raise ProtocolError(v1.INVALID_FIELD, f"listen.endpoint_ms {endpoint_ms} is out of range "
                                              f"[{endpoint.minimum}, {endpoint.maximum}]")
    detection = _field(listen, "turn_detection", str, ListenConfig.turn_detection)
    if detection not in v1.LISTEN_TURN_DETECTIONS:
        raise ProtocolError(v1.INVALID_FIELD, f"listen.turn_detection '{detection}' is not one of "
                                              f"{', '.join(v1.LISTEN_TURN_DETECTIONS)}")
    return ListenConfig(fmt, rate, endpoint_ms, _field(listen, "barge_in", bool, ListenConfig.barge_in), detection,
                        _field(listen, "reply", bool, ListenConfig.reply))


def parse_chat(message: dict) -> ChatConfig | None:
    """The config's `chat`: {speculation, top_k, system, max_tokens, temperature, seed, max_sentences}."""
    chat = _field(message, "chat", dict)
    if chat is None:
        return None
    chat = chat | {"type": "config"}
    unknown = set(chat) - {"type", "speculation", "top_k", "system", "max_tokens", "temperature", "seed",
                           "max_sentences"}
    if unknown:
        raise ProtocolError(v1.INVALID_FIELD, f"chat has unknown fields: {', '.join(sorted(unknown))}")
    modes = [s.value for s in Speculation]
    speculation = _field(chat, "speculation", str, Speculation.GREEDY.value)
    if speculation not in modes:
        raise ProtocolError(v1.INVALID_FIELD, f"chat.speculation '{speculation}' is not one of {', '.join(modes)}")
    values = {}
    for param in c.THINKER_PARAMS:
        key = param.name.lower()
        value = _field(chat, key, int if param.is_integer else (int, float), getattr(ChatConfig, key))
        if value is not None and not param.minimum <= value <= param.maximum:
            raise ProtocolError(v1.INVALID_FIELD, f"chat.{key} {value} is out of range [{param.minimum}, {param.maximum}]")
        values[key] = value
    system = _field(chat, "system", str, DEFAULT_SYSTEM)
    if len(system) > c.MAX_MESSAGES_CHARS // 4:
        raise ProtocolError(v1.INVALID_FIELD, f"chat.system has {len(system)} characters; the limit is {c.MAX_MESSAGES_CHARS // 4}")
    max_sentences = _field(chat, "max_sentences", int, ChatConfig.max_sentences)
    if not 0 <= max_sentences <= MAX_SENTENCES:
        raise ProtocolError(v1.INVALID_FIELD, f"chat.max_sentences {max_sentences} is out of range [0, {MAX_SENTENCES}]")
    return ChatConfig(Speculation(speculation), system=system or None, max_sentences=max_sentences,
                      **values)  # system "": no system prompt


def parse_user(message: dict, max_text_chars: int) -> UserMessage:
    turn_id = _field(message, "turn_id", str, required=True)
    if not turn_id or len(turn_id) > v1.MAX_CONTEXT_ID:
        raise ProtocolError(v1.INVALID_FIELD, f"turn_id must be 1 to {v1.MAX_CONTEXT_ID} characters")
    text = _field(message, "text", str, required=True)
    if not is_unicode(text):
        raise ProtocolError(v1.INVALID_FIELD, "text holds a lone surrogate (\\ud800-\\udfff escape)", turn_id)
    if len(text) > max_text_chars:
        raise ProtocolError(v1.TEXT_TOO_LONG, f"text has {len(text)} characters; the limit is {max_text_chars}", turn_id)
    return UserMessage(turn_id, text, _field(message, "final", bool, False))


def voice_params(message: dict) -> tuple[tuple[str, float | int], ...]:
    """The contract's CLIENT_PARAMS (Piper's voice parameters, the seed, the AR family's
    temperature and guidance scale), by their lower-case tensor names, checked against
    their ranges; (tensor name, value) pairs of those present."""
    values = []
    for param in c.CLIENT_PARAMS:
        key = param.name.lower()
        value = _field(message, key, int if param.is_integer else (int, float))
        if value is None:
            continue
        if not param.minimum <= value <= param.maximum:
            raise ProtocolError(
                v1.INVALID_FIELD, f"{key} {value} is out of range [{param.minimum}, {param.maximum}]", _context(message)
            )
        values.append((param.name, value))
    return tuple(values)


def parse_context_message(message: dict, max_text_chars: int, voices: tuple[str, ...]) -> ContextMessage:
    kind = message["type"]
    context_id = _field(message, "context_id", str, required=True)
    if not context_id or len(context_id) > v1.MAX_CONTEXT_ID:
        raise ProtocolError(v1.INVALID_FIELD, f"context_id must be 1 to {v1.MAX_CONTEXT_ID} characters")
    text = ""
    if kind in TEXT_TYPES:
        text = _field(message, "text", str, required=True)
        if not is_unicode(text):
            raise ProtocolError(v1.INVALID_FIELD, "text holds a lone surrogate (\\ud800-\\udfff escape)", context_id)
        if len(text) > max_text_chars:
            raise ProtocolError(v1.TEXT_TOO_LONG, f"text has {len(text)} characters; the limit is {max_text_chars}", context_id)
        ssml = _field(message, "ssml", bool)
        if ssml is not None and kind != "speak":
            raise ProtocolError(v1.INVALID_FIELD, "'ssml' is for speak: an SSML document comes whole", context_id)
        return ContextMessage(kind, context_id, text, parse_voice(message, voices, None), voice_params(message), ssml)
    return ContextMessage(kind, context_id, text)


def is_unicode(text: str) -> bool:
    """False for strings with lone surrogates, which JSON escapes can make but UTF-8 cannot carry."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_message(
    frame: str | bytes, voices: tuple[str, ...], max_text_chars: int
) -> Config | ContextMessage | UserMessage | EndOfSpeech:
    """Parse one client frame, or raise ProtocolError with a stable code."""
    if isinstance(frame, bytes):
        raise ProtocolError(v1.BINARY_NOT_ACCEPTED, "binary messages are microphone audio, taken in listen mode only "
                            "(a config with `listen`); send JSON text frames")
    try:
        message = json.loads(frame)
    except ValueError as e:
        raise ProtocolError(v1.INVALID_JSON, f"not valid JSON: {e}") from None
    except RecursionError:
        raise ProtocolError(v1.INVALID_JSON, "JSON nested too deeply") from None
    if not isinstance(message, dict):
        raise ProtocolError(v1.INVALID_MESSAGE, "a message must be a JSON object")
    kind = message.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(v1.MISSING_FIELD if kind is None else v1.INVALID_FIELD, "a message needs a string 'type'")
    if kind == "config":
        return parse_config(message, voices)
    if kind in CONTEXT_TYPES:
        return parse_context_message(message, max_text_chars, voices)
    if kind == "user":
        return parse_user(message, max_text_chars)
    if kind == "end_of_speech":
        return EndOfSpeech()
    raise ProtocolError(v1.UNKNOWN_TYPE, f"unknown message type '{kind}'", _context(message))


def encode(kind: str, **fields: Any) -> str:
    """A server message as a JSON text frame."""
    return json.dumps({"type": kind, **{k: v for k, v in fields.items() if v is not None}}, separators=(",", ":"))


def error(code: str, message: str, context_id: str | None = None, retry_after_ms: int | None = None) -> str:
    return encode("error", context_id=context_id, code=code, message=message, retry_after_ms=retry_after_ms)
