"""Client protocol v1, the contract between the gateway and its clients: the WebSocket's path,
what a client may ask for, the stable error codes and the binary audio frame. Pure.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# What a client may ask for.
PROTOCOL_PATH = "/v1/stream"
FORMATS = ("opus", "pcm_s16le", "mulaw", "alaw")
SAMPLE_RATES = (48000, 24000, 16000, 8000)
# G.711, what telephony media streams carry: 8 kHz only, a byte per sample.
TELEPHONY_FORMATS, TELEPHONY_SAMPLE_RATE = ("mulaw", "alaw"), 8000
# Bytes per sample of the formats whose frames are raw samples (an Opus packet's vary).
BYTES_PER_SAMPLE = {"pcm_s16le": 2, "mulaw": 1, "alaw": 1}
FRAME_MS = (10, 20, 40, 60)  # Opus packet durations a client may ask for
DEFAULT_FORMAT, DEFAULT_SAMPLE_RATE, DEFAULT_FRAME_MS = "opus", 48000, 20
MAX_CONTEXT_ID = 64

# Stable error codes of protocol v1 (and of the HTTP API's metrics): clients branch on
# these, so they never change meaning.
INVALID_JSON = "invalid_json"
INVALID_MESSAGE = "invalid_message"
UNKNOWN_TYPE = "unknown_type"
MISSING_FIELD = "missing_field"
INVALID_FIELD = "invalid_field"
UNKNOWN_VOICE = "unknown_voice"
UNSUPPORTED_FORMAT = "unsupported_format"
BINARY_NOT_ACCEPTED = "binary_not_accepted"
CONFIG_TOO_LATE = "config_too_late"
UNKNOWN_CONTEXT = "unknown_context"
CONTEXT_EXISTS = "context_exists"
CONTEXT_CLOSED = "context_closed"
TEXT_TOO_LONG = "text_too_long"
TOO_MANY_CONTEXTS = "too_many_contexts"
TOO_MANY_STREAMS = "too_many_streams"  # the client address's streams, all connections and HTTP
SERVER_BUSY = "server_busy"  # the streams open fill the capacity Triton measures
SERVER_DRAINING = "server_draining"  # this gateway is stopping: open a new connection (to another)
MESSAGE_TOO_LARGE = "message_too_large"
IDLE_TIMEOUT = "idle_timeout"
BACKEND_UNAVAILABLE = "backend_unavailable"
SYNTHESIS_FAILED = "synthesis_failed"
INTERNAL_ERROR = "internal_error"
CHAT_UNAVAILABLE = "chat_unavailable"  # a `user` message to a server that runs no chat model
LISTEN_UNAVAILABLE = "listen_unavailable"  # `listen` asked of a server that runs no recognizer
AUDIO_NOT_ACCEPTED = "audio_not_accepted"  # microphone audio that breaks listen mode's rules (size, rate, format)
RECOGNITION_FAILED = "recognition_failed"  # Triton's recognizer failed the microphone's stream
INVALID_SSML = "invalid_ssml"  # a `speak` read as SSML that is not valid SSML; the message names the element
ERROR_CODES = (
    INVALID_JSON, INVALID_MESSAGE, UNKNOWN_TYPE, MISSING_FIELD, INVALID_FIELD, UNKNOWN_VOICE, UNSUPPORTED_FORMAT,
    BINARY_NOT_ACCEPTED, CONFIG_TOO_LATE, UNKNOWN_CONTEXT, CONTEXT_EXISTS, CONTEXT_CLOSED, TEXT_TOO_LONG,
    TOO_MANY_CONTEXTS, TOO_MANY_STREAMS, SERVER_BUSY, SERVER_DRAINING, MESSAGE_TOO_LARGE, IDLE_TIMEOUT, BACKEND_UNAVAILABLE,
    SYNTHESIS_FAILED, INTERNAL_ERROR, CHAT_UNAVAILABLE, LISTEN_UNAVAILABLE, AUDIO_NOT_ACCEPTED,
    RECOGNITION_FAILED, INVALID_SSML,
)

# Listen mode: the microphone's audio, sent up as binary messages (one continuous
# timeline, silence included): PCM s16le mono at `listen.sample_rate`, at most
# LISTEN_MAX_MESSAGE_MS a message, or exactly one Opus packet a message (48 kHz).
LISTEN_FORMATS = ("pcm_s16le", "opus")
LISTEN_SAMPLE_RATES = (8000, 16000, 24000, 48000)
LISTEN_DEFAULT_RATES = {"pcm_s16le": 16000, "opus": 48000}
LISTEN_MAX_MESSAGE_MS = 200
LISTEN_DEFAULT_ENDPOINT_MS = 500
# How a spoken turn ends: after endpoint_ms of silence ("silence"), or sooner where the
# turn detector hears a finished sentence at 200 ms of silence ("smart").
LISTEN_TURN_DETECTIONS = ("silence", "smart")
LISTEN_DEFAULT_TURN_DETECTION = "silence"
# How far the microphone's timeline may run ahead of real time since its first message
# (a client's buffering, a network's bursts): audio past it is dropped, not a file sent at once.
LISTEN_MAX_AHEAD_S = 2.0

# Binary audio frame: u8 kind (1 = audio) · u8 flags (bit 0 = last) · u16 stream ·
# u32 seq · u32 sample_offset, little-endian, then one Opus packet or PCM chunk.
AUDIO_HEADER = struct.Struct("<BBHII")
KIND_AUDIO = 1
FLAG_LAST = 1


def audio_frame(stream: int, seq: int, sample_offset: int, payload: bytes, last: bool) -> bytes:
    return AUDIO_HEADER.pack(KIND_AUDIO, FLAG_LAST if last else 0, stream, seq, sample_offset) + payload


@dataclass(frozen=True)
class AudioFrame:
    stream: int
    seq: int
    sample_offset: int
    last: bool
    payload: bytes


def parse_audio_frame(frame: bytes) -> AudioFrame:
    """The inverse of `audio_frame`, for clients."""
    kind, flags, stream, seq, offset = AUDIO_HEADER.unpack_from(frame)
    if kind != KIND_AUDIO:
        raise ValueError(f"not an audio frame (kind {kind})")
    return AudioFrame(stream, seq, offset, bool(flags & FLAG_LAST), frame[AUDIO_HEADER.size :])
