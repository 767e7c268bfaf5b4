"""Streaming containers, sans I/O: bytes come out while frames go in, and decode back."""

import io

import av
import numpy as np
import pytest

from gateway.audio import FrameEncoder
from media.containers import FRAME_FORMATS, ContainerWriter

SOURCE_RATE, FRAME_MS = 22050, 20


def speechlike(seconds: float) -> np.ndarray:
    t = np.arange(int(SOURCE_RATE * seconds)) / SOURCE_RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2).astype(np.float32)


def decode(data: bytes) -> tuple[str, np.ndarray]:
    with av.open(io.BytesIO(data)) as container:
        codec = container.streams.audio[0].codec_context.name
        pcm = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    return codec, pcm


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    """The best normalised correlation of `b` against `a` over shifts of a codec's delay."""
    a = a.astype(np.float64)
    return max(float(np.corrcoef(a[2000:-2000], b.astype(np.float64)[2000 + d : a.size - 2000 + d])[0, 1])
               for d in range(0, 2000, 8) if a.size - 2000 + d <= b.size)


FORMATS = [("pcm", 24000), ("wav", 24000), ("flac", 24000), ("opus", 48000), ("mp3", 24000), ("aac", 24000)]


@pytest.mark.parametrize("fmt,rate", FORMATS)
def test_streamed_container_decodes_to_what_went_in(fmt, rate):
    encoder = FrameEncoder(SOURCE_RATE, rate, FRAME_MS, FRAME_FORMATS[fmt])
    writer = ContainerWriter(fmt, rate, encoder.frame_samples)
    chunks = []
    source = speechlike(2.0)
    for i in range(0, source.size, 2048):
        payloads = encoder.push(source[i : i + 2048])
        first = encoder.samples - len(payloads) * encoder.frame_samples
        for k, payload in enumerate(payloads):
            chunks.append(writer.push(payload, first + k * encoder.frame_samples))
    reference = FrameEncoder(SOURCE_RATE, rate, FRAME_MS, "pcm_s16le")
    pcm_in = np.frombuffer(b"".join(reference.push(source)), "<i2")
    streamed_early = sum(map(len, chunks[: len(chunks) // 2]))
    data = b"".join(chunks) + writer.finish()
    assert streamed_early > 0  # the body streams: half the frames in, bytes are out
    if fmt == "pcm":
        assert np.array_equal(np.frombuffer(data, "<i2"), pcm_in)
        return
    codec, pcm_out = decode(data)
    assert codec == {"wav": "pcm_s16le", "flac": "flac", "opus": "opus", "mp3": "mp3float", "aac": "aac"}[fmt]
    if fmt in ("wav", "flac"):  # lossless
        assert np.array_equal(pcm_out, pcm_in)
    elif fmt == "opus":
        assert abs(pcm_out.size - pcm_in.size) <= encoder.frame_samples
    else:  # the encoders' delay and last frame make the decoded audio up to a few frames longer
        assert 0 <= pcm_out.size - pcm_in.size <= 3000
        assert correlation(pcm_in, pcm_out * 32768) > 0.99


@pytest.mark.parametrize("fmt,encoder_frames", [("opus", 1), ("mp3", 4), ("aac", 5)])
def test_the_first_audio_bytes_come_within_the_codecs_look_ahead(fmt, encoder_frames):
    """Ogg holds a page until it spans a second by default, so an Ogg Opus body started
    a second late; a page per packet lets it start one 20 ms frame in. mp3 and aac
    start once their encoders' look-ahead (about 70 and 100 ms) is in."""
    rate = dict(FORMATS)[fmt]
    encoder = FrameEncoder(SOURCE_RATE, rate, FRAME_MS, FRAME_FORMATS[fmt])
    writer = ContainerWriter(fmt, rate, encoder.frame_samples)
    payloads = encoder.push(speechlike(1.0))
    sizes = [len(writer.push(payload, k * encoder.frame_samples)) for k, payload in enumerate(payloads)]
    first = next(k for k, size in enumerate(sizes) if size > (0 if k else 200))  # Ogg's header pages come at once
    assert first <= encoder_frames
    # And bytes keep coming as frames go in (an aac frame spans 2.1 of ours).
    assert all(any(sizes[k : k + 3]) for k in range(first, len(sizes) - 2))


def test_unknown_container_is_refused():
    with pytest.raises(ValueError):
        ContainerWriter("wma", 24000, 480)
