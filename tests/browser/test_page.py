"""The page at / in a real headless Chromium (tests/pages.py) against a real tritonserver
and gateway. Its player is an AudioWorklet, which headless Chromium runs in real time on
a fake audio output."""

import asyncio
import signal
import threading

import pytest

from contract.text import split_sentences
from tests.pages import ARTIFACTS, FINISHED, KEY_FIELD_HINT, RATE, REPORT, http_of


def harvard(n):
    from perf.tools.workloads import harvard_sentences

    sentences = harvard_sentences()
    return " ".join(sentences[i % len(sentences)] for i in range(n))


@pytest.mark.parametrize("codec", ["opus", "pcm"])
def test_page_speaks_and_decodes_the_whole_utterance(gateway, open_page, codec):
    problems = []
    # A browser without WebCodecs takes the PCM fallback.
    page = open_page(http_of(gateway) + "/", problems, "delete window.AudioDecoder" if codec == "pcm" else None)
    expected = "Opus (WebCodecs)" if codec == "opus" else "PCM fallback"
    assert page.inner_text("#codec") == expected
    page.click("#speak")
    page.wait_for_function(FINISHED, timeout=90_000)
    report = page.evaluate(REPORT)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"page-{codec}.png"))
    assert report["errors"] == [] and problems == []
    assert report["audioMs"] > 3000
    decoded_ms = report["decodedSamples"] * 1000 / RATE
    assert abs(decoded_ms - report["audioMs"]) <= 20  # every frame decoded, ± one frame
    assert report["playedSamples"] == report["decodedSamples"]  # and every sample played
    assert 0 < report["ttfaMs"] < report["audioMs"]
    assert page.inner_text("#ttfa").endswith("ms")


def test_done_is_shown_only_once_playback_ends(gateway, open_page):
    """The server sends faster than real time, so its `done` comes while seconds of audio
    are still queued in the player: the status then says the audio was received and is
    playing, and says "done" only once the player has played every decoded sample."""
    problems = []
    page = open_page(http_of(gateway) + "/", problems)
    page.fill("#text", harvard(3))  # about 7 s of speech, synthesized in about 1 s here
    page.click("#speak")
    # A snapshot taken in the page at the first poll after the server's `done`.
    received = page.wait_for_function(
        """() => { const r = window.speechstream;
                   return (r.received || r.errors.length) && { ...r, text: document.getElementById("status").textContent }; }""",
        timeout=60_000,
    ).json_value()
    assert received["errors"] == []
    assert received["queuedSamples"] > 0  # the premise: audio still waits to be played
    assert not received["done"] and received["state"] == "playing"
    assert received["text"].startswith("received") and "playing" in received["text"]
    page.wait_for_function(FINISHED, timeout=90_000)
    done = page.evaluate(REPORT)
    assert done["errors"] == [] and problems == []
    assert done["playedSamples"] == done["decodedSamples"] and done["queuedSamples"] == 0
    assert page.inner_text("#status") == f"done: {done['audioMs']} ms of audio"


def test_a_text_longer_than_a_minute_is_held_whole(gateway, open_page):
    """About 2.7 minutes of speech (the Harvard sentences one and a half times): the
    server sends it all within a minute or so, far faster than it plays, and the player
    must hold what it has not played yet. This proves that every decoded sample is held,
    more than the old 60 s ring could (queued > 60 s, and played + queued == decoded: none
    lost), and that it plays to its very end, in real time (most of this test)."""
    problems = []
    page = open_page(http_of(gateway) + "/", problems)
    page.fill("#text", harvard(75))
    page.click("#speak")
    page.wait_for_function("window.speechstream.received || window.speechstream.errors.length", timeout=400_000)
    report = page.evaluate(REPORT)
    assert report["errors"] == []
    assert report["audioMs"] > 150_000
    assert abs(report["decodedSamples"] * 1000 / RATE - report["audioMs"]) <= 20  # all of it decoded
    held = "(r => r.playedSamples + r.queuedSamples === r.decodedSamples)(window.speechstream)"
    page.wait_for_function(held, timeout=10_000)  # the worklet's count catches up with the page's
    first = page.evaluate(REPORT)
    assert first["queuedSamples"] > 60 * RATE  # more than the old ring could hold
    assert first["playedSamples"] > 0 and not first["done"]
    page.wait_for_function(f"window.speechstream.playedSamples > {first['playedSamples'] + RATE}", timeout=30_000)
    page.wait_for_function(held, timeout=10_000)  # still nothing lost, a second later
    assert page.evaluate(REPORT)["decodedSamples"] == first["decodedSamples"]
    page.wait_for_function(FINISHED, timeout=first["audioMs"] + 60_000)
    done = page.evaluate(REPORT)
    assert done["errors"] == [] and problems == []
    assert done["playedSamples"] == done["decodedSamples"] == first["decodedSamples"] and done["queuedSamples"] == 0
    assert page.inner_text("#status") == f"done: {done['audioMs']} ms of audio"


def test_stop_cancels_and_empties_the_player(gateway, open_page):
    """Stop while the server still sends and the player plays: the status goes idle
    ("stopped"), the player is emptied and plays nothing more (no late frame of the
    cancelled context reaches it), the level falls to 0, and no error shows. Speak then
    works again on the same connection."""
    problems = []
    page = open_page(http_of(gateway) + "/", problems)
    page.fill("#text", harvard(30))
    page.click("#speak")
    page.wait_for_function("window.speechstream.playedSamples > 4800 && !window.speechstream.received", timeout=60_000)
    page.click("#stop")
    assert page.inner_text("#status") == "stopped"
    page.wait_for_timeout(500)
    before = page.evaluate(REPORT)
    page.wait_for_timeout(1500)
    after = page.evaluate(REPORT)
    assert after["decodedSamples"] == before["decodedSamples"]  # nothing more arrives
    assert after["playedSamples"] == after["queuedSamples"] == 0  # the player is empty and silent
    assert after["level"] == 0 and after["state"] == "idle"
    assert not after["done"] and after["errors"] == [] and problems == []
    assert page.inner_text("#status") == "stopped"
    page.fill("#text", "Hello again.")
    page.click("#speak")
    page.wait_for_function(FINISHED, timeout=60_000)
    again = page.evaluate(REPORT)
    assert again["errors"] == [] and problems == [] and again["playedSamples"] == again["decodedSamples"] > 0


COLUMN_HEIGHTS = """() => {
  const c = document.getElementById("meter"), g = c.getContext("2d");
  const { data } = g.getImageData(0, 0, c.width, c.height);
  const heights = [];
  for (let x = 0; x < c.width; x++) {
    let h = 0;
    for (let y = 0; y < c.height; y++) if (data[(y * c.width + x) * 4 + 3]) h++;
    heights.push(h);
  }
  return { heights, height: c.height };
}"""


def test_the_level_meter_follows_the_audio(gateway, open_page):
    """While speech plays, the meter's level (RMS in dBFS, shown on a -60..0 dB scale)
    moves and stays below full scale, and so do the bars drawn; once stopped it reads
    0, and when its 4 s of history have scrolled by, the canvas is flat."""
    problems = []
    page = open_page(http_of(gateway) + "/", problems)
    page.fill("#text", harvard(3))
    page.click("#speak")
    page.wait_for_function("window.speechstream.playedSamples > 2 * 48000", timeout=60_000)
    levels = []
    for _ in range(40):
        levels.append(page.evaluate("window.speechstream.level"))
        page.wait_for_timeout(25)
    drawn = page.evaluate(COLUMN_HEIGHTS)
    assert 0.3 < max(levels) < 1  # speech is well above -42 dBFS, and below full scale
    assert min(levels) < max(levels) - 0.1  # it moves
    assert max(drawn["heights"]) < drawn["height"]
    assert sum(h > drawn["height"] // 2 for h in drawn["heights"]) > 0
    page.click("#stop")
    # The idle line, once the history has scrolled by (about 4 s).
    page.wait_for_function(f"Math.max(...({COLUMN_HEIGHTS})().heights) <= 2", timeout=30_000)
    assert page.evaluate("window.speechstream.level") == 0
    assert problems == []


def test_page_behind_an_api_key_and_an_origin_allow_list(triton, open_page, gateways):
    """A gateway that requires an API key, and allows the page's origin: without a key,
    and with a wrong one, the page says the key goes in its "API key" field; typed there,
    it speaks. A link's ?api_key= fills the field too."""
    from operations.loopback import free_ports

    (port,) = free_ports(1)  # the Origin must be known before the gateway starts
    origin = f"http://127.0.0.1:{port}"
    gateways.start(triton.grpc_url, "--api-key", "k3y", "--allowed-origins", origin, port=port)
    page = open_page(f"{origin}/")
    assert page.input_value("#key") == ""
    page.click("#speak")
    page.wait_for_function("window.speechstream.errors.length", timeout=30_000)  # no key: refused
    status = page.inner_text("#status")
    assert "requires an API key" in status and KEY_FIELD_HINT in status
    assert page.evaluate("document.activeElement.id") == "key"
    page.fill("#key", "wrong")
    page.click("#speak")
    page.wait_for_function("window.speechstream.errors.length", timeout=30_000)
    assert "refused this API key" in page.inner_text("#status") and KEY_FIELD_HINT in page.inner_text("#status")
    page.fill("#key", "k3y")
    page.click("#speak")
    page.wait_for_function(FINISHED, timeout=90_000)
    report = page.evaluate(REPORT)
    assert report["errors"] == [] and report["audioMs"] > 3000 and report["done"]
    linked = open_page(f"{origin}/?api_key=k3y")
    assert linked.input_value("#key") == "k3y"
    linked.click("#speak")
    linked.wait_for_function("window.speechstream.received || window.speechstream.errors.length",
                             timeout=60_000)
    assert linked.evaluate(REPORT)["errors"] == []


def test_page_says_busy_and_retries_when_the_server_is_at_capacity(triton, open_page, gateways):
    """A gateway admitting 1 % of its measured capacity (one stream): while another client
    speaks, the page's request is refused with `server_busy`; the page says the server is
    busy, retries when told to, and speaks once the other stream is cancelled."""
    import json
    import time

    from perf.tools.workloads import workload
    from speechstream.client import SyncSpeechClient

    # No room past the load for a stream ahead of its listener: the holder, reading nothing, is.
    port = gateways.start(triton.grpc_url, "--admission-load", "0.01", "--admission-slack", "0",
                          "--probe-interval", "0").port
    holder = SyncSpeechClient.connect(f"ws://127.0.0.1:{port}/v1/stream", format="pcm_s16le")
    list(holder.speak("Let the server measure itself."))
    # Long enough that the audio it is not reading cannot all fit in the sockets' buffers.
    holder.ws.send(json.dumps({"type": "speak", "context_id": "held", "text": workload("long")}))
    page = open_page(f"http://127.0.0.1:{port}/")
    page.click("#speak")
    deadline, status = time.monotonic() + 10, ""
    while not status.startswith("Server busy") and time.monotonic() < deadline:
        status = page.inner_text("#status")
        page.wait_for_timeout(50)
    state = page.evaluate("window.speechstream.state")
    holder.ws.send(json.dumps({"type": "cancel", "context_id": "held"}))
    page.wait_for_function(FINISHED, timeout=90_000)
    report = page.evaluate(REPORT)
    holder.close()
    assert status.startswith("Server busy (at capacity): retrying in") and state == "busy"
    assert report["retries"] >= 1 and report["errors"] == [] and report["audioMs"] > 3000


def test_static_files_refuse_traversal(gateway):
    import urllib.error
    import urllib.request

    http = http_of(gateway)
    with urllib.request.urlopen(http + "/static/app.js") as r:
        assert r.headers["Content-Type"].split(";")[0] in ("text/javascript", "application/javascript")
    for path in ["/static/../server.py", "/static/%2e%2e/server.py", "/static/", "/static/.hidden.js", "/etc/passwd"]:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(http + path)
        assert e.value.code in (403, 404)  # refused: a directory (403) or no such file


class Service:
    """One loopback address in front of several gateways, as a Kubernetes Service is to
    a browser: each new connection goes to the first of them that accepts it (a gateway
    that stopped, or stops listening to drain, refuses)."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self._loop = asyncio.new_event_loop()  # its own thread's: Playwright's runs in this one
        threading.Thread(target=self._loop.run_forever, daemon=True).start()
        listening = asyncio.start_server(self._forward, "127.0.0.1", 0)
        self._server = asyncio.run_coroutine_threadsafe(listening, self._loop).result()
        self.port = self._server.sockets[0].getsockname()[1]

    async def _forward(self, client_reader, client_writer) -> None:
        for port in self.ports:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                continue
        else:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, writer), pipe(reader, client_writer))

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _close(self) -> None:
        self._server.close()
        forwarding = asyncio.all_tasks() - {asyncio.current_task()}
        for task in forwarding:
            task.cancel()
        await asyncio.gather(*forwarding, return_exceptions=True)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass  # the other end reset: so does this one
    finally:
        writer.close()


def test_the_page_goes_on_with_another_gateway_when_its_own_goes_away(triton, gateways, open_page):
    """Two gateways behind one address; the page's, told to stop (SIGTERM, `--drain 1`),
    closes with 1001 mid-paragraph, and the page says the rest through the other: every
    sentence heard once, in order, every frame decoded, no error."""
    text = harvard(20)
    flags = ("--probe-interval", "0", "--admission-load", "0")
    a = gateways.start(triton.grpc_url, *flags, "--drain", "1", name="a")
    b = gateways.start(triton.grpc_url, *flags, name="b")
    service = Service([a.port, b.port])
    try:
        problems = []
        page = open_page(f"http://127.0.0.1:{service.port}/", problems)
        page.fill("#text", text)
        page.click("#speak")
        page.wait_for_function("window.speechstream.decodedSamples > 0", timeout=60_000)
        a.process.send_signal(signal.SIGTERM)
        page.wait_for_function("window.speechstream.received || window.speechstream.errors.length", timeout=120_000)
        report = page.evaluate(REPORT)
        assert a.process.wait(10) == 0
    finally:
        service.close()
    assert report["errors"] == [] and problems == []
    assert report["resumes"] == 1
    assert report["spans"] == [[s.start, s.end] for s in split_sentences(text)]  # every sentence once, in order
    # Every frame decoded: the last packet's padding (under one 20 ms frame), and `done`'s
    # audio_ms and the splice's shift, each rounded to a whole millisecond.
    assert abs(report["decodedSamples"] * 1000 / RATE - report["audioMs"]) <= 22
