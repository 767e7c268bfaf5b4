"""Audio comparisons and audio files, shared by the tests."""

import io

import numpy as np


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    """Signal-to-noise ratio of `test` against `reference`, equal lengths required."""
    assert reference.shape == test.shape, (reference.shape, test.shape)
    noise = np.sum((reference.astype(np.float64) - test) ** 2)
    return float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / max(noise, 1e-30)))


# A file of each format the transcription API takes: PyAV's muxer and codec, and the codec's rate.
FILE_FORMATS = {
    "wav": ("wav", "pcm_s16le", None), "mp3": ("mp3", "libmp3lame", 24000), "ogg": ("ogg", "libopus", 48000),
    "flac": ("flac", "flac", None), "webm": ("webm", "libopus", 48000), "m4a": ("ipod", "aac", 24000),
}


def encode_file(pcm: np.ndarray, rate: int, fmt: str) -> bytes:
    """Mono int16 `pcm` at `rate` as a whole file of `fmt` (a FILE_FORMATS key), resampled
    to the codec's rate where it has one."""
    import av  # here: the AR environments that import this module (tests/code2wav_check.py) have no PyAV

    muxer, codec, codec_rate = FILE_FORMATS[fmt]
    out = io.BytesIO()
    with av.open(out, "w", format=muxer) as container:
        stream = container.add_stream(codec, rate=codec_rate or rate, layout="mono")
        resampler = av.AudioResampler(format=stream.codec_context.format.name, layout="mono", rate=codec_rate or rate)
        frame = av.AudioFrame.from_ndarray(np.asarray(pcm, np.int16)[None], format="s16", layout="mono")
        frame.sample_rate = rate
        for piece in (*resampler.resample(frame), *resampler.resample(None), None):
            for packet in stream.encode(piece):
                container.mux(packet)
    return out.getvalue()


def coded_band_hz(packet: bytes) -> int:
    """The audio band an Opus packet codes, from its TOC byte's configuration (RFC 6716,
    3.1): SILK narrow-, medium- and wideband, hybrid super-wide- and fullband, CELT
    narrow-, wide-, super-wide- and fullband."""
    config = packet[0] >> 3
    bands = [4000] * 4 + [6000] * 4 + [8000] * 4 + [12000] * 2 + [20000] * 2
    bands += [4000] * 4 + [8000] * 4 + [12000] * 4 + [20000] * 4
    return bands[config]
