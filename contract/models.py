"""The Triton models' contract: their names, tensors, parameters with defaults and
ranges, metrics and limits.

The single source of truth, and pure (the standard library only), so any process can
import it. The models declare their tensors from it (``auto_complete_config``) and
check requests with it; the gateway, perf and the tests build requests from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

ACOUSTIC_MODEL = "acoustic"
VOCODER_MODEL = "vocoder"
TTS_MODEL = "tts"
# The autoregressive family (python_backends/ar): a Talker writes frames of codec codes,
# Code2Wav decodes them, and tts_ar chains the two as tts chains acoustic and vocoder.
TALKER_MODEL = "talker"
CODE2WAV_MODEL = "code2wav"
TTS_AR_MODEL = "tts_ar"
# The Thinker: a chat model on vLLM writing a voice chat's replies (python_backends/thinker).
THINKER_MODEL = "thinker"
# The recognizer: speech in, partial and final transcripts out (python_backends/asr).
ASR_MODEL = "asr"
DECOUPLED_MODELS = (ACOUSTIC_MODEL, TTS_MODEL, TALKER_MODEL, TTS_AR_MODEL, THINKER_MODEL, ASR_MODEL)

# The embedded default voice (Piper's en_US-joe-medium); others come from a voices
# directory (contract.voices).
DEFAULT_VOICE = "en_US-joe-medium"
# A latent frame is this many samples at the voice's rate (11.6 ms at 22,050 Hz).
SAMPLES_PER_FRAME = 256
# A listener's player starts this long after the first audio arrives, then plays in
# real time (docs/design.md's underrun model): the tts scheduler's deadlines and perf's
# stall count both assume it.
PLAYER_LEAD_S = 0.05
# Seconds of speech per character of text, to plan audio before it exists (0.054-0.056
# on the Harvard texts in the embedded voice).
SECONDS_PER_CHAR = 0.05

# A gauge on Triton's metrics port: `tts` requests being synthesized now. It returns
# to zero when every stream has ended or been cancelled (a leak shows here), and it
# is the outstanding-work signal for balancing gateways across Triton servers.
TTS_ACTIVE_METRIC = "speechstream_tts_active_requests"
# The same, for each gateway process that sent some (label GATEWAY_LABEL: the name its
# GATEWAY_PARAMETER gave; the series of a gateway gone stays, at 0). From the two, a
# gateway tells the streams the other gateways hold on a server (gateway/backends/fleet.py).
TTS_ACTIVE_BY_GATEWAY_METRIC = "speechstream_tts_active_requests_by_gateway"
GATEWAY_LABEL = "gateway"
# The Talker's vLLM engine, as its own scheduler reports it (gauges on Triton's metrics port).
TALKER_RUNNING_METRIC = "speechstream_talker_running_requests"
TALKER_WAITING_METRIC = "speechstream_talker_waiting_requests"
TALKER_TOKENS_METRIC = "speechstream_talker_generated_tokens"
TALKER_PEAK_METRIC = "speechstream_talker_peak_running_requests"  # the largest batch so far
TALKER_GUIDED_METRIC = "speechstream_talker_guided_streams"  # streams decoded as a CFG pair
TALKER_GUIDANCE_LOST_METRIC = "speechstream_talker_guidance_lost_streams"  # pairs that fell out of step
# tts_ar's first packets, split: requests, and the seconds from each request to its first
# chunk's frames (the Talker's part) and from those to their audio (Code2Wav's), summed.
TTS_AR_FIRST_CHUNKS_METRIC = "speechstream_tts_ar_first_chunks"
TTS_AR_FIRST_FRAMES_METRIC = "speechstream_tts_ar_first_chunk_talker_seconds"
TTS_AR_FIRST_DECODE_METRIC = "speechstream_tts_ar_first_chunk_code2wav_seconds"

# The Thinker's vLLM engine, as its scheduler reports it, and its verification of drafts.
THINKER_RUNNING_METRIC = "speechstream_thinker_running_requests"
THINKER_WAITING_METRIC = "speechstream_thinker_waiting_requests"
THINKER_TOKENS_METRIC = "speechstream_thinker_generated_tokens"
THINKER_PEAK_METRIC = "speechstream_thinker_peak_running_requests"
THINKER_VERIFIED_METRIC = "speechstream_thinker_drafts_verified"  # replies that began by verifying a draft
THINKER_DRAFT_TOKENS_METRIC = "speechstream_thinker_draft_tokens"  # the tokens of those drafts
THINKER_ACCEPTED_METRIC = "speechstream_thinker_accepted_tokens"  # of which the model kept these

# The recognizer's counts (gauges on Triton's metrics port): recognizer streams open, and
# since it started, recognizer passes, their seconds, and the audio seconds heard.
ASR_STREAMS_METRIC = "speechstream_asr_streams"
ASR_PASSES_METRIC = "speechstream_asr_passes"
ASR_PASS_SECONDS_METRIC = "speechstream_asr_pass_seconds"
ASR_AUDIO_SECONDS_METRIC = "speechstream_asr_audio_seconds"

# Inputs shared by `acoustic` and `tts`. `tts` takes exactly one of TEXT (BYTES [1]), which
# it cuts into sentences, or SENTENCES (BYTES [-1]), text already cut (the gateway's
# segmenter does it), each element spoken as one sentence and never re-split; `acoustic`
# takes one sentence as TEXT.
TEXT = "TEXT"
SENTENCES = "SENTENCES"
LENGTH_SCALE = "LENGTH_SCALE"
NOISE_SCALE = "NOISE_SCALE"
NOISE_W = "NOISE_W"
SEED = "SEED"
# A multi-speaker voice's speaker id, 0 to its speakers - 1 (INT64 [1]; 0 without it).
SPEAKER = "SPEAKER"
# Input of every model that speaks with a voice: its name (BYTES [1]; the default voice without it).
VOICE = "VOICE"
# Optional input of `tts` (BYTES [sentences], one element per element of SENTENCES) and
# `acoustic` (BYTES [1]): IPA for spans of a sentence's text, spoken instead of espeak-ng's
# reading of them (SSML's <phoneme>), as JSON [[start, end, "ipa"], ...]: spans [start,
# end) in code points of the sentence, in order and apart; "" (or []) for none. The
# words of the span are still the sentence's words, timed. The AR family reads the text.
PHONEMES = "PHONEMES"
# One sentence's element of PHONEMES, decoded: ((start, end, ipa), ...).
Phonemes = tuple[tuple[int, int, str], ...]


def encode_phonemes(phonemes: Phonemes) -> str:
    """One element of PHONEMES."""
    return json.dumps([list(span) for span in phonemes], ensure_ascii=False) if phonemes else ""


# Input of `acoustic`: send the sentence's first HEAD_FRAMES frames as a response of
# their own, ahead of its other frames (0, the default: the sentence in one piece).
HEAD_FRAMES = "HEAD_FRAMES"
# Input of `acoustic`: the intra-op threads the sentence's prior and first piece may use
# (1, the default), as many as its caller found cores idle; the model's `head_threads`
# parameter sets what more than one thread means.
HEAD_THREADS = "HEAD_THREADS"
# Input of `acoustic` and `vocoder`: true when the caller needs the call's result at once
# (a stream's first packet, or a listener about to run dry): it is computed at the
# stub's own priority, other calls on threads below it (python_backends.priority), so
# that the kernel runs it first even while the cores compute calls far ahead of need.
URGENT = "URGENT"

# Chunking inputs of `tts`.
INITIAL_CHUNK_FRAMES = "INITIAL_CHUNK_FRAMES"
CHUNK_FRAMES = "CHUNK_FRAMES"
LEFT_CONTEXT_FRAMES = "LEFT_CONTEXT_FRAMES"
RIGHT_CONTEXT_FRAMES = "RIGHT_CONTEXT_FRAMES"

# Outputs of `acoustic`: one response for the sentence, or one per piece of it
# (HEAD_FRAMES); the first carries its DURATIONS and words, later pieces only their
# LATENT frames (and empty DURATIONS and word arrays).
LATENT = "LATENT"  # [channels, frames] float32, the decoder input z·mask
DURATIONS = "DURATIONS"  # [phoneme ids] int32, frames per phoneme id
WORDS = "WORDS"  # [words] bytes, the sentence's words as written
WORD_FRAMES = "WORD_FRAMES"  # [words, 2] int32, [start, end) frame of each word in the sentence

# Output of `vocoder`; inputs are LATENT (a window of frames), VOICE and SPEAKER.
PCM = "PCM"  # [samples] float32 in [-1, 1] at the voice's sample rate

# Outputs of `tts` and `tts_ar`, one response contract for both families: one response
# per chunk of audio, then one with CAPACITY alone, then an empty final response.
SENTENCE_INDEX = "SENTENCE_INDEX"  # [1] int32, the chunk's sentence: its index in SENTENCES, or among TEXT's sentences
WORD_SAMPLES = "WORD_SAMPLES"  # [words, 2] int64, [start, end) sample of each word in the stream;
# WORDS and WORD_SAMPLES come with the first chunk of each sentence only, from voices with word timings.
CAPACITY = "CAPACITY"  # [1] fp32, real-time streams this server sustains, as the model measures it now (0: not yet)


# A `tts` request parameter (Triton's request `parameters`, not a tensor): who asked, as an
# opaque name (the gateway sends the client's address). The model shares its compute
# fairly among the names; requests without one share a single name.
CLIENT_PARAMETER = "client"
# A `tts` request parameter: the gateway process that sent it (its host and pid), so that
# the model counts each gateway's requests apart (TTS_ACTIVE_BY_GATEWAY_METRIC).
GATEWAY_PARAMETER = "gateway"


@dataclass(frozen=True)
class Param:
    """A scalar request parameter: its tensor, Triton type, default and allowed range."""

    name: str
    triton_type: str
    default: float | int | None  # None: the voice's own default, or unset (seed)
    minimum: float | int
    maximum: float | int

    @property
    def is_integer(self) -> bool:
        return self.triton_type in ("TYPE_INT32", "TYPE_INT64")

    @property
    def dtype(self) -> str:
        """The numpy dtype of its tensor."""
        return {"TYPE_FP32": "float32", "TYPE_INT32": "int32", "TYPE_INT64": "int64"}[self.triton_type]


SEED_PARAM = Param(SEED, "TYPE_INT64", None, 0, 2**63 - 1)
VOICE_PARAMS = (
    Param(LENGTH_SCALE, "TYPE_FP32", None, 0.25, 4.0),
    Param(NOISE_SCALE, "TYPE_FP32", None, 0.0, 2.0),
    Param(NOISE_W, "TYPE_FP32", None, 0.0, 2.0),
    SEED_PARAM,
    Param(SPEAKER, "TYPE_INT64", None, 0, 65535),  # each voice checks its own count
)


def chunk_params(initial: int, frames: int, context: int, most_frames: int, most_context: int) -> tuple[Param, ...]:
    """A family's chunking parameters, the same four for both: the first chunk's frames
    (`initial`) and the later chunks' (`frames`), each 1 to `most_frames`, and the
    context frames on each side of a chunk (`context`, 0 to `most_context`)."""
    return (
        Param(INITIAL_CHUNK_FRAMES, "TYPE_INT32", initial, 1, most_frames),
        Param(CHUNK_FRAMES, "TYPE_INT32", frames, 1, most_frames),
        Param(LEFT_CONTEXT_FRAMES, "TYPE_INT32", context, 0, most_context),
        Param(RIGHT_CONTEXT_FRAMES, "TYPE_INT32", context, 0, most_context),
    )


HEAD_PARAMS = (Param(HEAD_FRAMES, "TYPE_INT32", 0, 0, 4096), Param(HEAD_THREADS, "TYPE_INT32", 1, 1, 1024))

# Frames are 256 samples at 22,050 Hz (11.6 ms). A small first chunk gives a fast
# first packet; later chunks double up to CHUNK_FRAMES so the context overhead shrinks
# while one call stays short enough not to hold up other streams. 8 frames of context on
# each side match whole-utterance vocoding well above the fidelity bar; more costs
# vocoder work for little (docs/design.md, Chunking).
CHUNK_PARAMS = chunk_params(initial=8, frames=128, context=8, most_frames=256, most_context=64)

# The autoregressive family's inputs and outputs. CODES: frames of codec codes, [frames,
# positions] INT32 (7 positions for the Orpheus format); the Talker answers with one
# response per frame or few, Code2Wav takes windows of them ([batch, frames, 7]).
CODES = "CODES"
# Triton 2.51's BLS cannot cancel a decoupled request it made, so tts_ar names each Talker
# stream (STREAM_ID, BYTES [1]) and, to stop one early, sends the Talker a request with
# that name and STOP (BOOL [1]) true, which aborts the stream's vLLM request.
STREAM_ID = "STREAM_ID"
STOP = "STOP"
TEMPERATURE = "TEMPERATURE"
MAX_FRAMES = "MAX_FRAMES"
# Classifier-free guidance: a stream with GUIDANCE_SCALE s is decoded as a pair of vLLM
# requests, with and without its text, their logits combined u + s·(c − u) each step
# (python_backends.ar.guidance); absent, the stream is one request, unguided.
GUIDANCE_SCALE = "GUIDANCE_SCALE"
AR_POSITIONS = 7
AR_SAMPLE_RATE = 24000  # SNAC 24 kHz, the Orpheus format's Code2Wav
# Orpheus's voices, spoken as the prompt's "voice: text"; the first is the default.
ORPHEUS_VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")
AR_PARAMS = (
    Param(TEMPERATURE, "TYPE_FP32", 0.6, 0.0, 2.0),
    SEED_PARAM,
    # 85.3 ms a frame: 102 s by default; the Talker also stops at 12 + 2 per character of text.
    Param(MAX_FRAMES, "TYPE_INT32", 1200, 1, 4096),
    Param(GUIDANCE_SCALE, "TYPE_FP32", None, 0.0, 10.0),
)
# What clients may set per request (protocol v1 and the HTTP API, by lower-case name):
# Piper's voice parameters and the seed, and the AR family's temperature and guidance
# scale. Each model is sent those among its inputs; the others do not apply to its voices.
CLIENT_PARAMS = VOICE_PARAMS + tuple(p for p in AR_PARAMS if p.name in (TEMPERATURE, GUIDANCE_SCALE))
# SNAC's decoder reaches about 2 frames (170 ms) either side, so 2 frames of context make
# chunked decoding match whole decoding (docs/ar-family.md). A first chunk of 1 frame
# starts audio after 3.
AR_CHUNK_PARAMS = chunk_params(initial=1, frames=16, context=2, most_frames=64, most_context=16)

# The Thinker's request: the conversation so far, MESSAGES (BYTES [1], JSON: a list of
# {"role": "system" | "user" | "assistant", "content": text}, its last the user's); a
# DRAFT reply to verify first (INT32 [-1] token ids, from an earlier reply's TOKEN_IDS),
# kept up to its first token outside the model's best TOP_K; decoding per TEMPERATURE
# (0: greedy; above it, drawn with SEED if given: the same seed, the same reply) for at
# most MAX_TOKENS tokens. Its responses: TOKEN_IDS (INT32 [-1], the
# reply's next tokens, an end token included), TEXT (BYTES [1], their text as far as it
# can be decoded), and with the first of a verifying reply ACCEPTED (INT32 [1], draft
# tokens kept; that response's TOKEN_IDS are those, then the token after them).
MESSAGES = "MESSAGES"
DRAFT = "DRAFT"
TOP_K = "TOP_K"
MAX_TOKENS = "MAX_TOKENS"
TOKEN_IDS = "TOKEN_IDS"
ACCEPTED = "ACCEPTED"
# PREFIX (INT32 [-1]), instead of a DRAFT: reply tokens already decided (a draft written
# for this very conversation, taken whole): the reply goes on after them, unverified, and
# its responses hold only the tokens after them.
PREFIX = "PREFIX"
THINKER_PARAMS = (
    Param(TOP_K, "TYPE_INT32", 1, 1, 20),
    Param(MAX_TOKENS, "TYPE_INT32", 256, 1, 4096),
    Param(TEMPERATURE, "TYPE_FP32", 0.0, 0.0, 2.0),
    SEED_PARAM,
)
MAX_MESSAGES_CHARS = 32_000  # a conversation's text, all messages together

# The recognizer's request: the next audio of a recognizer stream, STREAM_ID (BYTES [1],
# the recognizer stream's name, its state kept across requests until STOP), AUDIO (INT16 [-1], mono
# PCM at ASR_SAMPLE_RATE, the stream's timeline continued, silence included, at most
# ASR_MAX_AUDIO_MS a request), END (BOOL [1], the speaker ended the utterance now:
# push-to-talk), STOP (BOOL [1], the stream is over: an utterance in progress ends first,
# then its state goes). A request's audio is heard before its END or STOP; a stream's
# requests are heard in the order sent. A stream that sends nothing for the model's
# `idle_s` (60 s), or one of whose requests is cancelled, is dropped (its gateway went
# away). Its responses are the events the request's audio caused, one a response: EVENT
# (BYTES [1], one of ASR_EVENTS), UTTERANCE (INT32 [1], the utterance's number in the
# stream, from 0), AUDIO_MS (INT64 [1], where in the stream's timeline: speech start or
# end, or for a transcript the end of the audio it heard) and TEXT (BYTES [1], a
# transcript's words; empty for the other events). Per utterance, in this order:
# speech_started; partials, each the utterance's whole stable text so far, sent only when
# it grows and never taking back a word it showed (with PARTIALS false, none);
# speech_stopped, once the speech is over (ENDPOINT_MS of silence after it, END, STOP, or
# an utterance grown past about 25 s, which Whisper cannot hear whole); then exactly one
# final, the utterance's words, which may revise the partials' and may be empty (speech
# the recognizer heard no words in), so that every speech_started is closed. Silence, and
# sound too short to be speech (under about 0.2 s), cause no events at all.
ASR_SAMPLE_RATE = 16000
ASR_MAX_AUDIO_MS = 1000
AUDIO = "AUDIO"
END = "END"
EVENT = "EVENT"
UTTERANCE = "UTTERANCE"
AUDIO_MS = "AUDIO_MS"
SPEECH_STARTED, PARTIAL, FINAL, SPEECH_STOPPED = "speech_started", "partial", "final", "speech_stopped"
ASR_EVENTS = (SPEECH_STARTED, PARTIAL, FINAL, SPEECH_STOPPED)
ENDPOINT_MS = "ENDPOINT_MS"
ASR_PARAMS = (Param(ENDPOINT_MS, "TYPE_INT32", 500, 100, 5000),)  # the silence after speech that ends an utterance
# PARTIALS (BOOL [1], optional, true by default): false asks for finals only (a file transcribed whole).
PARTIALS = "PARTIALS"
# SMART_TURN (BOOL [1], optional, false by default): true asks the turn detector (Smart Turn
# v3.2) at 200 ms of silence whether the speaker's turn is over: if it is, the utterance
# ends there rather than at ENDPOINT_MS.
SMART_TURN = "SMART_TURN"

# Request text limit, in characters; a model config parameter `max_text_chars` overrides it.
MAX_TEXT_CHARS = 20_000
# A sentence longer than this is cut (at a clause, else a space) so one sentence can never
# stall a stream; `acoustic`'s TEXT and each element of `tts`'s SENTENCES must fit in it.
MAX_SENTENCE_CHARS = 300

# Vocoder windows are zero-padded to one of these lengths so Triton's dynamic batcher,
# which joins only equal shapes, can batch chunks from different streams.
VOCODER_BUCKETS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384)


class InvalidRequest(ValueError):
    """A request the models refuse; the message is sent to the client as is."""


class StageError(RuntimeError):
    """A stage model answered `tts` with an error, or with no frames."""


# How Triton 2.51's Python backend fails a call whose instance's stub is dead, or stopped
# for over about a second (its health check). A BLS model passes the message on: the
# gateway reads it as the stage gone away, not as the request failing.
STUB_FAULTS = ("is not healthy", "Failed to obtain the health mutex")


def _tensor(name: str, triton_type: str, dims: list[int], optional: bool = False) -> dict:
    tensor = {"name": name, "data_type": triton_type, "dims": dims}
    return tensor | {"optional": True} if optional else tensor


def _params(params: tuple[Param, ...]) -> list[dict]:
    return [_tensor(p.name, p.triton_type, [1], optional=True) for p in params]


def model_inputs(model: str) -> list[dict]:
    """Input declarations of `model`, as Triton's auto-complete config expects them."""
    voice = [_tensor(VOICE, "TYPE_STRING", [1], optional=True)]
    if model == ACOUSTIC_MODEL:
        phonemes = [_tensor(PHONEMES, "TYPE_STRING", [1], optional=True)]
        urgent = [_tensor(URGENT, "TYPE_BOOL", [1], optional=True)]
        return [_tensor(TEXT, "TYPE_STRING", [1])] + phonemes + voice + _params(VOICE_PARAMS) + _params(HEAD_PARAMS) + urgent
    if model == TTS_MODEL:
        text = [_tensor(TEXT, "TYPE_STRING", [1], optional=True)]
        sentences = [_tensor(SENTENCES, "TYPE_STRING", [-1], optional=True)]
        phonemes = [_tensor(PHONEMES, "TYPE_STRING", [-1], optional=True)]
        return text + sentences + phonemes + voice + _params(VOICE_PARAMS) + _params(CHUNK_PARAMS)
    if model == VOCODER_MODEL:
        return [_tensor(LATENT, "TYPE_FP32", [-1, -1])] + voice + [
            _tensor(SPEAKER, "TYPE_INT64", [1], optional=True), _tensor(URGENT, "TYPE_BOOL", [1], optional=True)]
    if model == TALKER_MODEL:
        stream = [_tensor(STREAM_ID, "TYPE_STRING", [1], optional=True), _tensor(STOP, "TYPE_BOOL", [1], optional=True)]
        return [_tensor(TEXT, "TYPE_STRING", [1], optional=True)] + voice + _params(AR_PARAMS) + stream
    if model == CODE2WAV_MODEL:
        return [_tensor(CODES, "TYPE_INT32", [-1, AR_POSITIONS])]
    if model == TTS_AR_MODEL:
        text = [_tensor(TEXT, "TYPE_STRING", [1], optional=True)]
        sentences = [_tensor(SENTENCES, "TYPE_STRING", [-1], optional=True)]
        return text + sentences + voice + _params(AR_PARAMS) + _params(AR_CHUNK_PARAMS)
    if model == THINKER_MODEL:
        return [_tensor(MESSAGES, "TYPE_STRING", [1]), _tensor(DRAFT, "TYPE_INT32", [-1], optional=True),
                _tensor(PREFIX, "TYPE_INT32", [-1], optional=True), *_params(THINKER_PARAMS)]
    if model == ASR_MODEL:
        return [_tensor(STREAM_ID, "TYPE_STRING", [1]), _tensor(AUDIO, "TYPE_INT16", [-1], optional=True),
                _tensor(END, "TYPE_BOOL", [1], optional=True), _tensor(STOP, "TYPE_BOOL", [1], optional=True),
                _tensor(PARTIALS, "TYPE_BOOL", [1], optional=True), _tensor(SMART_TURN, "TYPE_BOOL", [1], optional=True),
                *_params(ASR_PARAMS)]
    raise KeyError(model)


def model_outputs(model: str) -> list[dict]:
    """Output declarations of `model`."""
    if model == ACOUSTIC_MODEL:
        return [
            _tensor(LATENT, "TYPE_FP32", [-1, -1]),
            _tensor(DURATIONS, "TYPE_INT32", [-1]),
            _tensor(WORDS, "TYPE_STRING", [-1]),
            _tensor(WORD_FRAMES, "TYPE_INT32", [-1, 2]),
        ]
    if model in (TTS_MODEL, TTS_AR_MODEL):
        return [
            _tensor(PCM, "TYPE_FP32", [-1]),
            _tensor(SENTENCE_INDEX, "TYPE_INT32", [1]),
            _tensor(WORDS, "TYPE_STRING", [-1]),
            _tensor(WORD_SAMPLES, "TYPE_INT64", [-1, 2]),
            _tensor(CAPACITY, "TYPE_FP32", [1]),
        ]
    if model == VOCODER_MODEL or model == CODE2WAV_MODEL:
        return [_tensor(PCM, "TYPE_FP32", [-1])]
    if model == TALKER_MODEL:
        return [_tensor(CODES, "TYPE_INT32", [-1, AR_POSITIONS])]
    if model == THINKER_MODEL:
        return [_tensor(TOKEN_IDS, "TYPE_INT32", [-1]), _tensor(TEXT, "TYPE_STRING", [1]),
                _tensor(ACCEPTED, "TYPE_INT32", [1])]
    if model == ASR_MODEL:
        return [_tensor(EVENT, "TYPE_STRING", [1]), _tensor(UTTERANCE, "TYPE_INT32", [1]),
                _tensor(AUDIO_MS, "TYPE_INT64", [1]), _tensor(TEXT, "TYPE_STRING", [1])]
    raise KeyError(model)
