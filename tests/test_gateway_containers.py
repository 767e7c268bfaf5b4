"""Streaming containers, sans I/O: bytes come out while frames go in, and decode back."""

import io

import av
import numpy as np
import pytest

from gateway.audio import FrameEncoder
from gateway.containers import FRAME_FORMATS, ContainerWriter

SOURCE_RATE, FRAME_MS = 22050, 20


def speechlike(seconds: float) -> np.ndarray:
    t = np.arange(int(SOURCE_RATE * seconds)) / SOURCE_RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2).astype(np.float32)


def decode(data: bytes) -> tuple[str, np.ndarray]:
    with av.open(io.BytesIO(data)) as container:
        codec = container.streams.audio[0].codec_context.name
        pcm = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    return codec, pcm


@pytest.mark.parametrize("fmt,rate", [("pcm", 24000), ("wav", 24000), ("flac", 24000), ("opus", 48000)])
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
    assert codec == {"wav": "pcm_s16le", "flac": "flac", "opus": "opus"}[fmt]
    if fmt in ("wav", "flac"):  # lossless
        assert np.array_equal(pcm_out, pcm_in)
    else:
        assert abs(pcm_out.size - pcm_in.size) <= encoder.frame_samples


def test_unknown_container_is_refused():
    with pytest.raises(ValueError):
        ContainerWriter("mp3", 24000, 480)
