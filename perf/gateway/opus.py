"""Opus' cost and fidelity by the rate a 48 kHz stream is encoded at, through the
gateway's own encoder settings (gateway.audio), on the embedded voice's speech.

    python -m perf.gateway.opus --rounds 5

The short and paragraph workloads are synthesized whole in process, then for each way
of encoding them: the CPU of resampling and encoding per audio second (the best of
`rounds`, the ways interleaved), the bitrate, and how close a 48 kHz decoder's output
is to the voice: PESQ (ITU-T P.862 wideband, at 16 kHz) and the correlation, aligned by
`ready`'s pre_skip.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace

import numpy as np
import opuslib
import soxr
from pesq import pesq

from gateway.conversation.audio import FrameEncoder, codec_rate, pre_skip

RATE, FRAME_MS = 48000, 20
PESQ_RATE = 16000


@dataclass(frozen=True)
class Way:
    """How a stream is encoded: a stream at `stream_rate`, its codec at `encoded_at`
    (None: where the gateway puts it, gateway.audio.codec_rate)."""

    name: str
    stream_rate: int
    encoded_at: int | None = None


def ways(source_rate: int) -> list[Way]:
    served = codec_rate("opus", source_rate, RATE) // 1000
    return [
        Way("at 48 kHz", RATE, RATE),
        Way(f"at {served} kHz, the 48 kHz stream's bitrate (served)", RATE),
        Way(f"at {served} kHz, as a {served} kHz stream is (its own bitrate and effort)", served * 1000),
    ]


def encode(pcm: np.ndarray, source_rate: int, way: Way) -> tuple[list[bytes], float]:
    """The packets of `pcm` encoded `way` by the gateway's FrameEncoder, fed in chunks
    of vocoder output as the gateway feeds it, and the CPU seconds that took."""
    encoder = FrameEncoder(source_rate, way.stream_rate, FRAME_MS, "opus", way.encoded_at)
    chunk = 256 * 32
    start = time.process_time()
    packets = [p for i in range(0, pcm.size, chunk) for p in encoder.push(pcm[i : i + chunk])] + encoder.finish()
    return packets, time.process_time() - start


def decode(packets: list[bytes]) -> np.ndarray:
    """What a 48 kHz decoder plays, pre_skip dropped."""
    decoder, frame = opuslib.Decoder(RATE, 1), RATE * FRAME_MS // 1000
    pcm = np.frombuffer(b"".join(decoder.decode(p, frame) for p in packets), "<i2").astype(np.float32) / 32767
    return pcm[pre_skip("opus", RATE) :]


def measure(pcm: np.ndarray, source_rate: int, rounds: int) -> list[dict]:
    """A row per way of encoding `pcm` (float32 at `source_rate`)."""
    seconds = pcm.size / source_rate
    reference = soxr.resample(pcm, source_rate, RATE)
    reference16 = soxr.resample(pcm, source_rate, PESQ_RATE)
    cpu: dict[Way, list[float]] = {way: [] for way in ways(source_rate)}
    for _ in range(rounds):  # the ways interleaved, so that the host's speed moves them alike
        for way, times in cpu.items():
            times.append(encode(pcm, source_rate, way)[1])
    rows = []
    for way, times in cpu.items():
        packets = encode(pcm, source_rate, way)[0]
        heard = decode(packets)
        n = min(heard.size, reference.size)
        heard16 = soxr.resample(heard, RATE, PESQ_RATE)[: reference16.size]
        rows.append({
            "way": way.name,
            "cpu_ms_per_audio_s": 1000 * min(times) / seconds,
            "kbps": sum(map(len, packets)) * 8 / seconds / 1000,
            "pesq": float(pesq(PESQ_RATE, reference16[: heard16.size], heard16, "wb")),
            "correlation": float(np.corrcoef(heard[:n], reference[:n])[0, 1]),
        })
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| encoded | CPU ms per audio s | kb/s | PESQ (wb) | correlation |", "|---|---|---|---|---|"]
    lines += [f"| {r['way']} | {r['cpu_ms_per_audio_s']:.2f} | {r['kbps']:.1f} | {r['pesq']:.3f} | "
              f"{r['correlation']:.4f} |" for r in rows]
    return "\n".join(lines)


def speech(workloads: tuple[str, ...] = ("short", "paragraph")) -> tuple[np.ndarray, int]:
    """The workloads in the embedded voice, each sentence whole, the noise seeded so that
    every run measures the same speech; and the voice's rate."""
    from contract.text import split_sentences
    from perf.tools.workloads import workload
    from python_backends.piper.engines import AcousticEngine, VocoderEngine
    from python_backends.piper.voice import load_voice

    voice = load_voice()
    acoustic, vocoder = AcousticEngine(voice), VocoderEngine(voice)
    params = replace(acoustic.default_params(), seed=1)
    sentences = [s for name in workloads for s in split_sentences(workload(name))]
    pcm = np.concatenate([vocoder.vocode(acoustic.latent(s, params).latent[None])[0] for s in sentences])
    return pcm.astype(np.float32), voice.sample_rate


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    pcm, source_rate = speech()
    print(f"{pcm.size / source_rate:.1f} s of the embedded voice at {source_rate} Hz, in a {RATE} Hz Opus stream\n")
    print(table(measure(pcm, source_rate, args.rounds)))


if __name__ == "__main__":
    main()
