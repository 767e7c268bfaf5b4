"""Fixtures the integration tier's modules share."""

import pytest

from client import SyncSpeechClient
from tests.integration.test_speech_http import SEED, TEXT


@pytest.fixture(scope="module")
def spoken_ms(gateway):
    """The text's duration as protocol v1 speaks it with the same seed."""
    with SyncSpeechClient.connect(gateway, format="pcm_s16le", sample_rate=24000, seed=SEED) as ws:
        list(ws.speak(TEXT))
        return ws.done["audio_ms"]
