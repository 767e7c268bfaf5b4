"""Fixtures the integration tier's modules share."""

import pytest

from speechstream.client import SyncSpeechClient
from tests.integration.test_speech_http import SEED, TEXT
from tests.servers import Gateway, Gateways


@pytest.fixture(scope="module")
def spoken_ms(gateway):
    """The text's duration as protocol v1 speaks it with the same seed."""
    with SyncSpeechClient.connect(gateway, format="pcm_s16le", sample_rate=24000, seed=SEED) as ws:
        list(ws.speak(TEXT))
        return ws.done["audio_ms"]


@pytest.fixture(scope="session")
def listen_gateway(triton, tmp_path_factory) -> Gateway:
    """A gateway with listen mode and the transcription API on (`--listen`), in front of
    the session's Triton and its recognizer; no probes, no admission, as `gateway`."""
    with Gateways(tmp_path_factory.mktemp("listen-gateway")) as started:
        yield started.start(triton.grpc_url, "--probe-interval", "0", "--admission-load", "0", "--listen")
