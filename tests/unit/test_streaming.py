"""The tts engine (python_backends.piper.pipeline) over scripted in-process stages: no
onnxruntime, no Triton. Each latent frame holds a label, and the scripted vocoder turns
a frame into 256 samples of its label, so the PCM shows which frames were spoken in
which order."""

import asyncio

import numpy as np
import pytest

from contract import models as c
from contract.text import Sentence, split_sentences
from python_backends.chunking import ChunkParams
from python_backends.delivery import AudioChunk, chunk_outputs
from python_backends.piper.pipeline import (
    CHUNK_LOOKAHEAD,
    SECONDS_PER_CHAR,
    SENTENCE_LOOKAHEAD,
    LatentPiece,
    acoustic_outputs,
    latent_sentence,
    sentence_latents,
    speak,
)
from python_backends.scheduler import DeadlineScheduler, PlaybackClock

CHUNKING = ChunkParams(4, 16, 2, 2)


def labels(index: int, frames: int) -> np.ndarray:
    """Sentence `index`'s frames, [2 channels, frames], each frame labelled 1000·index + frame."""
    return np.tile(np.arange(frames, dtype=np.float32) + 1000 * index, (2, 1))


class ScriptedStages:
    """Stages whose acoustic answers for sentence text "s<i>" are `frames[i]` labelled
    frames (the first `head` alone), after `delays[i]` seconds; `failures[i]` raises
    before the first piece or, as ("after", error), after it."""

    def __init__(self, frames, delays=None, failures=None):
        self.frames, self.delays, self.failures = frames, delays or {}, failures or {}
        self.log: list[tuple] = []
        self.threads_asked: list[int] = []  # each acoustic request's head_threads
        self.urgency: list[tuple[str, bool]] = []  # each call's stage and urgency, as asked

    async def acoustic_pieces(self, text, head, phonemes=(), head_threads=1, urgent=False):
        i = int(text[1:])
        self.log.append(("acoustic", i, head))
        self.threads_asked.append(head_threads)
        self.urgency.append(("acoustic", urgent))
        try:
            await asyncio.sleep(self.delays.get(i, 0))
            failure = self.failures.get(i)
            if isinstance(failure, Exception):
                raise failure
            latent, n = labels(i, self.frames[i]), self.frames[i]
            cut = head if 0 < head < n else n
            yield LatentPiece(latent[:, :cut], np.array([n], np.int32), ((text, 0, n),))
            if failure:
                raise failure[1]
            if cut < n:
                await asyncio.sleep(0.01)
                yield LatentPiece(latent[:, cut:])
        finally:
            self.log.append(("acoustic done", i))

    async def vocode(self, window, urgent=False):
        self.log.append(("vocode", window.shape[1]))
        self.urgency.append(("vocode", urgent))
        await asyncio.sleep(0.001)
        return np.repeat(window[0], 256)


def run(stages, count, head=8, cancel_after=None, scheduler=None, clock=None):
    """Synthesize sentences "s0" … "s<count-1>"; (chunks, error or None)."""
    sentences = [Sentence(0, 2, f"s{i}") for i in range(count)]
    chunks = []

    async def main():
        try:
            async for chunk in speak(
                sentences, stages, scheduler=scheduler or DeadlineScheduler(4), chunking=CHUNKING, head=head,
                clock=clock or PlaybackClock(22050), is_cancelled=lambda: len(chunks) >= (cancel_after or float("inf")),
            ):
                chunks.append(chunk)
        except Exception as error:
            return error
        finally:
            await asyncio.sleep(0.1)  # what was asked for runs to its end

    error = asyncio.run(asyncio.wait_for(main(), 10))
    return chunks, error


def test_every_sentence_is_spoken_once_in_order_even_when_later_ones_are_ready_first():
    frames = [30, 5, 50]
    stages = ScriptedStages(frames, delays={0: 0.05, 1: 0.02, 2: 0.0})
    chunks, error = run(stages, 3)
    assert error is None
    spoken = np.concatenate([chunk.pcm for chunk in chunks])[::256]
    assert spoken.tolist() == np.concatenate([labels(i, n)[0] for i, n in enumerate(frames)]).tolist()
    assert [chunk.sentence_index for chunk in chunks] == sorted(chunk.sentence_index for chunk in chunks)
    assert {chunk.sentence_index for chunk in chunks} == {0, 1, 2}
    firsts = [chunk for chunk in chunks if chunk.words]
    starts = [("s0", 0), ("s1", 30 * 256), ("s2", 35 * 256)]
    assert [(chunk.words[0][0], chunk.words[0][1]) for chunk in firsts] == starts


def test_only_the_first_sentence_sends_its_head_alone():
    stages = ScriptedStages([30, 30])
    run(stages, 2, head=12)
    assert [entry for entry in stages.log if entry[0] == "acoustic"] == [("acoustic", 0, 12), ("acoustic", 1, 0)]


def test_the_first_chunk_is_vocoded_from_the_head_before_the_rest_arrives():
    stages = ScriptedStages([60])
    chunks, error = run(stages, 1, head=CHUNKING.initial_frames + 2 * CHUNKING.initial_frames + CHUNKING.right_context)
    assert error is None and chunks[0].pcm.size == 4 * 256
    assert stages.log.index(("vocode", 4 + 2)) < stages.log.index(("acoustic done", 0))


def test_beside_the_first_sentences_flow_only_its_first_window_is_vocoded():
    # Two slots as on two cores: the flow's reading holds one and the first window takes
    # the other. The second window, in from the head too, waits for a slot: borrowing the
    # flow's as well, it would make three calls on two cores and slow the first packet.
    stages, scheduler = ScriptedStages([60]), DeadlineScheduler(2)
    vocoding, peak = [0], [0]

    async def vocode(window, urgent=False):
        flowing = ("acoustic done", 0) not in stages.log
        vocoding[0] += 1
        peak[0] = max(peak[0], vocoding[0] if flowing else 0)
        try:
            await asyncio.sleep(0.004)
            return np.repeat(window[0], 256)
        finally:
            vocoding[0] -= 1

    stages.vocode = vocode
    head = CHUNKING.initial_frames + 2 * CHUNKING.initial_frames + CHUNKING.right_context
    chunks, error = run(stages, 1, head=head, scheduler=scheduler)
    assert error is None and sum(chunk.pcm.size for chunk in chunks) == 60 * 256
    assert peak[0] == 1


@pytest.mark.parametrize("slots", [1, 2, 4])
def test_a_first_sentences_head_asks_for_its_slot_and_the_spare_ones_and_later_sentences_for_one(slots):
    stages = ScriptedStages([20, 20])
    _, error = run(stages, 2, head=8, scheduler=DeadlineScheduler(slots))
    assert error is None and stages.threads_asked == [slots, 1]


def test_a_first_sentence_without_a_head_asks_for_one_thread():
    stages = ScriptedStages([20])
    _, error = run(stages, 1, head=0, scheduler=DeadlineScheduler(2))
    assert error is None and stages.threads_asked == [1]


@pytest.mark.parametrize("grow", [True, False])
def test_the_first_chunk_holds_the_floor_asked_when_it_is_issued_unless_the_chunking_was_the_clients(grow):
    asked = []

    def first_floor():
        asked.append(len(asked))
        return 10

    async def main():
        return [chunk.pcm.size // 256 async for chunk in speak(
            [Sentence(0, 2, "s0")], ScriptedStages([60]), scheduler=DeadlineScheduler(4), chunking=CHUNKING, head=0,
            clock=PlaybackClock(22050), grow=grow, first_floor=first_floor)]

    frames = asyncio.run(main())
    assert sum(frames) == 60
    assert (frames[0], asked) == ((10, [0]) if grow else (CHUNKING.initial_frames, []))  # asked once, for the first


def test_cancelling_stops_issuing_acoustic_and_vocoder_work():
    stages = ScriptedStages([40] * 20)
    chunks, error = run(stages, 20, cancel_after=1)
    assert error is None and len(chunks) <= 1 + CHUNK_LOOKAHEAD
    acoustic = [entry for entry in stages.log if entry[0] == "acoustic"]
    vocode = [entry for entry in stages.log if entry[0] == "vocode"]
    assert len(acoustic) <= 1 + SENTENCE_LOOKAHEAD and len(vocode) <= 1 + CHUNK_LOOKAHEAD
    # Every acoustic request asked for was read to its end.
    assert len([entry for entry in stages.log if entry[0] == "acoustic done"]) == len(acoustic)


def test_a_stage_failing_before_the_first_piece_ends_the_stream_after_the_sentences_before_it():
    stages = ScriptedStages([20, 20, 20], failures={1: c.StageError("acoustic down")})
    chunks, error = run(stages, 3)
    assert isinstance(error, c.StageError) and str(error) == "acoustic down"
    assert chunks and {chunk.sentence_index for chunk in chunks} == {0}


def test_a_stage_failing_after_the_first_piece_ends_the_stream_with_that_error():
    stages = ScriptedStages([60], failures={0: ("after", c.StageError("lost mid-sentence"))})
    chunks, error = run(stages, 1, head=14)
    assert isinstance(error, c.StageError) and str(error) == "lost mid-sentence"
    assert sum(chunk.pcm.size for chunk in chunks) < 60 * 256  # only what the head could speak


def test_a_sentence_without_frames_is_a_stage_error():
    class Silent(ScriptedStages):
        async def acoustic_pieces(self, text, head, phonemes=(), head_threads=1, urgent=False):
            return
            yield

    _, error = run(Silent([]), 1)
    assert isinstance(error, c.StageError) and "no frames" in str(error)


def test_a_vocoder_failure_ends_the_stream_with_that_error():
    class Broken(ScriptedStages):
        async def vocode(self, window, urgent=False):
            raise RuntimeError("vocoder down")

    _, error = run(Broken([20]), 1)
    assert isinstance(error, RuntimeError) and str(error) == "vocoder down"


def test_calls_wait_for_the_shared_schedulers_slots():
    stages, scheduler, peak = ScriptedStages([40] * 4), DeadlineScheduler(1), [0]

    async def vocode(window, urgent=False):
        peak[0] = max(peak[0], scheduler.busy)
        return await ScriptedStages.vocode(stages, window)

    stages.vocode = vocode
    chunks, error = run(stages, 4, scheduler=scheduler)
    assert error is None and chunks and peak[0] == 1 and scheduler.busy == 0


class Recording:
    """A scheduler that runs every call at once and notes its deadline."""

    def __init__(self):
        self.deadlines = []

    async def run(self, deadline, work, borrow=False, urgent=False):
        self.deadlines.append(deadline)
        return await work()

    def spare(self):
        return 0


def test_a_sentence_is_due_after_the_likely_audio_of_the_text_before_it():
    text = "A first sentence of some length. A second one."
    sentences = split_sentences(text)
    clock, scheduler = PlaybackClock(22050, now=lambda: 10.0), Recording()
    clock.start()  # the first audio is out: later sentences may be asked for

    class Stages(ScriptedStages):
        async def acoustic_pieces(self, text, head, phonemes=(), head_threads=1, urgent=False):
            yield LatentPiece(np.zeros((1, 1), np.float32), np.array([1], np.int32))

    async def collect():
        return [s.index async for s in sentence_latents(sentences, Stages([]), scheduler, 0, clock)]

    assert asyncio.run(collect()) == [0, 1]
    first, second = scheduler.deadlines  # both asked for before any audio was planned
    assert second - first == pytest.approx(sentences[1].start * SECONDS_PER_CHAR, abs=1e-3) and second - first > 1


def test_sentences_are_synthesized_in_order_a_bounded_way_ahead():
    sentences = [Sentence(0, 2, f"s{i}") for i in range(6)]
    stages = ScriptedStages([1] * 6, delays={i: 0.01 * (6 - i) for i in range(6)})  # later ones finish first
    taken = []

    async def collect():
        clock = PlaybackClock(22050)
        clock.start()
        latents = sentence_latents(sentences, stages, DeadlineScheduler(8), 0, clock,
                                   is_cancelled=lambda: len(taken) >= 3, depth=2)
        async for s in latents:
            taken.append(s.index)
            assert len([e for e in stages.log if e[0] == "acoustic"]) <= len(taken) + 2

    asyncio.run(collect())
    assert taken == [0, 1, 2, 3, 4][: len(taken)] and len(taken) <= 5
    assert len([e for e in stages.log if e[0] == "acoustic"]) <= 5


def test_no_later_sentence_is_asked_for_before_the_first_audio():
    stages, clock = ScriptedStages([1] * 3), PlaybackClock(22050)

    async def main():
        latents = sentence_latents([Sentence(0, 2, f"s{i}") for i in range(3)], stages, DeadlineScheduler(8), 0, clock)
        first = await anext(latents)
        await asyncio.sleep(0.05)
        asked_before = [e[1] for e in stages.log if e[0] == "acoustic"]
        clock.start()
        rest = [s.index async for s in latents]
        return first.index, asked_before, rest

    assert asyncio.run(main()) == (0, [0], [1, 2])


def read_pieces(pieces, log):
    """latent_sentence over `pieces` (LatentPieces, or an exception to raise), under a
    one-slot scheduler whose slot is watched; (result or error, log)."""

    async def stream():
        for piece in pieces:
            await asyncio.sleep(0.01)
            if isinstance(piece, Exception):
                raise piece
            log.append(("piece", piece.frames.shape[1], scheduler.busy))
            yield piece

    async def main():
        sentence = await latent_sentence(3, lambda _threads, _urgent: stream(), scheduler, 0.0, False)
        log.append(("returned", sentence.latent.filled))
        try:
            frames = await sentence.latent.until(sentence.latent.frames)
        except Exception as error:
            return error
        await asyncio.sleep(0)
        log.append(("slot", scheduler.busy))
        return sentence, frames

    scheduler = DeadlineScheduler(1)
    try:
        return asyncio.run(main()), log
    except Exception as error:
        return error, log


def test_a_sentence_is_returned_at_its_first_piece_and_fills_in_holding_its_slot():
    a, b = np.ones((4, 3), np.float32), 2 * np.ones((4, 5), np.float32)
    first = LatentPiece(a, np.array([8], np.int32), (("hi", 0, 8),))
    (sentence, frames), log = read_pieces([first, LatentPiece(b)], [])
    assert log[:2] == [("piece", 3, 1), ("returned", 3)]  # before the second piece
    assert log[2] == ("piece", 5, 1) and log[-1] == ("slot", 0)  # the slot is held to the last piece
    assert (sentence.index, sentence.words) == (3, (("hi", 0, 8),))
    assert np.array_equal(frames, np.concatenate([a, b], axis=1))


def test_a_sentence_failing_before_or_after_its_first_piece():
    error, _ = read_pieces([RuntimeError("acoustic down")], [])
    assert isinstance(error, RuntimeError) and str(error) == "acoustic down"  # raised to the caller
    first = LatentPiece(np.ones((4, 3), np.float32), np.array([8], np.int32))
    error, log = read_pieces([first, RuntimeError("lost mid-sentence")], [])
    assert ("returned", 3) in log and str(error) == "lost mid-sentence"  # reached the latent's reader
    error, _ = read_pieces([], [])
    assert isinstance(error, c.StageError) and "no frames" in str(error)


def test_chunk_outputs_are_declared_by_both_families_and_carry_words_only_where_a_chunk_has_them():
    pcm = np.zeros(256, np.float32)
    plain = chunk_outputs(AudioChunk(pcm, 1))
    assert set(plain) == {c.PCM, c.SENTENCE_INDEX}
    assert plain[c.SENTENCE_INDEX].dtype == np.int32 and plain[c.SENTENCE_INDEX].tolist() == [1]
    worded = chunk_outputs(AudioChunk(pcm, 0, (("héllo", 0, 256),)))
    assert worded[c.WORDS].tolist() == ["héllo".encode()] and worded[c.WORD_SAMPLES].tolist() == [[0, 256]]
    for model in (c.TTS_MODEL, c.TTS_AR_MODEL):  # one response contract
        declared = {t["name"]: t for t in c.model_outputs(model)}
        assert set(worded) < set(declared)
        assert all(worded[name].ndim == len(declared[name]["dims"]) for name in worded)


def test_acoustic_outputs_declare_every_output_of_acoustic_and_only_those():
    declared = {t["name"]: t for t in c.model_outputs(c.ACOUSTIC_MODEL)}
    first = acoustic_outputs(LatentPiece(np.zeros((4, 3), np.float32), np.array([1, 2], np.int32), (("hi", 0, 3),)))
    later = acoustic_outputs(LatentPiece(np.zeros((4, 5), np.float32)))
    for outputs in (first, later):
        assert set(outputs) == set(declared)
        assert all(outputs[name].ndim == len(declared[name]["dims"]) for name in declared)
    assert first[c.WORDS].tolist() == [b"hi"] and first[c.WORD_FRAMES].tolist() == [[0, 3]]
    assert later[c.DURATIONS].dtype == np.int32 and later[c.DURATIONS].size == 0
    assert later[c.WORD_FRAMES].shape == (0, 2)


def test_a_streams_first_packet_is_asked_for_urgent_and_its_calls_ahead_of_the_listener_are_not():
    stages = ScriptedStages([40, 40])
    clock = PlaybackClock(22050, now=lambda: 0.0)  # time stands still: a call's urgency is its deadline's
    chunks, error = run(stages, 2, clock=clock)
    assert error is None and chunks
    acoustic = [u for stage, u in stages.urgency if stage == "acoustic"]
    vocode = [u for stage, u in stages.urgency if stage == "vocode"]
    assert acoustic == [True, False]  # the first sentence's head is the first packet; the second is due later
    assert vocode[0] and not vocode[-1] and vocode == sorted(vocode, reverse=True)  # later windows are due later


def speak_windows(stages, clock):
    """The chunks of one 64-frame sentence "s0" in 16-frame windows, no head piece, on 4 slots."""

    async def main():
        chunks = speak([Sentence(0, 2, "s0")], stages, scheduler=DeadlineScheduler(4), chunking=ChunkParams(16, 16, 2, 2),
                       head=0, clock=clock)
        return [chunk async for chunk in chunks]

    return asyncio.run(asyncio.wait_for(main(), 10))


def test_a_window_that_waited_for_a_late_first_audio_is_computed_urgent_once_its_listener_needs_it_soon():
    """Issued ahead of the listener, the second window is not urgent; its first packet
    then takes longer than the audio it holds (a busy server), so the listener needs the
    second soon after the first is out: it is computed urgent, not behind the calls due
    later (a start gate holding the first audio waits for it)."""
    now = [0.0]
    clock, asked = PlaybackClock(22050, now=lambda: now[0]), []
    stages = ScriptedStages([64])

    async def vocode(window, urgent=False):
        asked.append(urgent)
        if len(asked) == 1:
            now[0] = 0.2  # the first packet took 0.2 s; its window holds 16 frames, 0.19 s
        return await ScriptedStages.vocode(stages, window, urgent)

    stages.vocode = vocode

    assert len(speak_windows(stages, clock)) == 4
    assert asked == [True, True, False, False]  # the second is due 0.04 s after the first went out


def test_a_streams_later_windows_wait_for_its_first_audio_whatever_slots_are_free():
    """The first packet shares the cores with its sentence's flow alone: a window due
    later waits for the stream's first audio even where a slot is free for it."""
    clock, started = PlaybackClock(22050), []
    stages = ScriptedStages([64])

    async def vocode(window, urgent=False):
        started.append((clock.started is not None, urgent))
        return await ScriptedStages.vocode(stages, window, urgent)

    stages.vocode = vocode

    assert speak_windows(stages, clock)
    assert started[0] == (False, True)  # the first packet
    assert len(started) == 4 and all(sounded for sounded, _ in started[1:])


def test_the_window_after_a_default_first_chunk_is_urgent_and_the_next_is_not():
    """The listener holds the first chunk's 8 frames (93 ms) and the player's lead when
    the first audio goes out: a second window behind the calls in flight would come late."""
    stages = ScriptedStages([64])
    clock = PlaybackClock(22050, now=lambda: 0.0)  # time stands still: a call's urgency is its deadline's

    async def main():
        chunks = speak([Sentence(0, 2, "s0")], stages, scheduler=DeadlineScheduler(4),
                       chunking=ChunkParams(8, 16, 2, 2), head=0, clock=clock, grow=False)
        return [chunk async for chunk in chunks]

    assert len(asyncio.run(asyncio.wait_for(main(), 10))) == 5  # 8, 16, 16, 16 and 8 frames
    assert [u for stage, u in stages.urgency if stage == "vocode"][:3] == [True, True, False]
