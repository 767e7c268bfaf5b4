"""The audio paths, sans I/O. Out: voice-rate float PCM → streaming resampling → fixed
frames → Opus packets, s16le PCM, or G.711 μ-law / A-law bytes, one payload per frame.
In (listen mode): a microphone's PCM or Opus messages → the recognizer's 16 kHz PCM."""

from __future__ import annotations

import functools

import av
import numpy as np
import opuslib
import soxr

# Opus' encoder effort (0-10) by the stream's sample rate: at 48 kHz a lower effort costs
# far less CPU for the same fidelity to this voice; at the lower rates it loses fidelity,
# so those keep the default, 10 (docs/design.md, Audio out).
OPUS_COMPLEXITY = {48000: 5}

OPUS_RATES = (8000, 12000, 16000, 24000, 48000)  # the rates an Opus encoder takes (RFC 6716)


RESAMPLE_SLICE = 4096  # source samples per call into the resampler

# soxr's low quality: closer to the very high quality than the chunked synthesis keeps
# and Opus' own noise, and it holds back almost nothing of a chunk until the next comes;
# what a higher quality holds, a listener lacks of what `tts` counts as sent when it
# judges what is urgent (docs/design.md, Audio out).
RESAMPLE_QUALITY = "LQ"


@functools.cache
def pre_skip(fmt: str, rate: int) -> int:
    """Samples at `rate` a decoder's output starts with before the stream's own audio:
    the Opus encoder's look-ahead (312 at 48 kHz, 6.5 ms at every rate, so whatever rate
    it encodes at: codec_rate), which a player drops to align exactly (Ogg Opus states it
    as pre-skip); none for PCM."""
    return opuslib.Encoder(rate, 1, opuslib.APPLICATION_AUDIO).lookahead if fmt == "opus" else 0


def codec_rate(fmt: str, source_rate: int, rate: int) -> int:
    """The rate a stream at `rate` is encoded at. An Opus packet decodes at any rate, so
    Opus is encoded at the lowest of its rates that holds the voice's band and divides
    `rate` (24 kHz for a 22,050 Hz voice in a 48 kHz stream): a decoder at `rate` hears
    the same band, and the resampler and encoder have half the samples to work on."""
    if fmt != "opus":
        return rate
    return next((r for r in OPUS_RATES if r >= source_rate and rate % r == 0), rate)


def opus_encoder(rate: int, encoded_at: int, frame_ms: int) -> opuslib.Encoder:
    """An Opus encoder for a stream at `rate` encoded at `encoded_at`, with the effort and
    bitrate an encoder at `rate` would have, so that it decodes as close to the voice as
    that encoder's packets do (`python -m perf.gateway.opus`); at `encoded_at`'s own automatic
    bitrate, about half, it would not."""
    encoder = opuslib.Encoder(encoded_at, 1, opuslib.APPLICATION_AUDIO)
    encoder.complexity = OPUS_COMPLEXITY.get(rate, 10)
    if encoded_at != rate:
        encoder.bitrate = rate + 60_000 // frame_ms  # libopus's automatic bitrate at `rate`
    return encoder


G711_CODECS = {"mulaw": "pcm_mulaw", "alaw": "pcm_alaw"}  # FFmpeg's, through PyAV


def g711_encoder(fmt: str, rate: int) -> av.AudioCodecContext:
    """FFmpeg's G.711 encoder for `fmt`: a byte per sample, a packet per frame given."""
    codec = av.CodecContext.create(G711_CODECS[fmt], "w")
    codec.sample_rate, codec.format, codec.layout = rate, "s16", "mono"
    codec.open()
    return codec


class FrameEncoder:
    """Turns a stream of PCM chunks into equal frames of `frame_ms` at `rate`.

    Resampling is stateful across chunks (no clicks at chunk joins). `finish` drains the
    resampler and pads the last partial frame with silence, so every frame, the last
    included, holds exactly `frame_samples` samples; the encoder then goes on from there
    (a flush mid-stream). Samples are counted at `rate`, whatever rate the codec works
    at (`encoded_at`; codec_rate's unless given, as perf.gateway.opus gives it).
    """

    def __init__(self, source_rate: int, rate: int, frame_ms: int, fmt: str, encoded_at: int | None = None) -> None:
        self.source_rate = source_rate
        self.rate = rate
        self.frame_samples = rate * frame_ms // 1000
        self._codec_rate = encoded_at or codec_rate(fmt, source_rate, rate)
        self._codec_frame = self._codec_rate * frame_ms // 1000
        self._resampler = self._new_resampler()
        self._opus = opus_encoder(rate, self._codec_rate, frame_ms) if fmt == "opus" else None
        self._g711 = g711_encoder(fmt, rate) if fmt in G711_CODECS else None
        self._pending = np.empty(0, dtype=np.float32)
        self.frames = 0  # frames produced so far; frame k starts at sample k · frame_samples
        self.padding = 0  # silence samples the last `finish` added
        self._finished_at = 0  # `samples` at the last finish
        self._pushed = 0  # source samples pushed since then

    @property
    def samples(self) -> int:
        """Samples at `rate` in the frames produced so far."""
        return self.frames * self.frame_samples

    @property
    def position_ms(self) -> float:
        """Where the next PCM pushed will be heard, in ms of the output: everything pushed
        so far counts, including what the resampler still holds."""
        return (self._finished_at + self._pushed * self.rate / self.source_rate) * 1000 / self.rate

    def _new_resampler(self) -> soxr.ResampleStream | None:
        if self.source_rate == self._codec_rate:
            return None
        return soxr.ResampleStream(self.source_rate, self._codec_rate, 1, dtype="float32", quality=RESAMPLE_QUALITY)

    def push(self, pcm: np.ndarray) -> list[bytes]:
        """Payloads of the frames completed by `pcm` (float32 in [-1, 1])."""
        self._pushed += len(pcm)
        return self._frames(self._resample(pcm, last=False))

    def finish(self) -> list[bytes]:
        """Payloads of the remaining frames; the last is padded with silence."""
        payloads = self._frames(self._resample(np.empty(0, np.float32), last=True))
        self._resampler = self._new_resampler()
        self.padding = 0
        if self._pending.size or not payloads:
            missing = self._codec_frame - self._pending.size
            payloads += self._frames(np.zeros(missing, np.float32))
            self.padding = missing * self.rate // self._codec_rate
        self._finished_at, self._pushed = self.samples, 0
        return payloads

    def _resample(self, pcm: np.ndarray, last: bool) -> np.ndarray:
        pcm = np.asarray(pcm, dtype=np.float32)
        if self._resampler is None:
            return pcm
        # soxr keeps buffers as large as the largest chunk it was given, for the stream's
        # life: fed in slices, a stream keeps small ones.
        slices = [pcm[i:i + RESAMPLE_SLICE] for i in range(0, pcm.size, RESAMPLE_SLICE)] or [pcm]
        return np.concatenate([self._resampler.resample_chunk(s, last=last and s is slices[-1]) for s in slices])

    def _frames(self, audio: np.ndarray) -> list[bytes]:
        audio = np.concatenate([self._pending, audio]) if self._pending.size else audio
        whole = audio.size // self._codec_frame * self._codec_frame
        self._pending = audio[whole:].copy()
        # To 16 bits once per chunk: numpy's overhead per call is most of a frame's cost.
        pcm16 = (np.clip(audio[:whole], -1.0, 1.0) * 32767).astype("<i2")
        payloads = [self._encode(frame) for frame in pcm16.reshape(-1, self._codec_frame)]
        self.frames += len(payloads)
        return payloads

    def _encode(self, pcm16: np.ndarray) -> bytes:
        if self._opus is not None:
            return self._opus.encode(pcm16.tobytes(), self._codec_frame)
        if self._g711 is not None:
            samples = av.AudioFrame.from_ndarray(pcm16[None], format="s16", layout="mono")
            samples.sample_rate = self.rate
            return b"".join(bytes(packet) for packet in self._g711.encode(samples))
        return pcm16.tobytes()


OPUS_MAX_FRAME_MS = 120  # the longest an Opus packet can hold (RFC 6716)


class MicrophoneDecoder:
    """A microphone's binary messages, PCM s16le at `rate` (at most `max_ms` a message)
    or one Opus packet each, as the recognizer's `target_rate` int16 PCM. Resampling is
    stateful across messages; Opus is decoded at the target rate directly."""

    def __init__(self, fmt: str, rate: int, target_rate: int, max_ms: int) -> None:
        self.rate = rate
        self.target_rate = target_rate
        self.max_bytes = 2 * rate * max_ms // 1000
        self._opus = opuslib.Decoder(target_rate, 1) if fmt == "opus" else None
        self._resampler = None
        if self._opus is None and rate != target_rate:
            # libswresample (PyAV's), not soxr: it holds back 1-2 ms of the speech's end
            # where soxr holds 6 (LQ) to 66 (HQ), and the recognizer judges whole 32 ms
            # blocks as messages come, so a held millisecond can cost a whole message of
            # the turn's end; its filter still stops what would fold into speech's band
            # (docs/design.md, Audio in).
            self._resampler = av.AudioResampler(format="s16", layout="mono", rate=target_rate)
        self.heard_ms = 0.0  # the input timeline so far

    def decode(self, message: bytes) -> np.ndarray:
        """The message's audio at the target rate; ValueError, saying why, for a message
        that is not what the format promises (nothing of it is kept then)."""
        if self._opus is not None:
            try:
                pcm = self._opus.decode(message, self.target_rate * OPUS_MAX_FRAME_MS // 1000)
            except opuslib.OpusError as e:
                raise ValueError(f"not an Opus packet ({e})") from None
            samples = np.frombuffer(pcm, "<i2")
            self.heard_ms += samples.size * 1000 / self.target_rate
            return samples
        if len(message) % 2 or not message:
            raise ValueError(f"a PCM s16le message holds whole 2-byte samples; this one has {len(message)} bytes")
        if len(message) > self.max_bytes:
            raise ValueError(f"a PCM message of {len(message)} bytes is over {self.max_bytes} "
                             f"({self.max_bytes * 500 // self.rate} ms at {self.rate} Hz)")
        samples = np.frombuffer(message, "<i2")
        self.heard_ms += samples.size * 1000 / self.rate
        return samples if self._resampler is None else self._resample(samples)

    def _resample(self, samples: np.ndarray) -> np.ndarray:
        frame = av.AudioFrame.from_ndarray(samples[None], format="s16", layout="mono")
        frame.sample_rate = self.rate
        out = [resampled.to_ndarray()[0] for resampled in self._resampler.resample(frame)]
        return np.concatenate(out) if out else np.zeros(0, np.int16)
