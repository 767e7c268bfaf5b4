import av
import numpy as np
import opuslib
import pytest
import soxr

from gateway.conversation.audio import G711_CODECS, RESAMPLE_QUALITY, FrameEncoder, pre_skip
from speechstream import protocol as v1
from tests.audio import coded_band_hz, snr_db

SOURCE = 22050


def tone(seconds, rate=SOURCE):
    """A chirp from 150 to 3,000 Hz with a slow tremolo: speech-like band, no period."""
    t = np.arange(int(seconds * rate)) / rate
    phase = 2 * np.pi * (150 * t + (3000 - 150) / (2 * seconds) * t**2)
    return (0.4 * np.sin(phase) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


def encode(signal, rate, fmt, frame_ms=20, chunk_sizes=(2048, 4096, 333, 16384)):
    enc = FrameEncoder(SOURCE, rate, frame_ms, fmt)
    payloads, i, k = [], 0, 0
    while i < signal.size:
        n = chunk_sizes[k % len(chunk_sizes)]
        payloads += enc.push(signal[i : i + n])
        i, k = i + n, k + 1
    payloads += enc.finish()
    return enc, payloads


@pytest.mark.parametrize("rate", [48000, 24000, 16000])
def test_pcm_frames_equal_whole_signal_resampling(rate):
    signal = tone(1.3)
    enc, payloads = encode(signal, rate, "pcm_s16le")
    frame = rate * 20 // 1000
    assert all(len(p) == frame * 2 for p in payloads)
    streamed = np.concatenate([np.frombuffer(p, "<i2") for p in payloads]).astype(np.float32) / 32767
    whole = soxr.resample(signal, SOURCE, rate, quality=RESAMPLE_QUALITY)
    assert streamed.size - frame < whole.size <= streamed.size
    assert np.max(np.abs(streamed[: whole.size] - whole)) < 1e-3  # no clicks at chunk joins
    best = soxr.resample(signal, SOURCE, rate, quality="VHQ")
    assert snr_db(best, streamed[: best.size]) >= 60  # the quality chosen for its short hold loses nothing heard
    assert not streamed[whole.size :].any()  # the padding is silence
    assert enc.samples == streamed.size and enc.samples - enc.padding == whole.size


@pytest.mark.parametrize("rate", [48000, 24000, 16000])
def test_opus_frames_decode_to_the_signal(rate):
    signal = tone(1.0)
    _, payloads = encode(signal, rate, "opus")
    frame = rate * 20 // 1000
    decoder = opuslib.Decoder(rate, 1)
    decoded = np.concatenate([np.frombuffer(decoder.decode(p, frame), "<i2") for p in payloads]) / 32767
    reference = soxr.resample(signal, SOURCE, rate)
    assert abs(decoded.size - reference.size) <= frame  # duration within one frame
    lag = int(np.argmax(np.correlate(decoded[: rate // 2], reference[: rate // 4], "valid")))
    # what `ready` tells clients to drop, to a sample (the resampler's phase at 24 kHz)
    assert abs(lag - pre_skip("opus", rate)) <= 1 and pre_skip("opus", rate) == round(0.0065 * rate)
    aligned = decoded[lag : lag + reference.size]
    n = min(aligned.size, reference.size)
    assert np.corrcoef(aligned[:n], reference[:n])[0, 1] >= 0.99


@pytest.mark.parametrize("source, band", [(22050, 12000), (44100, 20000)])
def test_a_48_khz_opus_stream_codes_its_voices_band_at_the_48_khz_bitrate(source, band):
    # A 22,050 Hz voice is encoded at 24 kHz (super-wideband, half the samples to code);
    # a voice with more band than 24 kHz holds stays at 48 kHz.
    enc = FrameEncoder(source, 48000, 20, "opus")
    payloads = enc.push(tone(2.0, source)) + enc.finish()
    assert max(coded_band_hz(p) for p in payloads) == band
    assert enc.frame_samples == 960 and enc.samples == len(payloads) * 960
    kbps = sum(map(len, payloads)) * 8 / (len(payloads) * 0.02) / 1000
    assert 45 < kbps < 58  # a 48 kHz encoder's automatic 51 kb/s, not 24 kHz's own 27


def test_pcm_has_no_pre_skip():
    assert pre_skip("pcm_s16le", 48000) == 0


def test_finish_always_yields_a_last_frame():
    enc = FrameEncoder(48000, 48000, 20, "pcm_s16le")
    assert enc.push(np.zeros(960, np.float32)) and enc.frames == 1
    last = enc.finish()
    assert len(last) == 1 and enc.frames == 2


def test_finish_mid_stream_delivers_everything_and_goes_on():
    enc = FrameEncoder(SOURCE, 48000, 20, "pcm_s16le")
    first = enc.push(tone(0.31))
    assert enc.position_ms == pytest.approx(310, abs=0.1)  # what the resampler holds counts
    first += enc.finish()
    assert enc.position_ms * 48 == enc.samples == len(first) * 960
    second = enc.push(tone(0.2)) + enc.finish()
    assert enc.samples == (len(first) + len(second)) * 960
    audio = np.concatenate([np.frombuffer(p, "<i2") for p in first]).astype(np.float32) / 32767
    whole = soxr.resample(tone(0.31), SOURCE, 48000, quality=RESAMPLE_QUALITY)
    assert np.max(np.abs(audio[: whole.size] - whole)) < 1e-3  # nothing of the first part held back


@pytest.mark.parametrize("fmt", v1.TELEPHONY_FORMATS)
def test_telephony_frames_are_g711_bytes_that_decode_to_the_signal_at_8_khz(fmt):
    assert set(G711_CODECS) == set(v1.TELEPHONY_FORMATS)  # an encoder for every format the protocol offers
    signal = tone(1.0)
    enc, payloads = encode(signal, 8000, fmt)
    assert all(len(p) == 160 for p in payloads)  # 20 ms at 8 kHz, a byte per sample
    decoder = av.CodecContext.create(G711_CODECS[fmt], "r")
    decoder.sample_rate, decoder.layout = 8000, "mono"
    decoded = np.concatenate([f.to_ndarray()[0] for p in payloads for f in decoder.decode(av.Packet(p))]) / 32768
    reference = soxr.resample(signal, SOURCE, 8000)
    assert decoded.size == enc.samples and pre_skip(fmt, 8000) == 0
    noise = decoded[: reference.size] - reference
    assert 10 * np.log10(np.sum(reference**2) / np.sum(noise**2)) > 30  # G.711's companding, sample-aligned


@pytest.mark.parametrize("fmt, rate", [("opus", 48000), ("pcm_s16le", 48000), ("pcm_s16le", 24000)])
def test_a_chunk_goes_out_with_all_but_its_last_partial_frame(fmt, rate):
    """The listener gets what `tts` sent but the frame it cannot fill yet: resampling up
    from the voice's rate holds back about 1 ms (the high quality held 19-37 ms of each
    chunk)."""
    enc = FrameEncoder(SOURCE, rate, 20, fmt)
    sent_s = 0.0
    for n in (2048, 2048, 4096, 2048, 2048):  # the first chunks of a stream (8, 8, 16 ... frames)
        sent_s += n / SOURCE
        enc.push(tone(n / SOURCE))
        assert sent_s - enc.samples / rate < 0.020 + 0.003
