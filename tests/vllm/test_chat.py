"""Chat mode end to end: a real tritonserver serving the embedded SmolLM2 (the `thinker`
model, llama.cpp on CPU) beside the Piper chain (and the recognizer, which a chat model
brings), and the gateway in front of it, over real WebSockets on loopback; a spoken
conversation through speechstream-listen; and the page, typed to and talked to (its
Chromium's fake microphone says SPOKEN)."""

import asyncio
import re
import subprocess
import sys
import time
import urllib.request
import wave
from collections.abc import Callable

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract import models as c
from operations.loopback import triton_metrics
from speechstream import protocol as v1
from speechstream.client import SpeechClient, connection
from tests.pages import FINISHED, REPORT, fake_microphone, http_of, microphone_browser
from tests.processes import vllm_engines
from tests.recorder import Recorder
from tests.speech import say, silence, spoken, word_error_rate

SYSTEM = "Answer in one or two short sentences."
QUESTION = "What is the capital of France?"
# A question with a long answer: the microphone says it again (the file loops) while the
# answer is still heard, which barges in.
SPOKEN = "Tell me a long story about a dragon."


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """This module's Chromium: its microphone says SPOKEN after 1 s of silence and before
    8 s, looped (every 11 s or so): the repeat must come after the reply's first audio,
    which a loaded host (the whole suite, on two cores) has delayed by over 4 s."""
    wav = fake_microphone(tmp_path_factory.mktemp("microphone") / "spoken.wav", SPOKEN, after_s=8.0)
    with microphone_browser(wav) as b:
        yield b


def chat_rounds(url: str) -> float:
    """The gateway's speculative rounds ended so far (`url`: its WebSocket URL)."""
    with urllib.request.urlopen(url.replace("ws://", "http://").replace("/v1/stream", "/metrics"), timeout=5) as r:
        families = text_string_to_metric_families(r.read().decode())
    return sum(s.value for f in families if f.name == "speechstream_chat_rounds" for s in f.samples if s.name.endswith("_total"))


async def rounds_end(url: str, count: float, timeout_s: float = 120) -> None:
    """Until the gateway has ended `count` speculative rounds."""
    deadline = time.monotonic() + timeout_s
    while await asyncio.to_thread(chat_rounds, url) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the gateway has not ended {count} speculative rounds")
        await asyncio.sleep(0.05)


async def turn(url: str, question: str, speculation: str, word_s: float = 0.15, max_tokens: int = 64,
               settle: bool = False, words_from: int = 1, before_final: Callable[[], object] = lambda: None) -> Recorder:
    """One turn typed a word at a time (a partial transcript at each word's end, from
    word `words_from` on, the whole question the last), then final; returns the
    connection's record once `done`, with what `before_final` said just before the final
    input. With `settle`, each word waits for the round it started to end (the gateway's
    count of rounds), however loaded the machine."""
    async with connection(url) as ws:
        client = Recorder(ws)
        await client.until("ready")
        await client.send(type="config", format="pcm_s16le", chat={
            "speculation": speculation, "system": SYSTEM, "max_tokens": max_tokens})
        await client.until("ready")
        words = question.split()
        ended = settle and await asyncio.to_thread(chat_rounds, url)
        for i in range(words_from, len(words) + 1):
            await client.send(type="user", turn_id="t1", text=" ".join(words[:i]), final=False)
            await asyncio.sleep(word_s)
            if settle:
                await rounds_end(url, ended + i - words_from + 1)
        client.before_final = await asyncio.to_thread(before_final)
        # Nothing of a speculation reaches the client before the final input.
        client.final_at = await client.send(type="user", turn_id="t1", text=question, final=True)
        await client.until("done", "t1", timeout=120)
        return client


def reply_of(client: Recorder) -> str:
    return "".join(m["text"] for m in client.messages("reply_text"))


def test_a_turn_typed_word_by_word_gets_its_reply_text_and_audio_and_nothing_before_the_final_input(chat_gateway):
    client = asyncio.run(turn(chat_gateway, QUESTION, "greedy", word_s=0.4))
    before = [e for e in client.events if e.at < client.final_at and e.kind != "ready"]
    assert before == []
    reply = client.messages("reply")[0]
    assert reply["turn_id"] == "t1" and reply["outcome"] in ("held", "partial", "rejected")
    assert reply["rounds"] >= 1 and reply["accepted_tokens"] <= reply["draft_tokens"]
    assert "Paris" in reply_of(client)
    audio = client.audio("t1")
    assert audio and audio[-1].last
    assert client.messages("done")[0]["audio_ms"] > 500


def test_greedy_speculation_gives_the_reply_decoded_without_it(chat_gateway):
    question = "Can you name three colors of the rainbow?"
    off = asyncio.run(turn(chat_gateway, question, "off"))
    greedy = asyncio.run(turn(chat_gateway, question, "greedy", word_s=0.4))
    assert off.messages("reply")[0]["outcome"] == "off"
    assert greedy.messages("reply")[0]["rounds"] >= 1
    assert reply_of(greedy) == reply_of(off) and reply_of(off)


def test_a_verified_first_sentence_is_heard_from_held_audio(chat_gateway):
    # Each word's round ends before the next word: the last drafts from the whole question, and its first sentence is held.
    client = asyncio.run(turn(chat_gateway, QUESTION, "greedy", settle=True))
    assert client.messages("reply")[0]["outcome"] == "held", client.messages("reply")[0]
    first_audio = client.frames("t1")[0].at - client.final_at
    first_text = next(e for e in client.events if e.kind == "reply_text").at - client.final_at
    assert first_audio <= first_text + 0.1  # the audio was there before the Thinker's second piece


def thinker_counts(port: int) -> tuple[float, float]:
    """The Thinker's drafts verified and tokens written, once its last request has left
    vLLM's batch."""
    deadline = time.monotonic() + 10
    while triton_metrics(port)[c.THINKER_RUNNING_METRIC] and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # its last counts reach Triton's metrics
    metrics = triton_metrics(port)
    return metrics[c.THINKER_VERIFIED_METRIC], metrics[c.THINKER_TOKENS_METRIC]


def test_a_finished_draft_over_the_final_question_is_the_replys_start_without_a_verification(chat_gateway, chat_triton):
    off = asyncio.run(turn(chat_gateway, QUESTION, "off"))
    # Each word's round ends before the next: the last drafts from the whole question, its first sentence held.
    greedy = asyncio.run(turn(chat_gateway, QUESTION, "greedy", settle=True,
                              before_final=lambda: thinker_counts(chat_triton.metrics_port)))
    verified, _ = thinker_counts(chat_triton.metrics_port)
    assert verified == greedy.before_final[0]  # taken whole: no verification after the final input
    reply = greedy.messages("reply")[0]
    assert reply["outcome"] == "held" and reply["accepted_tokens"] == reply["draft_tokens"] > 0, reply
    assert reply_of(greedy) == reply_of(off)


def test_a_round_in_flight_over_the_final_question_becomes_the_reply(chat_gateway, chat_triton):
    question = "Can you name three colors of the rainbow?"
    before = thinker_counts(chat_triton.metrics_port)
    off = asyncio.run(turn(chat_gateway, question, "off"))
    between = thinker_counts(chat_triton.metrics_port)
    # One partial, the whole question, then at once the final: the round it started is in flight.
    greedy = asyncio.run(turn(chat_gateway, question, "greedy", word_s=0, words_from=len(question.split())))
    after = thinker_counts(chat_triton.metrics_port)
    assert after[0] == between[0] == before[0]  # nothing verified
    assert after[1] - between[1] == between[1] - before[1]  # the reply written once, by the round, as off writes it
    assert greedy.messages("reply")[0]["rounds"] == 1
    assert reply_of(greedy) == reply_of(off) and reply_of(off)


def test_a_reply_drawn_with_a_seed_is_the_same_reply_again(chat_gateway):
    async def ask(seed: int) -> str:
        async with connection(chat_gateway) as ws:
            client = Recorder(ws)
            await client.until("ready")
            await client.send(type="config", chat={"speculation": "off", "temperature": 1.0, "seed": seed,
                                                   "max_tokens": 32})
            await client.until("ready")
            await client.send(type="user", turn_id="t1", text="Tell me a story about a dragon.", final=True)
            await client.until("done", "t1", timeout=120)
            return reply_of(client)

    first, again = asyncio.run(ask(7)), asyncio.run(ask(7))
    assert first and first == again


def test_the_thinker_computes_on_llama_cpp_in_its_stub_on_a_cpu(chat_triton):
    """The CPU config's engine: llama.cpp's library loaded in the Thinker's stub, and no vLLM process beside it."""
    stub = chat_triton.stub(c.THINKER_MODEL)
    assert any("libllama" in m.path for m in stub.memory_maps())
    assert vllm_engines(chat_triton, c.THINKER_MODEL) == []


def test_cancel_mid_reply_ends_the_thinkers_reply(chat_gateway, chat_triton):
    async def run():
        async with connection(chat_gateway) as ws:
            client = Recorder(ws)
            await client.until("ready")
            await client.send(type="config", chat={"speculation": "off", "max_tokens": 1024})
            await client.until("ready")
            await client.send(type="user", turn_id="t1", text="Write a long story about a dragon.", final=True)
            while len(client.messages("reply_text")) < 3:
                await asyncio.wait_for(client.read(), 60)
            await client.send(type="cancel", context_id="t1")
            await client.until("cancelled", "t1")

    asyncio.run(run())
    running = c.THINKER_RUNNING_METRIC
    deadline = time.monotonic() + 10
    while triton_metrics(chat_triton.metrics_port)[running] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert triton_metrics(chat_triton.metrics_port)[running] == 0
    tokens = triton_metrics(chat_triton.metrics_port)[c.THINKER_TOKENS_METRIC]
    time.sleep(1.0)
    assert triton_metrics(chat_triton.metrics_port)[c.THINKER_TOKENS_METRIC] == tokens  # nothing more written


def test_the_client_librarys_turn_sends_the_transcript_and_reads_the_reply(chat_gateway):
    async def run():
        async with await SpeechClient.connect(chat_gateway, chat={"speculation": "top_k", "system": SYSTEM}) as client:
            turn = client.turn()
            for partial in ("What is", "What is the capital of", QUESTION):
                await turn.user(partial)
                await asyncio.sleep(0.3)
            await turn.user(QUESTION, final=True)
            return [event async for event in turn.events()], turn.done

    events, done = asyncio.run(run())
    kinds = [e.kind for e in events if e.kind]
    assert kinds[0] == "reply" and "reply_text" in kinds and kinds[-1] == "done"
    assert [e for e in events if e.frame] and done["audio_ms"] > 0


async def spoken_turn(url: str, audio: np.ndarray, speculation: str, barge_in: np.ndarray | None = None) -> Recorder:
    """One question said to a listen-mode connection (`audio` in real time, then silence),
    read until its reply is `done`, or, with `barge_in`, until that speech, said once the
    reply's audio starts, has cancelled it. `said_at`: when the question's last sample went out."""
    async with connection(url) as ws:
        client = Recorder(ws)
        await client.until("ready")
        await client.send(type="config", format="pcm_s16le", listen={},
                          chat={"speculation": speculation, "system": SYSTEM, "max_tokens": 64})
        await client.until("ready")
        quiet = asyncio.Event()
        microphone = asyncio.create_task(say(ws, audio, then_until=quiet))
        if barge_in is None:
            await client.until("done", "turn-1", timeout=120)
        else:
            while not client.frames("turn-1"):
                await client.read()
            quiet.set()
            await microphone
            microphone = asyncio.create_task(say(ws, barge_in))
            await client.until("cancelled", "turn-1", timeout=30)
        quiet.set()
        client.said_at = await microphone
        return client


def test_a_spoken_question_is_answered_after_its_speech_ends_greedy_as_off_would(chat_gateway):
    question = "What is the capital of France?"
    audio = np.concatenate([silence(1000), spoken(question)])
    off = asyncio.run(spoken_turn(chat_gateway, audio, "off"))
    greedy = asyncio.run(spoken_turn(chat_gateway, audio, "greedy"))
    for client in (off, greedy):
        (final,) = [m for m in client.messages("transcript") if m["final"]]
        assert word_error_rate(question, final["text"]) <= 0.1, final
        stopped_at = next(e.at for e in client.events if e.kind == "speech_stopped")
        replied = [e.at for e in client.events if e.context_id == "turn-1" and e.kind in ("reply", "reply_text", "audio_start")
                   or e.frame is not None]
        assert replied and min(replied) > max(client.said_at, stopped_at)  # nothing of the reply before the speech ended
    assert greedy.messages("reply")[0]["outcome"] != "off" and reply_of(greedy) == reply_of(off)


def test_speech_over_a_reply_being_spoken_cancels_it_and_keeps_only_what_was_heard(chat_gateway):
    question = spoken("Tell me a long story about a dragon and a knight.")
    client = asyncio.run(spoken_turn(chat_gateway, np.concatenate([silence(500), question]), "off",
                                     barge_in=np.concatenate([silence(300), spoken("Stop, please."), silence(800)])))
    kinds = [(e.kind, e.context_id) for e in client.events if e.kind in ("speech_started", "cancelled")]
    # The reply's audio may all have been sent (`done`) before the new speech: still
    # playing by the listener's clock, it is cancelled all the same.
    assert kinds[-2:] == [("speech_started", "turn-2"), ("cancelled", "turn-1")]


def test_speechstream_listen_talks_a_spoken_conversation(chat_gateway, tmp_path):
    questions = (QUESTION, "And what is the capital of Spain?")
    files = []
    for i, question in enumerate(questions):
        files.append(tmp_path / f"question-{i}.wav")
        with wave.open(str(files[-1]), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(c.ASR_SAMPLE_RATE)
            w.writeframes(np.concatenate([silence(500), spoken(question)]).tobytes())
    run = subprocess.run([sys.executable, "-m", "speechstream.client.listen", "--chat", *map(str, files), "--out", str(tmp_path),
                          "--system", SYSTEM, "--max-tokens", "40", "--url", chat_gateway],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    you = [line[5:] for line in run.stdout.splitlines() if line.startswith("you: ")]
    bot = [line[5:] for line in run.stdout.splitlines() if line.startswith("bot: ")]
    assert len(you) == len(bot) == 2, run.stdout
    assert all(word_error_rate(question, heard) <= 0.1 for question, heard in zip(questions, you)), you
    latencies = [float(re.search(r"voice to voice (\d+) ms]$", reply).group(1)) for reply in bot]
    assert all(0 < ms < 30_000 for ms in latencies) and all(reply.split("  [")[0] for reply in bot), bot
    for i in (1, 2):
        with wave.open(str(tmp_path / f"reply-{i}.wav")) as w:
            assert w.getframerate() == 24000 and w.getnframes() > 0.3 * 24000


def test_a_server_without_a_chat_model_says_chat_unavailable_and_keeps_the_connection(gateway):
    async def run():
        async with connection(gateway) as ws:
            client = Recorder(ws)
            await client.until("ready")
            await client.send(type="user", turn_id="t1", text="Hello", final=True)
            error = await client.until("error")
            await client.send(type="speak", context_id="c1", text="Still here.")
            await client.until("done", "c1")
            return error

    error = asyncio.run(run())
    assert error["code"] == v1.CHAT_UNAVAILABLE and error["context_id"] == "t1"


def test_the_page_chats_a_question_typed_word_by_word_and_picks_voices(chat_gateway, open_page):
    problems = []
    page = open_page(http_of(chat_gateway) + "/", problems)
    page.wait_for_function("document.querySelectorAll('#voice option').length > 0")
    assert page.eval_on_selector_all("#voice option", "os => os.map(o => o.value)")[0] == "en_US-joe-medium"
    page.check("#chat-mode")
    page.type("#line", QUESTION, delay=60)  # a partial at each space, as a recognizer's
    page.press("#line", "Enter")
    page.wait_for_function(FINISHED, timeout=120_000)
    report = page.evaluate(REPORT)
    assert report["errors"] == [] and problems == []
    assert report["reply"]["outcome"] in ("held", "partial", "rejected") and report["reply"]["rounds"] >= 1
    assert "Paris" in report["replyText"] and page.inner_text("#reply") == report["replyText"]
    assert abs(report["decodedSamples"] * 1000 / 48000 - report["audioMs"]) <= 20
    assert 0 < report["ttfaMs"] and page.inner_text("#outcome").startswith(report["reply"]["outcome"])


def test_the_page_answers_a_question_said_to_its_microphone_and_stops_when_spoken_over(chat_gateway, open_page):
    """Voice chat by voice: Talk in Voice chat streams the microphone; the question is
    heard, answered in words and aloud, and its voice-to-voice time (from the moment the
    page sent the question's last sample to the reply's first audio) shown and reported.
    The microphone says the question again while the long answer plays: the server
    cancels the answer (barge-in) and the page's player is empty at once, before the new
    question's own reply."""
    problems = []
    page = open_page(http_of(chat_gateway) + "/", problems)
    page.check("#chat-mode")
    page.click("#talk")
    answered = "(r => r.turns.some(t => t.voice_to_voice_ms !== null) || r.errors.length)(window.speechstream)"
    page.wait_for_function(answered, timeout=120_000)
    report = page.evaluate(REPORT)
    assert report["errors"] == [] and problems == []
    first = report["turns"][0]
    assert first["final"] and word_error_rate(SPOKEN, first["transcript"]) <= 0.25, first["transcript"]
    assert first["outcome"] in ("held", "partial", "rejected") and first["reply"]
    assert 0 < first["voice_to_voice_ms"] < 60_000
    shown = page.locator(f"#turns li[data-turn='{first['turn_id']}']")
    assert shown.locator(".stats").inner_text() == f"voice-to-voice {first['voice_to_voice_ms']} ms"
    page.wait_for_function("window.speechstream.playedSamples > 0", timeout=10_000)  # the answer is heard

    cut = "(r => r.turns[0].cancelled || r.errors.length)(window.speechstream)"
    page.wait_for_function(cut, timeout=60_000)
    page.wait_for_timeout(300)  # the player's next reports; the new question is still being said
    after = page.evaluate(REPORT)
    assert after["errors"] == [] and problems == []
    assert after["turns"][0]["cancelled"] and len(after["turns"]) >= 2
    assert after["turns"][1]["voice_to_voice_ms"] is None  # its reply has not begun
    assert after["queuedSamples"] == 0 and after["level"] == 0  # nothing more of the answer plays
    assert "cut" in shown.locator(".answer").get_attribute("class")
