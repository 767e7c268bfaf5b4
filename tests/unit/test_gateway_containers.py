"""Streaming containers, sans I/O: bytes come out while frames go in, and decode back;
WAV and FLAC headers, streamed (length unknown) and whole (exact), and what the common
readers (libsndfile through soundfile, Python's wave, FFmpeg through PyAV) make of each."""

import io
import wave

import av
import numpy as np
import pytest
import soundfile

from gateway.conversation.audio import FrameEncoder
from speechstream.media.containers import FRAME_FORMATS, ContainerWriter

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


# What a streamed header says its length is: ffmpeg's "unknown" WAV sizes, FLAC's
# total_samples 0 ("unknown", per the FLAC format).
UNKNOWN_WAV_SIZE, UNKNOWN_FLAC_SAMPLES = 0xFFFFFFFF, 0
WHOLE_SAMPLES = 36_000  # 1.5 s at 24 kHz, whole 20 ms frames


def riff_sizes(data: bytes) -> tuple[int, int, int]:
    """A WAV's RIFF size, its data chunk's size, and where the data chunk's bytes start."""
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    at = 12
    while data[at : at + 4] != b"data":  # fmt, then LIST (the muxer's name), then data
        size = int.from_bytes(data[at + 4 : at + 8], "little")
        at += 8 + size + size % 2
    return int.from_bytes(data[4:8], "little"), int.from_bytes(data[at + 4 : at + 8], "little"), at + 8


def flac_total_samples(data: bytes) -> int:
    """STREAMINFO's total_samples (0: unknown), 36 bits after rate, channels and depth."""
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # the first block is STREAMINFO
    return int.from_bytes(data[8 + 10 : 8 + 18], "big") & ((1 << 36) - 1)


def written(fmt: str, whole: bool) -> bytes:
    """WHOLE_SAMPLES of a tone in 20 ms frames, streamed (bytes as they come) or whole
    (written into a seekable file, whose header the muxer completes at the end)."""
    file = io.BytesIO() if whole else None
    writer = ContainerWriter(fmt, 24000, 480, file)
    tone = (8000 * np.sin(2 * np.pi * 220 * np.arange(WHOLE_SAMPLES) / 24000)).astype("<i2")
    data = b"".join(writer.push(tone[i : i + 480].tobytes(), i) for i in range(0, WHOLE_SAMPLES, 480))
    data += writer.finish()
    return file.getvalue() if whole else data


def decoded_samples(data: bytes) -> int:
    with av.open(io.BytesIO(data)) as container:
        return sum(frame.samples for frame in container.decode(audio=0))


def test_a_streamed_wav_says_its_sizes_are_unknown_and_the_readers_read_it_to_its_end():
    data = written("wav", whole=False)
    riff, size, start = riff_sizes(data)
    assert riff == size == UNKNOWN_WAV_SIZE and len(data) - start == 2 * WHOLE_SAMPLES
    assert soundfile.info(io.BytesIO(data)).frames == WHOLE_SAMPLES  # libsndfile trusts the file's length
    assert len(soundfile.read(io.BytesIO(data), dtype="int16")[0]) == WHOLE_SAMPLES
    assert decoded_samples(data) == WHOLE_SAMPLES
    with wave.open(io.BytesIO(data)) as w:
        # wave believes the header: 2**31 - 1 frames, 89,478 s at 24 kHz; but reads what there is.
        assert w.getnframes() == UNKNOWN_WAV_SIZE // 2
        assert len(w.readframes(w.getnframes())) == 2 * WHOLE_SAMPLES


def test_a_streamed_flac_says_its_length_is_unknown_which_ffmpeg_reads_and_libsndfile_cannot():
    data = written("flac", whole=False)
    assert flac_total_samples(data) == UNKNOWN_FLAC_SAMPLES
    assert decoded_samples(data) == WHOLE_SAMPLES
    # libsndfile takes "unknown" for 2**63 - 1 frames: soundfile.read() cannot allocate
    # them, and reading in blocks fails at the end (docs/http-api.md says so; a whole
    # body is the remedy).
    assert soundfile.info(io.BytesIO(data)).frames == 2**63 - 1
    with pytest.raises(ValueError, match="array is too big"):
        soundfile.read(io.BytesIO(data))
    with pytest.raises(soundfile.LibsndfileError):
        list(soundfile.blocks(io.BytesIO(data), blocksize=4096))


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_a_whole_wav_or_flac_has_exact_sizes_that_every_reader_reads(fmt):
    data = written(fmt, whole=True)
    if fmt == "wav":
        riff, size, start = riff_sizes(data)
        assert (riff, size, len(data) - start) == (len(data) - 8, 2 * WHOLE_SAMPLES, 2 * WHOLE_SAMPLES)
        with wave.open(io.BytesIO(data)) as w:
            assert w.getnframes() == WHOLE_SAMPLES
    else:
        assert flac_total_samples(data) == WHOLE_SAMPLES
    assert soundfile.info(io.BytesIO(data)).frames == WHOLE_SAMPLES
    assert len(soundfile.read(io.BytesIO(data), dtype="int16")[0]) == WHOLE_SAMPLES
    assert decoded_samples(data) == WHOLE_SAMPLES
