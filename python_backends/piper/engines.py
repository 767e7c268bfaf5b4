"""The two synthesis engines on onnxruntime: acoustic (text → latent frames) and
vocoder (latent frames → PCM). No Triton here; the models wrap these."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from contract.models import Phonemes
from contract.text import Sentence, normalize
from python_backends.chunking import flow_pieces
from python_backends.piper import voice as v
from python_backends.piper.inputs import VoiceParams
from python_backends.piper.phonemes import BOS, EOS, PAD, Espeak, phoneme_ids, with_given
from python_backends.piper.pipeline import LatentPiece
from python_backends.piper.timing import stretch_durations, word_timings

# The flow is convolutional: frames computed with this many frames of context on each
# side match the whole sentence's flow, so a sentence's latent can be made in pieces, its
# first frames long before its last. Fewer cost a first sentence's streamed audio its
# fidelity (design.md, "First frames first", has what each measured).
FLOW_CONTEXT = 24

# A head's intra-op threads where its caller finds that many cores idle (the `acoustic`
# model's `head_threads`): a lone stream's first packet waits for its head, which idle
# cores shorten (design.md, "First frames first").
DEFAULT_HEAD_THREADS = 2


def session(
    path, threads: int, optimization: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
) -> ort.InferenceSession:
    """A graph's session as the stages run it; `optimization`, onnxruntime's default, is
    what perf.speech.runtimes varies."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = optimization
    # Spinning helper threads would take the cores from the other stages' calls.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@dataclass(frozen=True)
class SentenceLatent:
    """The acoustic stage's result for one sentence."""

    sentence: Sentence
    durations: np.ndarray  # int32 [ids], frames per id; sums to the frame count
    latent: np.ndarray  # float32 [channels, frames]
    words: list[tuple[str, int, int]]  # (word, start frame, end frame)


@dataclass(frozen=True)
class SentencePrior:
    """A sentence after the prior: its frame count and timing are known; the flow turns
    the prior sample into latent frames, a window at a time (AcousticEngine.flow)."""

    durations: np.ndarray  # int32 [ids], frames per id
    words: list[tuple[str, int, int]]  # (word, start frame, end frame)
    sample: np.ndarray  # float32 [1, channels, frames]
    mask: np.ndarray  # float32 [1, 1, frames]
    speaker: dict[str, np.ndarray]  # the graphs' speaker input; empty for a one-speaker voice

    @property
    def frames(self) -> int:
        return self.sample.shape[2]


@dataclass(frozen=True)
class AcousticGraphs:
    """The acoustic stage's two graphs, on sessions of one intra-op thread count."""

    threads: int
    prior: ort.InferenceSession
    flow: ort.InferenceSession

    @classmethod
    def load(cls, voice: v.Voice, threads: int) -> AcousticGraphs:
        return cls(threads, session(voice.graphs["prior"], threads), session(voice.graphs["flow"], threads))


class AcousticEngine:
    """Text → sentences → phonemes → ids → latent frames, one sentence at a time.

    A sentence's head (its prior and first piece) may run on `head_threads` intra-op
    threads, where its caller found that many cores idle: the prior of a first sentence
    is most of its first packet's compute. Everything else runs on `threads`."""

    def __init__(self, voice: v.Voice, threads: int = 1, head_threads: int | None = None) -> None:
        self.voice = voice
        self._graphs = AcousticGraphs.load(voice, threads)
        wide = head_threads is not None and head_threads != threads
        self._head_graphs = AcousticGraphs.load(voice, head_threads) if wide else self._graphs
        self._espeak = Espeak.shared()
        id_map = voice.phoneme_id_map
        self._separators = {id_map[s][0] for s in (BOS, EOS, " ")}
        self._pad = id_map[PAD][0]

    def default_params(self) -> VoiceParams:
        d = self.voice.inference_defaults
        return VoiceParams(d["length_scale"], d["noise_scale"], d["noise_w"])

    def ids(self, sentence: Sentence, given: Phonemes = ()) -> np.ndarray:
        return np.array(phoneme_ids(self.phonemes(sentence.text, given), self.voice.phoneme_id_map), dtype=np.int64)

    def phonemes(self, text: str, given: Phonemes = ()) -> str:
        """The text's phonemes: espeak-ng's, but for the spans `given` IPA for."""
        return with_given(text, given, lambda part: self._espeak.phonemize(normalize(part), self.voice.espeak_voice))

    def head_graphs(self, threads: int) -> AcousticGraphs:
        """The graphs a head runs on with at most `threads` intra-op threads."""
        return self._head_graphs if self._head_graphs.threads <= threads else self._graphs

    def latent(self, sentence: Sentence, params: VoiceParams) -> SentenceLatent:
        """The latent frames of one sentence, in one piece."""
        prior = self.prior(sentence, params)
        latent = self.flow(prior, 0, prior.frames)
        return SentenceLatent(sentence, prior.durations, latent, prior.words)

    def prior(
        self, sentence: Sentence, params: VoiceParams, phonemes: Phonemes = (), graphs: AcousticGraphs | None = None
    ) -> SentencePrior:
        """Phonemes (IPA `phonemes` for spans of the text), durations and the prior sample
        of one sentence, on `graphs` (the engine's own by default). With a seed, the noise
        depends only on the seed and the sentence's text, so a sentence sounds the same
        whether it came alone or within a longer text."""
        ids = self.ids(sentence, phonemes)
        rng = np.random.default_rng(None if params.seed is None else [params.seed, zlib.crc32(sentence.text.encode())])
        # Piper's durations at the voice's own rate, then stretched to the one asked for.
        own_rate = self.voice.inference_defaults["length_scale"]
        scales = np.array([params.noise_scale, own_rate, params.noise_w], dtype=np.float32)
        speaker = speaker_input(self.voice, [params.speaker])
        means, log_stds, widths = (graphs or self._graphs).prior.run(
            None,
            {
                v.PHONEME_IDS_IN: ids[None, :],
                v.LENGTHS_IN: np.array([ids.size], dtype=np.int64),
                v.SCALES_IN: scales,
                v.DP_NOISE: rng.standard_normal((1, 2, ids.size), dtype=np.float32),
            }
            | speaker,
        )
        durations = stretch_durations(np.ceil(widths[0, 0]).astype(np.int32), params.length_scale / own_rate)
        phoneme_of_frame = np.repeat(np.arange(ids.size), durations)
        mean, std = means[:, :, phoneme_of_frame], np.exp(log_stds[:, :, phoneme_of_frame])
        mask = np.ones((1, 1, phoneme_of_frame.size), dtype=np.float32)
        noise = rng.standard_normal(mean.shape, dtype=np.float32)
        sample = mean + noise * std * np.float32(params.noise_scale)
        words = word_timings(sentence.text, ids, durations, self._separators, self._pad)
        return SentencePrior(durations, words, sample, mask, speaker)

    async def pieces(
        self,
        text: str,
        params: VoiceParams,
        head: int,
        workers: Executor | None = None,
        phonemes: Phonemes = (),
        head_threads: int = 1,
    ) -> AsyncIterator[LatentPiece]:
        """One sentence's latent frames as the acoustic stage sends them: its first `head`
        frames alone where flow_pieces finds that worth it, then the rest; the first piece
        carries the sentence's durations and words. The prior and each piece's flow are
        separate jobs on `workers`, so other requests' jobs interleave with them. The
        prior and the first piece use at most `head_threads` intra-op threads."""
        loop = asyncio.get_running_loop()
        graphs = self.head_graphs(head_threads)
        sentence = Sentence(0, len(text), text)
        prior = await loop.run_in_executor(workers, self.prior, sentence, params, phonemes, graphs)
        for start, end in flow_pieces(prior.frames, head, FLOW_CONTEXT):
            frames = await loop.run_in_executor(workers, self.flow, prior, start, end, graphs if start == 0 else None)
            yield LatentPiece(frames, prior.durations, tuple(prior.words)) if start == 0 else LatentPiece(frames)

    def flow(self, prior: SentencePrior, start: int, end: int, graphs: AcousticGraphs | None = None) -> np.ndarray:
        """Latent frames [start, end) of the sentence, [channels, end - start], computed
        on a window with FLOW_CONTEXT frames more on each side where there are any, on
        `graphs` (the engine's own by default)."""
        lo, hi = max(0, start - FLOW_CONTEXT), min(prior.frames, end + FLOW_CONTEXT)
        (latent,) = (graphs or self._graphs).flow.run(
            None, {v.PRIOR_SAMPLE: prior.sample[:, :, lo:hi], v.FRAME_MASK: prior.mask[:, :, lo:hi]} | prior.speaker
        )
        return latent[0, :, start - lo : end - lo]


class VocoderEngine:
    """Latent frames → PCM, for a batch of equal-length windows."""

    def __init__(self, voice: v.Voice, threads: int = 1) -> None:
        self.voice = voice
        self._decoder = session(voice.graphs["decoder"], threads)

    def vocode(self, latents: np.ndarray, speakers: Sequence[int] | None = None) -> np.ndarray:
        """[batch, channels, frames] float32 → [batch, frames · 256] float32; each row
        as its speaker in `speakers` (all speaker 0 without)."""
        speaker = speaker_input(self.voice, [0] * latents.shape[0] if speakers is None else speakers)
        (audio,) = self._decoder.run(None, {v.LATENT_OUT: np.ascontiguousarray(latents, dtype=np.float32)} | speaker)
        return audio.reshape(latents.shape[0], -1)


def speaker_input(voice: v.Voice, speakers: Sequence[int]) -> dict[str, np.ndarray]:
    """The graphs' speaker input for these batch rows; none for a one-speaker voice."""
    return {v.SPEAKER_IN: np.array(speakers, dtype=np.int64)} if voice.speakers > 1 else {}
