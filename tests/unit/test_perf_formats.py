"""perf.speech.formats finds where the first audio begins in each response format's body."""

import io

import av
import numpy as np
import pytest

from gateway.protocols.speech_api import SpeechBody, SpeechRequest
from perf.speech.formats import FORMATS, audio_offset

SOURCE_RATE = 22050


def body(fmt: str) -> bytes:
    t = np.arange(SOURCE_RATE) / SOURCE_RATE
    pcm = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    speech = SpeechBody(SpeechRequest("Hi.", "v", fmt, 1.0, "audio"), SOURCE_RATE)
    return speech.push(pcm) + speech.finish()


def decoded_samples(data: bytes) -> int:
    try:
        with av.open(io.BytesIO(data)) as container:
            return sum(f.samples for f in container.decode(audio=0))
    except av.error.FFmpegError:
        return 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_nothing_before_the_offset_is_audio_and_the_offset_is_found_once_there(fmt):
    data = body(fmt)
    offset = audio_offset(fmt, data)
    assert offset is not None and 0 < offset <= len(data)
    assert audio_offset(fmt, data[: offset - 1]) is None
    first = data[offset - 1 :]  # the first audio byte on
    if fmt in ("pcm", "aac"):
        assert offset == 1
    if fmt == "aac":
        assert first[0] == 0xFF and first[1] & 0xF0 == 0xF0  # an ADTS frame's sync
    if fmt == "wav":
        assert data[offset - 9 : offset - 5] == b"data"  # right after the data chunk's header
    if fmt == "flac":
        assert first[:2] == b"\xff\xf8"  # a FLAC frame's sync
    if fmt == "mp3":
        assert first[0] == 0xFF and first[1] & 0xE0 == 0xE0  # an MPEG frame's sync
    if fmt == "opus":  # the first page a player can decode audio from
        assert decoded_samples(data[:offset]) > 0 and decoded_samples(data[: offset - 1]) == 0


def test_a_body_of_the_wrong_kind_is_an_error_not_a_time():
    with pytest.raises(ValueError):
        audio_offset("opus", b"RIFF" + bytes(60))
    with pytest.raises(ValueError):
        audio_offset("flac", b"RIFF" + bytes(60))
