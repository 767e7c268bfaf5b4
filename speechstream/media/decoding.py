"""Audio files in, PCM out, sans I/O: a whole file's bytes (the transcription API's
upload, a file to dictate) decoded by PyAV (FFmpeg) and resampled to mono int16 at the
rate asked.

The file comes from a client, so FFmpeg may use only the demuxers of the audio formats
OpenAI's transcription API takes (WAV, mp3, Ogg, FLAC, WebM/Matroska, MP4/M4A, ADTS
AAC, MPEG) and may open nothing else: a playlist or concat file naming other files or
URLs is refused rather than followed.
"""

from __future__ import annotations

import io
import itertools

import av
import numpy as np

DEMUXERS = "wav,mp3,ogg,flac,matroska,webm,mov,mp4,m4a,aac,mpeg"
# FFmpeg's own options: the demuxers allowed, and no protocol for a file to open others with.
SAFE_OPTIONS = {"format_whitelist": DEMUXERS, "protocol_whitelist": "none"}


class UndecodableAudio(ValueError):
    """The bytes are no audio file of a format served, or its audio cannot be decoded."""


class AudioTooLong(ValueError):
    """The file's audio is longer than the limit; decoding stopped there."""


def decode_audio(data: bytes, rate: int, max_s: float) -> np.ndarray:
    """The first audio stream of the file in `data`, mono int16 at `rate`. Raises
    UndecodableAudio, or AudioTooLong as soon as more than `max_s` seconds are decoded
    (so a long file costs no more than the limit)."""
    limit = int(max_s * rate)
    pieces: list[np.ndarray] = []
    decoded = 0
    try:
        with av.open(io.BytesIO(data), options=SAFE_OPTIONS) as container:
            if not container.streams.audio:
                raise UndecodableAudio("the file holds no audio stream")
            resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
            for frame in itertools.chain(container.decode(container.streams.audio[0]), [None]):  # None: the rest
                for out in resampler.resample(frame):
                    pieces.append(out.to_ndarray()[0])
                    decoded += pieces[-1].size
                if decoded > limit:
                    raise AudioTooLong(f"the audio is longer than {max_s:g} s")
    except av.FFmpegError as e:
        raise UndecodableAudio(f"FFmpeg: {e.strerror or e}") from None
    return np.concatenate(pieces).astype(np.int16) if pieces else np.zeros(0, np.int16)
