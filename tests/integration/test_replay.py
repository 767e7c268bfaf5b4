"""perf/gateway/replay.py, the benchmark's stand-in for Triton (perf/gateway/ceiling.py): what it
records through a gateway from the session's real Triton, it answers again with no
Triton at all, the same audio; a request it never recorded fails with a clear error."""

import asyncio

import pytest

from operations.loopback import free_ports
from perf.gateway.ceiling import GATEWAY_FLAGS, replay
from speechstream.client import SpeechClient, SpeechError
from tests.servers import Gateways

TEXT = "Recorded once. Answered again at once."


async def spoken(url: str, text: str) -> tuple[bytes, dict]:
    async with await SpeechClient.connect(url, format="pcm_s16le", sample_rate=24000, seed=7) as client:
        pcm = b"".join([frame.payload async for frame in client.speak(text)])
        return pcm, client.ready


def test_what_is_recorded_through_a_gateway_is_answered_again_without_triton(triton, tmp_path):
    file = tmp_path / "recording.json"
    recording_port, replay_port = free_ports(2)
    with replay(recording_port, file, tmp_path / "replay.log", triton.grpc_url), Gateways(tmp_path) as gateways:
        recorded, _ = asyncio.run(spoken(gateways.start(f"127.0.0.1:{recording_port}", *GATEWAY_FLAGS).url, TEXT))
    assert recorded and file.exists()
    with replay(replay_port, file, tmp_path / "replay.log"), Gateways(tmp_path) as gateways:
        url = gateways.start(f"127.0.0.1:{replay_port}", *GATEWAY_FLAGS, name="replayed").url
        replayed, _ = asyncio.run(spoken(url, TEXT))
        with pytest.raises(SpeechError, match="no response recorded"):
            asyncio.run(spoken(url, "Never said before."))
    assert replayed == recorded
