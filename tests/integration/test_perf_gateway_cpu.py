"""perf.gateway.cpu measures a real gateway's CPU over the audio it delivered."""

import pytest

from perf.gateway.cpu import measure
from speechstream import protocol as v1


def test_the_gateways_cpu_is_read_over_whole_paragraphs_of_audio(triton, gateways):
    gateway = gateways.start(triton.grpc_url, "--probe-interval", "0", "--admission-load", "0")
    result = measure(gateway.url, gateway.process.pid, streams=2, seconds=0.5)
    # Each stream spoke the paragraph (about 18 s of audio) to its end, in whole frames.
    frames = result["audio_s"] * 1000 / v1.DEFAULT_FRAME_MS
    assert result["audio_s"] > 2 * 15 and frames == pytest.approx(round(frames))
    assert 0 < result["cpu_s"] and result["ms_per_audio_s"] == pytest.approx(1000 * result["cpu_s"] / result["audio_s"])
