"""The voice chat heard end to end: a spoken question → the recognizer → the chat model
→ the spoken reply, with input-time speculation off, greedy and top-3.

    python -m perf.voice.end_to_end [--questions 12] [--listeners 1,2,4,8] [--realtime] [--peer] [--out DIR]

Real users' opening questions (the chitchat-dataset's prompts) are spoken by the
embedded voice and streamed up a protocol-v1 connection in listen and chat mode as a
microphone would send them: 20 ms messages in real time, a second of silence before the
question and silence after it until the reply has been spoken. Each question is asked
once per mode, the modes in turn (interleaved, so the machine's drift falls on all
alike), each on a connection of its own to one server (Triton with the recognizer, the
embedded SmolLM2 and the Piper chain; the gateway in front). Per mode it reports the
voice-to-voice latency (the last sample of speech sent → the first audio of the reply
received: median, p90, and the median's ratio to off), the end of speech → the final
transcript, the word error rate of the finals, the partials' cadence, the outcomes and
what speculation costs beside off on the same question. Then --listeners dictation
streams at once (no chat), to find how many the recognizer keeps in real time here, and
its CPU per audio second. With --peer, each question is then asked of a Pipecat pipeline of
the same models on the same machine (perf.voice.peer, in .venv-peer: `scripts/setup.sh
--peer`), fed the same audio the same way, and its voice-to-voice latency, end of speech →
final and word error rate are reported beside each mode's, with its median's ratio to theirs.
With --realtime, each question is also asked over OpenAI's Realtime API (/v1/realtime,
24 kHz PCM appends, the same system prompt, reply length and turn detection) in the modes'
rotation (the same audio, taken to 24 kHz), and its voice-to-voice median is set beside
protocol v1's greedy (the speculation the Realtime session runs). A table, the JSON and a plot in --out.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soxr
import websockets

from contract import models as c
from gateway.conversation import repetition
from operations.loopback import Servers, cpu_seconds, triton_metrics
from operations.process_tree import stub_of
from perf.tools.results import save
from perf.voice.chat import MODES, SYSTEM, beside_off, gateway_counter, p90, question_options, questions
from speechstream import protocol as v1
from tests.speech import silence, spoken, word_error_rate

MESSAGE_MS = 20  # a microphone's message, as browsers' audio callbacks send them
REALTIME_RATE = 24000  # the Realtime API's audio/pcm
SENTENCE_END = re.compile(r"[.!?…]+(\s+|$)")
LEAD_IN_MS = 1000
ENDPOINT_MS = 500
GOALS = {"greedy_ratio": 0.5, "word_error_rate": 0.10, "partial_gap_s": 0.5}
# A dictation stream is kept in real time when its final comes within this of the endpoint.
REAL_TIME_MARGIN_S = 0.5
ROOT = Path(__file__).resolve().parents[2]
PEER_PYTHON = ROOT / os.environ.get("PEER_VENV", ".venv-peer") / "bin" / "python"


@dataclass
class Heard:
    """What one connection heard back, each event with its arrival time (perf_counter)."""

    speech_end_at: float = 0.0  # when the message holding the question's last sample was sent
    started_at: float | None = None
    partials: list[tuple[float, str]] = field(default_factory=list)
    final: tuple[float, str] | None = None
    reply: dict | None = None
    reply_at: float | None = None
    reply_text: str = ""
    first_audio_at: float | None = None
    done: dict | None = None


async def stream_microphone(ws, audio: np.ndarray, speech: slice, heard: Heard, until: asyncio.Event) -> None:
    """Send `audio` in real time, then silence until `until` is set; note when the last
    sample of `speech` went out."""
    step = c.ASR_SAMPLE_RATE * MESSAGE_MS // 1000
    start = time.perf_counter()
    sent = 0
    while not until.is_set():
        chunk = audio[sent:sent + step] if sent < audio.size else np.zeros(step, np.int16)
        await asyncio.sleep(max(0.0, start + sent / c.ASR_SAMPLE_RATE - time.perf_counter()))
        await ws.send(chunk.tobytes())
        if sent < speech.stop <= sent + step:
            heard.speech_end_at = time.perf_counter()
        sent += step


async def converse(url: str, config: dict, audio: np.ndarray, speech: slice, chat: bool, timeout_s: float) -> Heard:
    """One spoken turn on a connection of its own: what came back, and when."""
    heard, until = Heard(), asyncio.Event()
    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "config", **config}))
        json.loads(await ws.recv())  # ready
        microphone = asyncio.create_task(stream_microphone(ws, audio, speech, heard, until))
        try:
            async with asyncio.timeout(timeout_s):
                while not (heard.done if chat else heard.final):
                    take(await ws.recv(), heard)
        finally:
            until.set()
            with contextlib.suppress(asyncio.CancelledError, websockets.ConnectionClosed):
                await microphone
    return heard


def take(message: str | bytes, heard: Heard) -> None:
    now = time.perf_counter()
    if isinstance(message, bytes):
        heard.first_audio_at = heard.first_audio_at or now
        return
    event = json.loads(message)
    kind = event["type"]
    if kind == "error":
        raise RuntimeError(f"the server said {event}")
    if kind == "speech_started":
        heard.started_at = heard.started_at or now
    elif kind == "transcript" and event["final"]:
        heard.final = (now, event["text"])
    elif kind == "transcript":
        heard.partials.append((now, event["text"]))
    elif kind == "reply":
        heard.reply, heard.reply_at = event, now
    elif kind == "reply_text":
        heard.reply_text += event["text"]
    elif kind == "done":
        heard.done = event


def question_audio(question: str) -> tuple[np.ndarray, slice]:
    speech = spoken(question)
    lead = silence(LEAD_IN_MS)
    return np.concatenate([lead, speech]), slice(lead.size, lead.size + speech.size)


def partial_gap_s(heard: Heard) -> float:
    """The longest wait for a partial while the question was spoken."""
    marks = [heard.started_at or heard.speech_end_at] + [t for t, _ in heard.partials if t <= heard.speech_end_at]
    return max(b - a for a, b in zip(marks, marks[1:] + [heard.speech_end_at]))


def spoken_turn(url: str, question: str, mode: str, top_k: int, max_tokens: int, listen: dict) -> dict:
    audio, speech = question_audio(question)
    chat = {"speculation": mode, "top_k": top_k, "system": SYSTEM, "max_tokens": max_tokens}
    config = {"format": "pcm_s16le", "listen": listen, "chat": chat}
    heard = asyncio.run(converse(url, config, audio, speech, chat=True, timeout_s=180))
    return {
        "mode": mode, "question": question, "transcript": heard.final[1],
        "voice_to_voice_s": heard.first_audio_at - heard.speech_end_at,
        "final_after_speech_s": heard.final[0] - heard.speech_end_at,
        "decided_after_final_s": heard.reply_at - heard.final[0],  # the reply's first piece, or a draft taken whole
        "audio_after_final_s": heard.first_audio_at - heard.final[0],
        "word_error_rate": word_error_rate(question, heard.final[1]),
        "partial_gap_s": partial_gap_s(heard), "partials": len(heard.partials),
        **{k: heard.reply[k] for k in ("outcome", "rounds", "draft_tokens", "accepted_tokens")},
        "reply": heard.reply_text, "audio_ms": heard.done["audio_ms"],
    }


async def realtime_converse(url: str, session: dict, audio: np.ndarray, speech: slice, timeout_s: float) -> Heard:
    """One spoken turn over OpenAI's Realtime API on a connection of its own (24 kHz PCM in
    20 ms appends, in real time, as `stream_microphone` sends v1's): what came back, and when."""
    heard, until, step = Heard(), asyncio.Event(), REALTIME_RATE * MESSAGE_MS // 1000

    async def microphone(ws) -> None:
        start, sent = time.perf_counter(), 0
        while not until.is_set():
            chunk = audio[sent:sent + step] if sent < audio.size else np.zeros(step, np.int16)
            await asyncio.sleep(max(0.0, start + sent / REALTIME_RATE - time.perf_counter()))
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()}))
            if sent < speech.stop <= sent + step:
                heard.speech_end_at = time.perf_counter()
            sent += step

    async with websockets.connect(url, max_size=None) as ws:
        json.loads(await ws.recv())  # session.created
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        json.loads(await ws.recv())  # session.updated
        sending = asyncio.create_task(microphone(ws))
        try:
            async with asyncio.timeout(timeout_s):
                while heard.done is None:
                    take_realtime(json.loads(await ws.recv()), heard)
        finally:
            until.set()
            with contextlib.suppress(asyncio.CancelledError, websockets.ConnectionClosed):
                await sending
    return heard


def take_realtime(event: dict, heard: Heard) -> None:
    now, kind = time.perf_counter(), event["type"]
    if kind == "error":
        raise RuntimeError(f"the server said {event}")
    if kind == "input_audio_buffer.speech_started":
        heard.started_at = heard.started_at or now
    elif kind == "conversation.item.input_audio_transcription.completed":
        heard.final = (now, event["transcript"])
    elif kind == "response.created":
        heard.reply_at = now
    elif kind == "response.output_audio.delta":
        heard.first_audio_at = heard.first_audio_at or now
    elif kind == "response.output_audio_transcript.delta":
        heard.reply_text += event["delta"]
    elif kind == "response.done":
        heard.done = event


def realtime_turn(url: str, question: str, max_tokens: int, listen: dict) -> dict:
    """A question asked over /v1/realtime with the settings of protocol v1's greedy turn:
    the server's speculation (greedy), the same system prompt, reply length and turn
    detection, and the same audio (v1's, taken to 24 kHz: the gateway takes it back to the
    recognizer's rate, so both are heard alike to a sample)."""
    audio, speech = question_audio(question)
    ratio = REALTIME_RATE / c.ASR_SAMPLE_RATE
    audio = (np.clip(soxr.resample(audio.astype(np.float32) / 32768, c.ASR_SAMPLE_RATE, REALTIME_RATE), -1, 1)
             * 32767).astype(np.int16)
    detection = ({"type": "semantic_vad", "eagerness": "high"} if listen["turn_detection"] == "smart"
                 else {"type": "server_vad", "silence_duration_ms": listen["endpoint_ms"]})
    session = {"type": "realtime", "instructions": SYSTEM, "max_output_tokens": max_tokens, "audio": {
        "input": {"transcription": {"model": "whisper-1"}, "turn_detection": detection}}}
    heard = asyncio.run(realtime_converse(url.replace(v1.PROTOCOL_PATH, "/v1/realtime"), session, audio,
                                          slice(round(speech.start * ratio), round(speech.stop * ratio)),
                                          timeout_s=180))
    turn = {"mode": "realtime", "question": question, "transcript": heard.final[1],
            "voice_to_voice_s": heard.first_audio_at - heard.speech_end_at,
            "final_after_speech_s": heard.final[0] - heard.speech_end_at,
            "audio_after_final_s": heard.first_audio_at - heard.final[0],
            "word_error_rate": word_error_rate(question, heard.final[1]), "reply": heard.reply_text}
    print(f"realtime {turn['voice_to_voice_s'] * 1000:4.0f} ms voice to voice, final "
          f"{turn['final_after_speech_s'] * 1000:4.0f} ms after speech, WER {turn['word_error_rate']:.2f} "
          f"(/v1/realtime) {question!r} → {turn['transcript']!r}", flush=True)
    return turn


def beside_greedy(turns: list[dict], realtime_turns: list[dict]) -> dict:
    """The Realtime API's figures, and its voice-to-voice median ÷ protocol v1's greedy."""
    waits = [t["voice_to_voice_s"] for t in realtime_turns]
    greedy = statistics.median(t["voice_to_voice_s"] for t in turns if t["mode"] == "greedy")
    return {"turns": len(waits), "voice_to_voice_median_s": statistics.median(waits),
            "voice_to_voice_p90_s": p90(waits), "ratio_to_greedy": statistics.median(waits) / greedy,
            "final_after_speech_median_s": statistics.median(t["final_after_speech_s"] for t in realtime_turns),
            "audio_after_final_median_s": statistics.median(t["audio_after_final_s"] for t in realtime_turns),
            "word_error_rate": statistics.mean(t["word_error_rate"] for t in realtime_turns)}


class Peer:
    """perf.voice.peer in its own environment, started once (its models and llama.cpp's server
    load before any question is timed): a question's audio in on stdin, what came of it out."""

    def __init__(self, max_tokens: int) -> None:
        if not PEER_PYTHON.exists():
            raise SystemExit(f"{PEER_PYTHON} is missing: run `scripts/setup.sh --peer`")
        self.process = subprocess.Popen(
            [str(PEER_PYTHON), "-m", "perf.voice.peer", "--system", SYSTEM, "--max-tokens", str(max_tokens)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self.answer()
        cores = len(os.sched_getaffinity(0))
        if tuple(self.ready["threads"]) != (max(1, cores - 1), cores):  # the Thinker's (llama_engine)
            raise RuntimeError(f"the peer's llama.cpp threads {self.ready['threads']} are not the Thinker's")

    def answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"perf.voice.peer exited ({self.process.wait()}); its errors are above")
        return json.loads(line)

    def ask(self, question: str) -> dict:
        audio, speech = question_audio(question)
        self.process.stdin.write(json.dumps({"question": question, "pcm": base64.b64encode(audio.tobytes()).decode(),
                                             "rate": c.ASR_SAMPLE_RATE, "speech_end": speech.stop}) + "\n")
        self.process.stdin.flush()
        return self.answer()

    def stop(self) -> None:
        """End of its input: it ends its pipeline and stops its server."""
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            self.process.wait(30)


def peer_turn(peer: Peer, question: str) -> dict:
    heard = peer.ask(question)
    if "error" in heard:
        print(f"peer   failed: {heard['error'][:300]}", flush=True)
        return {"mode": "peer", "question": question, "error": heard["error"]}
    turn = {
        "mode": "peer", "question": question, "transcript": heard["transcript"],
        "voice_to_voice_s": heard["voice_to_voice_s"], "final_after_speech_s": heard["final_after_speech_s"],
        "decided_after_final_s": heard["reply_after_speech_s"] - heard["final_after_speech_s"],  # the LLM's first text
        "audio_after_final_s": heard["voice_to_voice_s"] - heard["final_after_speech_s"],
        "word_error_rate": word_error_rate(question, heard["transcript"]), "reply": heard["reply"],
        # its turn's end (VAD + Smart Turn + the transcript), and the turns it ended inside the question
        "turn_ended_after_speech_s": heard["turn_ended_after_speech_s"], "turns_ended_early": heard["turns_ended_early"],
        "segments": heard["segments"],
    }
    print(f"peer   {turn['voice_to_voice_s'] * 1000:6.0f} ms voice to voice, final "
          f"{turn['final_after_speech_s'] * 1000:4.0f} ms after speech, WER {turn['word_error_rate']:.2f} "
          f"(Pipecat) {question!r} → {turn['transcript']!r}", flush=True)
    return turn


def chat_turns(servers: Servers, n: int, top_k: int, max_tokens: int, listen: dict, peer: Peer | None = None,
               realtime: bool = False) -> tuple[list[dict], list[dict], list[dict]]:
    """Each question in each mode, the modes in turn (with `realtime`, over the Realtime API
    too, in the same rotation), then (with `peer`) of the peer: ours, the Realtime API's, and
    the peer's."""
    turns, realtime_turns, peer_turns = [], [], []
    spoken_turn(servers.url, "Hello, are you there?", "greedy", top_k, max_tokens, listen)  # warm-up
    if realtime:
        realtime_turn(servers.url, "Hello, are you there?", max_tokens, listen)
    if peer:
        peer.ask("Hello, are you there?")
    modes = MODES + (("realtime",) if realtime else ())
    for i, question in enumerate(questions(n)):
        for mode in modes[i % len(modes):] + modes[:i % len(modes)]:
            if mode == "realtime":
                realtime_turns.append(realtime_turn(servers.url, question, max_tokens, listen))
                continue
            tokens = triton_metrics(servers.metrics_port)[c.THINKER_TOKENS_METRIC]
            held = gateway_counter(servers.port, "speechstream_chat_held_audio_seconds_total", 'fate="discarded"')
            turn = spoken_turn(servers.url, question, mode, top_k, max_tokens, listen)
            time.sleep(0.5)  # the Thinker's last counts reach Triton's metrics
            turn["llm_tokens"] = triton_metrics(servers.metrics_port)[c.THINKER_TOKENS_METRIC] - tokens
            turn["held_discarded_s"] = gateway_counter(
                servers.port, "speechstream_chat_held_audio_seconds_total", 'fate="discarded"') - held
            turns.append(turn)
            print(f"{mode:6} {turn['voice_to_voice_s'] * 1000:6.0f} ms voice to voice, final "
                  f"{turn['final_after_speech_s'] * 1000:4.0f} ms after speech, WER {turn['word_error_rate']:.2f} "
                  f"{turn['outcome']:8} {question!r} → {turn['transcript']!r}", flush=True)
        if peer:
            peer_turns.append(peer_turn(peer, question))
    return turns, realtime_turns, peer_turns


async def dictate_together(url: str, audios: list[tuple[np.ndarray, slice]], listen: dict) -> list[Heard]:
    config = {"format": "pcm_s16le", "listen": listen}
    return await asyncio.gather(*(converse(url, config, a, s, chat=False, timeout_s=60) for a, s in audios))


def listeners(servers: Servers, counts: list[int], texts: list[str], listen: dict) -> list[dict]:
    """Dictation streams at once, `count` of them: the recognizer's real-time limit here."""
    audios = [question_audio(t) for t in texts]
    rows = []
    for count in counts:
        asr = stub_of(servers.triton_tree(), c.ASR_MODEL)
        cpu = cpu_seconds([asr])
        streams = [audios[i % len(audios)] for i in range(count)]
        heard = asyncio.run(dictate_together(servers.url, streams, listen))
        audio_s = sum(a.size for a, _ in streams) / c.ASR_SAMPLE_RATE
        lags = [h.final[0] - h.speech_end_at for h in heard]
        rows.append({
            "listeners": count, "final_after_speech_median_s": statistics.median(lags), "final_after_speech_max_s": max(lags),
            "partial_gap_max_s": max(partial_gap_s(h) for h in heard),
            "word_error_rate": statistics.mean(word_error_rate(texts[i % len(texts)], h.final[1])
                                               for i, h in enumerate(heard)),
            "cpu_per_audio_s": (cpu_seconds([asr]) - cpu) / audio_s,
            "real_time": max(lags) <= ENDPOINT_MS / 1000 + REAL_TIME_MARGIN_S,
            "transcripts": [h.final[1] for h in heard],
        })
        print(f"{count:2} listeners: final {rows[-1]['final_after_speech_median_s'] * 1000:.0f} ms after speech "
              f"(max {max(lags) * 1000:.0f}), longest partial gap {rows[-1]['partial_gap_max_s'] * 1000:.0f} ms, "
              f"recognizer CPU {rows[-1]['cpu_per_audio_s']:.3f} s per audio s", flush=True)
    return rows


def reply_quality(replies: list[str]) -> dict:
    """What a listener accepts of a small model's spoken replies: how many loop (say four
    words in a row again, gateway/conversation/repetition.py's rule), how many leave English
    (any letter outside ASCII: a rough test, blind to French without accents), and how long
    they are."""
    def loops(reply: str) -> bool:
        said = repetition.words(reply)
        runs = [tuple(said[i:i + repetition.REPEATED_WORDS]) for i in range(len(said) - repetition.REPEATED_WORDS + 1)]
        return len(runs) != len(set(runs))

    return {"replies_looping": sum(map(loops, replies)),
            "replies_leaving_english": sum(any(ch.isalpha() and not ch.isascii() for ch in r) for r in replies),
            "reply_words_median": statistics.median(len(r.split()) for r in replies),
            "reply_sentences_median": statistics.median(len(SENTENCE_END.findall(r)) for r in replies)}


def summarize(turns: list[dict]) -> dict:
    off = {t["question"]: t for t in turns if t["mode"] == "off"}
    base = statistics.median(t["voice_to_voice_s"] for t in off.values())
    summary = {}
    for mode in MODES:
        mine = [t for t in turns if t["mode"] == mode]
        waits = [t["voice_to_voice_s"] for t in mine]
        summary[mode] = {
            "turns": len(mine), "voice_to_voice_median_s": statistics.median(waits),
            "voice_to_voice_p90_s": p90(waits), "ratio_to_off": statistics.median(waits) / base,
            "final_after_speech_median_s": statistics.median(t["final_after_speech_s"] for t in mine),
            "decided_after_final_median_s": statistics.median(t["decided_after_final_s"] for t in mine),
            "audio_after_final_median_s": statistics.median(t["audio_after_final_s"] for t in mine),
            "word_error_rate": statistics.mean(t["word_error_rate"] for t in mine),
            "partial_gap_max_s": max(t["partial_gap_s"] for t in mine),
            **reply_quality([t["reply"] for t in mine]),
            **beside_off(mine, off),
        }
    return summary


def beside_peer(turns: list[dict], peer_turns: list[dict]) -> dict:
    """The peer's figures, and its voice-to-voice median ÷ each mode's."""
    heard = [t for t in peer_turns if "error" not in t]
    waits = [t["voice_to_voice_s"] for t in heard]
    median = statistics.median(waits)
    return {
        "turns": len(heard), "failed": len(peer_turns) - len(heard),
        "cut_at_a_pause": sum(t["turns_ended_early"] > 0 for t in heard),
        "voice_to_voice_median_s": median, "voice_to_voice_p90_s": p90(waits),
        "final_after_speech_median_s": statistics.median(t["final_after_speech_s"] for t in heard),
        "decided_after_final_median_s": statistics.median(t["decided_after_final_s"] for t in heard),
        "audio_after_final_median_s": statistics.median(t["audio_after_final_s"] for t in heard),
        "word_error_rate": statistics.mean(t["word_error_rate"] for t in heard),
        "ratio_to": {mode: median / statistics.median(t["voice_to_voice_s"] for t in turns if t["mode"] == mode)
                     for mode in MODES},
    }


def peer_table(results: dict) -> list[str]:
    """Ours and the peer's, side by side on the same questions."""
    s, peer = results["summary"], results["peer"]
    failed = f", {peer['failed']} of them without a reply" if peer["failed"] else ""
    failed += f", {peer['cut_at_a_pause']} cut at a pause" if peer["cut_at_a_pause"] else ""
    lines = ["", f"Beside a Pipecat {results['peer_pipecat']} pipeline of the same models on the same machine, asked "
             "each question after our modes (perf.voice.peer: Silero VAD + Smart Turn v3.2, WhisperSTTService "
             "tiny.en int8, SmolLM2-135M on llama.cpp's OpenAI-compatible server with the Thinker's threads, "
             f"PiperTTSService in the embedded voice){failed}:", "",
             "| pipeline | voice→voice median ms | p90 ms | speech end → final ms | final → first audio ms | WER "
             "| peer ÷ this |", "|---|---|---|---|---|---|---|"]
    rows = [(f"ours, top-{results['top_k']}" if m == "top_k" else f"ours, {m}", s[m], f"{peer['ratio_to'][m]:.2f}")
            for m in MODES]
    for name, r, ratio in [*rows, ("Pipecat peer", peer, "–")]:
        lines.append(f"| {name} | {r['voice_to_voice_median_s'] * 1000:.0f} | {r['voice_to_voice_p90_s'] * 1000:.0f} "
                     f"| {r['final_after_speech_median_s'] * 1000:.0f} | {r['audio_after_final_median_s'] * 1000:.0f} "
                     f"| {r['word_error_rate']:.3f} | {ratio} |")
    return lines


def table(results: dict) -> str:
    s = results["summary"]
    lines = [
        f"The voice chat heard end to end: {results['questions']} chitchat-dataset questions spoken by the embedded "
        f"voice, streamed in real time in {MESSAGE_MS} ms messages, endpoint {ENDPOINT_MS} ms, turn detection "
        f"{results.get('turn_detection', 'silence')}, replies of at most "
        f"{results['max_tokens']} tokens (embedded SmolLM2-135M on llama.cpp, CPU), Whisper tiny.en in Triton.",
        "",
        "| speculation | voice→voice median ms | p90 ms | ÷ off | speech end → final ms | final → reply decided ms "
        "| final → first audio ms | WER | longest partial gap ms | held / partial / rejected | extra LLM tokens "
        "| TTS thrown away s | reply = off's |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, r in s.items():
        o = r["outcomes"]
        name = f"top-{results['top_k']}" if mode == "top_k" else mode
        lines.append(
            f"| {name} | {r['voice_to_voice_median_s'] * 1000:.0f} | {r['voice_to_voice_p90_s'] * 1000:.0f} "
            f"| {r['ratio_to_off']:.2f} | {r['final_after_speech_median_s'] * 1000:.0f} "
            f"| {r['decided_after_final_median_s'] * 1000:.0f} | {r['audio_after_final_median_s'] * 1000:.0f} "
            f"| {r['word_error_rate']:.3f} "
            f"| {r['partial_gap_max_s'] * 1000:.0f} | {o['held']} / {o['partial']} / {o['rejected']} "
            f"| {r['extra_llm_tokens']:.0f} | {r['discarded_tts_s']:.2f} | {r['same_reply_as_off']} of {r['turns']} |")
    lines += ["", "Replies (" + "; ".join(
        f"{'top-' + str(results['top_k']) if m == 'top_k' else m}: {r['replies_looping']} looping, "
        f"{r['replies_leaving_english']} leaving English, median {r['reply_words_median']:.0f} words in "
        f"{r['reply_sentences_median']:.0f} sentences" for m, r in s.items()) + ")."]
    if r := results.get("realtime"):
        lines += ["", f"Over OpenAI's Realtime API (/v1/realtime, the server's greedy speculation), the same questions "
                  f"in the same rotation: voice→voice median {r['voice_to_voice_median_s'] * 1000:.0f} ms, p90 "
                  f"{r['voice_to_voice_p90_s'] * 1000:.0f} ms, {r['ratio_to_greedy']:.2f} × protocol v1's greedy "
                  f"(goal within 5 %: {'met' if abs(r['ratio_to_greedy'] - 1) <= 0.05 else 'missed'}); speech end → "
                  f"final {r['final_after_speech_median_s'] * 1000:.0f} ms, final → first audio "
                  f"{r['audio_after_final_median_s'] * 1000:.0f} ms, WER {r['word_error_rate']:.3f}."]
    if results.get("peer"):
        lines += peer_table(results)
    lines += ["", "| dictation streams at once | speech end → final median ms | max ms | longest partial gap ms "
              "| WER | recognizer CPU s per audio s | in real time |", "|---|---|---|---|---|---|---|"]
    for row in results["listeners"]:
        lines.append(
            f"| {row['listeners']} | {row['final_after_speech_median_s'] * 1000:.0f} "
            f"| {row['final_after_speech_max_s'] * 1000:.0f} | {row['partial_gap_max_s'] * 1000:.0f} "
            f"| {row['word_error_rate']:.3f} | {row['cpu_per_audio_s']:.3f} | {'yes' if row['real_time'] else 'no'} |")
    kept = [row["listeners"] for row in results["listeners"] if row["real_time"]]
    greedy = s["greedy"]["ratio_to_off"]
    wer = statistics.mean(r["word_error_rate"] for r in s.values())
    gap = max(r["partial_gap_max_s"] for r in s.values())
    lines += ["", f"Goals: greedy's voice-to-voice median ≤ {GOALS['greedy_ratio']} × off's: {greedy:.2f} "
              f"({'met' if greedy <= GOALS['greedy_ratio'] else 'missed'}); word error rate ≤ "
              f"{GOALS['word_error_rate']:.0%}: {wer:.1%} ({'met' if wer <= GOALS['word_error_rate'] else 'missed'}); "
              f"a partial at least every {GOALS['partial_gap_s'] * 1000:.0f} ms of speech: longest gap "
              f"{gap * 1000:.0f} ms ({'met' if gap <= GOALS['partial_gap_s'] else 'missed'}). Dictation streams kept "
              f"in real time: {max(kept) if kept else 0} (final within {REAL_TIME_MARGIN_S * 1000:.0f} ms of the "
              "endpoint)."]
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    from perf.tools.plots import pyplot

    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for mode in MODES:
        waits = sorted(t["voice_to_voice_s"] * 1000 for t in results["turns"] if t["mode"] == mode)
        left.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post", label=mode)
    if waits := sorted(t["voice_to_voice_s"] * 1000 for t in results.get("realtime_turns", [])):
        left.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post", linestyle=":",
                  label="greedy over /v1/realtime")
    if waits := sorted(t["voice_to_voice_s"] * 1000 for t in results.get("peer_turns", []) if "error" not in t):
        left.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post", linestyle="--",
                  label="Pipecat peer")
    left.set(xlabel="last sample of speech → first audio of the reply (ms)", ylabel="fraction of turns",
             title="voice to voice by speculation")
    left.legend()
    rows = results["listeners"]
    right.plot([r["listeners"] for r in rows], [r["final_after_speech_median_s"] * 1000 for r in rows], "o-",
               label="median")
    right.plot([r["listeners"] for r in rows], [r["final_after_speech_max_s"] * 1000 for r in rows], "s--", label="max")
    right.axhline(ENDPOINT_MS, color="grey", linewidth=0.8, label="endpoint")
    right.set(xlabel="dictation streams at once", ylabel="end of speech → final transcript (ms)",
              title="the recognizer under load")
    right.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = question_options(__doc__.splitlines()[0])
    parser.add_argument("--listeners", default="1,2,4,8", help="dictation streams at once, comma-separated")
    parser.add_argument("--turn-detection", choices=v1.LISTEN_TURN_DETECTIONS, default=v1.LISTEN_DEFAULT_TURN_DETECTION)
    parser.add_argument("--peer", action="store_true",
                        help="ask each question of perf.voice.peer's Pipecat pipeline too (scripts/setup.sh --peer)")
    parser.add_argument("--realtime", action="store_true",
                        help="ask each question over OpenAI's Realtime API (/v1/realtime) too, in the modes' rotation")
    parser.add_argument("--out", type=Path, default=Path("perf/results/voice"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    listen = {"endpoint_ms": ENDPOINT_MS, "turn_detection": args.turn_detection}
    servers = Servers(args.out, chat_model="embedded", listen=True)
    peer = Peer(args.max_tokens) if args.peer else None  # first: a peer that cannot start fails before Triton does
    try:
        servers.start()
        try:
            turns, realtime_turns, peer_turns = chat_turns(servers, args.questions, args.top_k, args.max_tokens,
                                                           listen, peer, args.realtime)
            if peer:
                peer.stop()  # its server's memory and threads, before the dictation streams
            rows = listeners(servers, [int(n) for n in args.listeners.split(",")], questions(8, seed=1), listen)
        finally:
            servers.stop()
    finally:
        if peer:
            peer.stop()
    results = {"questions": args.questions, "top_k": args.top_k, "max_tokens": args.max_tokens,
               "endpoint_ms": ENDPOINT_MS, "turn_detection": args.turn_detection, "turns": turns, "summary": summarize(turns), "listeners": rows}
    if realtime_turns:
        results |= {"realtime_turns": realtime_turns, "realtime": beside_greedy(turns, realtime_turns)}
    if peer:
        results |= {"peer_turns": peer_turns, "peer": beside_peer(turns, peer_turns),
                    "peer_pipecat": peer.ready["pipecat"], "peer_llama_threads": peer.ready["threads"]}
    save(args.out, "voice", results, table(results), plot)


if __name__ == "__main__":
    main()
