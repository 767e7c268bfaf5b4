"""perf.gateway_cpu measures a real gateway's CPU over the audio it delivered."""

import pytest

from contract import protocol as v1
from operations.loopback import start_gateway, stop
from perf.gateway_cpu import measure


def test_the_gateways_cpu_is_read_over_whole_paragraphs_of_audio(triton, tmp_path):
    with (tmp_path / "gateway.log").open("w") as log:
        process, port = start_gateway(triton.grpc_url, log, "--probe-interval", "0", "--admission-load", "0")
        try:
            result = measure(f"ws://127.0.0.1:{port}/v1/stream", process.pid, streams=2, seconds=0.5)
        finally:
            stop(process)
    # Each stream spoke the paragraph (about 18 s of audio) to its end, in whole frames.
    frames = result["audio_s"] * 1000 / v1.DEFAULT_FRAME_MS
    assert result["audio_s"] > 2 * 15 and frames == pytest.approx(round(frames))
    assert 0 < result["cpu_s"] and result["ms_per_audio_s"] == pytest.approx(1000 * result["cpu_s"] / result["audio_s"])
