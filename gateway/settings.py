"""The gateway's settings: limits, access control and where Triton is.

Each field is also a command-line flag (`--max-contexts`) and an environment variable
(`GATEWAY_MAX_CONTEXTS`), derived from its name here, so the list below is the whole
configuration reference.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, fields

from contract.models import MAX_TEXT_CHARS
from contract.voices import AR_MODEL_ENV, CHAT_MODEL_ENV, EMBEDDED_CHAT, VOICES_ENV


def _setting(default, help: str, env: str | None = None, secret: bool = False):
    return field(default=default, repr=not secret, metadata={"help": help, "env": env})


@dataclass(frozen=True)
class Settings:
    host: str = _setting("127.0.0.1", "address the gateway listens on")
    port: int = _setting(8080, "port for WebSocket, HTTP and the page")
    triton_urls: tuple[str, ...] = _setting(
        ("127.0.0.1:8001",), "Triton gRPC addresses, comma-separated; each tts request goes to the least busy one that is up",
        env="TRITON_GRPC_URL",
    )
    triton_service: str | None = _setting(
        None, "NAME:PORT: the Triton servers are the A records of NAME (a headless Service's), on gRPC port PORT, "
        "resolved again every --resolve-interval s; each tts request goes to the least busy one; replaces --triton-urls"
    )
    dns: str | None = _setting(
        None, "HOST[:PORT] of the DNS server --triton-service is resolved through (UDP; port 53 by default); "
        "none: the system's resolver"
    )
    resolve_interval_s: float = _setting(
        5.0, "seconds between resolutions of --triton-service: a pod's address found takes requests once it is up and "
        "has passed its probe; one gone from DNS takes no new request and is closed when its last ends"
    )
    max_text_chars: int = _setting(MAX_TEXT_CHARS, "characters per text message, and waiting per context")
    max_contexts: int = _setting(16, "open contexts per connection")
    max_streams_per_client: int = _setting(
        32, "streams at once per client address: open contexts on all its connections and HTTP speech requests "
        "together ('too_many_streams' / HTTP 429 past it); 0 for no cap (behind a proxy all share one address)"
    )
    admission_load: float = _setting(
        0.9, "a new stream is admitted only while the streams open, on all gateways, this one included, stay within "
        "this fraction of the real-time streams the Tritons measure they sustain (or none is open: one stream at "
        "least); past it 'server_busy' / HTTP 429 (0: admit all)"
    )
    admission_slack_s: float = _setting(
        3.0, "past --admission-load, a new stream is still admitted while every stream being spoken is at least this "
        "many seconds of audio ahead of its listener and the streams open stay within --admission-peak of the "
        "capacity: the servers keep up with room to spare (0: never)"
    )
    admission_peak: float = _setting(
        1.25, "the most streams open, as a fraction of the capacity the Tritons measure, that --admission-slack "
        "admits up to"
    )
    fleet_metrics_port: int = _setting(
        8002, "every Triton server's metrics port, read 4 times a second for the streams it serves for all gateways, "
        "so that gateways sharing servers admit together what they sustain (0: count this gateway's streams only)"
    )
    admission_queue: int = _setting(
        64, "streams that may wait for capacity (a client's config 'queue': true) instead of 'server_busy'; "
        "past it they are refused as the others"
    )
    gateway_workers: int = _setting(
        1, "gateway processes serving --port together (SO_REUSEPORT: the kernel spreads new connections over them), "
        "each admitting through the fleet's count (--fleet-metrics-port) as separate gateways do; --max-connections "
        "is shared among them, the per-client caps apply to each; /metrics and /readyz answer for all of them",
        env="GATEWAY_WORKERS",
    )
    max_connections: int = _setting(
        1000, "open connections (HTTP and WebSocket) in all; past it a new one gets 503 and is closed (0 for no cap)"
    )
    max_connections_per_client: int = _setting(
        32, "open connections (HTTP and WebSocket) per client address; past it a new one gets 429 and is closed "
        "(0 for no cap; behind a proxy all share one address)"
    )
    header_timeout_s: float = _setting(
        10.0, "seconds a connection may take to send a request's head, or sit idle between requests, before "
        "it is closed (slow or silent clients)"
    )
    body_timeout_s: float = _setting(
        10.0, "seconds a speech request's body may take to arrive, and a transcription's upload may go without "
        "sending a byte (408 past it)"
    )
    max_message_bytes: int = _setting(
        256 * 1024, "larger client messages get 'message_too_large'; 4 times this closes the connection (1009)"
    )
    max_buffered_bytes: int = _setting(
        64 * 1024, "audio bytes held for a slow reader per connection (write buffer, and as much in the kernel) "
        "before a send waits for it"
    )
    max_lead_s: float = _setting(
        10.0, "seconds of audio a connection's client may leave unread (in the gateway's write buffer and the "
        "kernel's send queue) before its streams' synthesis pauses at the next sentence, holding no compute, and "
        "goes on once half of it is read; what the client's own receive buffer holds is not seen; 0 for never"
    )
    stage_timeout_s: float = _setting(
        20.0, "seconds Triton may take for a stream's next chunk before the stream fails with 'synthesis_failed' "
        "(a stage that died or hangs); the wait for a slow client does not count; 0 for never"
    )
    resume_within_s: float = _setting(
        15.0, "seconds a stream whose Triton, or a stage under it, went away may take to go on: the sentences not "
        "yet delivered are issued again, to another Triton or to the same once it serves again (WebSocket clients "
        "are told 'resuming'); past it the stream fails with 'backend_unavailable'; 0 for never"
    )
    drain_s: float = _setting(
        20.0, "seconds a stopping gateway (SIGTERM, SIGINT) gives the streams it is speaking to end, refusing new "
        "ones ('server_draining' / HTTP 503) with /readyz 503, before it closes each WebSocket with 1001; keep it "
        "under the grace period of what stops it (Kubernetes: terminationGracePeriodSeconds)"
    )
    probe_interval_s: float = _setting(
        10.0, "seconds between readiness probes (a word synthesized through every stage of each Triton); "
        "0 for none, when /readyz trusts Triton's own readiness"
    )
    send_timeout_s: float = _setting(
        60.0, "seconds a connection's audio may wait for its client to read before the connection is dropped "
        "(its synthesis paused meanwhile); 0 for never"
    )
    idle_timeout_s: float = _setting(
        300.0, "seconds without a message, and nothing to speak, before a connection is closed; 0 for never"
    )
    api_key: str | None = _setting(
        None, "require this key: 'Authorization: Bearer', 'X-API-Key' or ?api_key= (prefer the variable to the flag)",
        secret=True,
    )
    max_key_failures: int = _setting(
        10, "wrong API keys per client address per minute; past them the address gets 429 for the rest of "
        "the minute (0 for no limit)"
    )
    allowed_origins: tuple[str, ...] = _setting((), "comma-separated browser Origins allowed; empty allows any")
    voices: str | None = _setting(
        None, "a directory of Piper voices (NAME.onnx beside NAME.onnx.json) served besides the embedded one; "
        "Triton's models must be given the same (speechstream-serve gives it to both)", env=VOICES_ENV,
    )
    ar_model: str | None = _setting(
        None, "an Orpheus-format model directory (talker/ and snac/): its voices (tara, leah, ...) are spoken by "
        "the autoregressive family, which Triton must serve from the same (speechstream-serve does)", env=AR_MODEL_ENV,
    )
    chat_model: str | None = _setting(
        None, f"a chat model directory (Hugging Face), or '{EMBEDDED_CHAT}' for the embedded SmolLM2: protocol v1's "
        "chat mode is on, its replies written by Triton's `thinker` model, which Triton must serve from the same "
        "(speechstream-serve does; --chat is --chat-model embedded)", env=CHAT_MODEL_ENV,
    )
    listen: bool = _setting(
        False, "protocol v1's listen mode is on (and the transcription API): speech is recognized by Triton's `asr` "
        "model, which Triton must serve (speechstream-serve does with --listen or --chat)", env="SPEECHSTREAM_LISTEN",
    )
    start_when_safe: bool = _setting(
        True, "protocol v1: a context's first audio is held until the audio in hand covers what the rest will lack at "
        "the rate its audio comes, so that its listener hears a later start rather than a stall after it "
        "(many streams started together); a stream faster than real time starts with its first chunk, unless the "
        "first chunks of other streams starting would outlast it",
    )
    max_upload_bytes: int = _setting(
        25 * 1024 * 1024, "the largest audio file POST /v1/audio/transcriptions takes, as OpenAI's (413 past it)"
    )
    max_audio_s: float = _setting(
        600.0, "the longest audio POST /v1/audio/transcriptions transcribes, in seconds (400 past it): the "
        "recognizer's work, which the request holds until its end"
    )
    chat_speculation_chars: int = _setting(
        1500, "the longest conversation (characters of its messages: system prompt, history, question) a chat turn "
        "speculates on; past it the turn is answered without speculation: vLLM reads no prefix cache for the "
        "verification, whose cost grows with the conversation (0 for no limit)",
    )

    @property
    def max_frame_bytes(self) -> int:
        """Past this a message is abusive: the connection is closed, not answered."""
        return 4 * self.max_message_bytes


def _env_name(name: str, explicit: str | None) -> str:
    return explicit or f"GATEWAY_{name.removesuffix('_s').upper()}"


def _parse(default, text: str):
    if isinstance(default, bool):
        return text.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, tuple):
        return tuple(part.strip() for part in text.split(",") if part.strip())
    if default is None:
        return text or None
    return type(default)(text)


def add_arguments(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """A flag per setting; an environment variable, when set, replaces the default."""
    for f in fields(Settings):
        if f.name in skip:
            continue
        env = _env_name(f.name, f.metadata["env"])
        default = _parse(f.default, os.environ[env]) if env in os.environ else f.default
        flag = "--" + f.name.removesuffix("_s").replace("_", "-")
        help = f"{f.metadata['help']} (env {env}; default {f.default!r})"
        if isinstance(f.default, bool):  # a switch: --listen, --no-listen
            parser.add_argument(flag, dest=f.name, default=default, action=argparse.BooleanOptionalAction, help=help)
            continue
        parser.add_argument(flag, dest=f.name, default=default, type=lambda text, d=f.default: _parse(d, text), help=help)


def from_arguments(args: argparse.Namespace, **overrides) -> Settings:
    values = {f.name: getattr(args, f.name) for f in fields(Settings) if hasattr(args, f.name)}
    return Settings(**{**values, **overrides})
