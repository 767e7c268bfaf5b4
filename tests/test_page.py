"""The page at / in a real headless Chromium (Debian's), driven by Playwright."""

import os
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

pytestmark = pytest.mark.triton

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS", Path(__file__).parents[1] / "test-artifacts"))
FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


@pytest.mark.parametrize("codec", ["opus", "pcm"])
def test_page_speaks_and_decodes_the_whole_utterance(gateway, browser, codec):
    http = gateway.replace("ws://", "http://").removesuffix("/v1/stream")
    page = browser.new_page()
    if codec == "pcm":  # a browser without WebCodecs takes the PCM fallback
        page.add_init_script("delete window.AudioDecoder")
    problems = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(http + "/")
    expected = "Opus (WebCodecs)" if codec == "opus" else "PCM fallback"
    assert page.inner_text("#codec") == expected
    page.click("#speak")
    page.wait_for_function("window.speechstream.done || window.speechstream.errors.length", timeout=60_000)
    report = page.evaluate("window.speechstream")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"page-{codec}.png"))
    assert report["errors"] == [] and problems == []
    assert report["audioMs"] > 3000
    decoded_ms = report["decodedSamples"] * 1000 / 48000
    assert abs(decoded_ms - report["audioMs"]) <= 20  # every frame decoded, ± one frame
    assert 0 < report["ttfaMs"] < report["audioMs"]
    assert page.inner_text("#ttfa").endswith("ms")


def test_stop_cancels_and_empties_the_player(gateway, browser):
    http = gateway.replace("ws://", "http://").removesuffix("/v1/stream")
    page = browser.new_page()
    page.goto(http + "/")
    page.fill("#text", " ".join(["The birch canoe slid on the smooth planks."] * 30))
    page.click("#speak")
    page.wait_for_function("window.speechstream.decodedSamples > 48000", timeout=60_000)
    page.click("#stop")
    page.wait_for_timeout(500)
    before = page.evaluate("window.speechstream.decodedSamples")
    page.wait_for_timeout(700)
    assert page.evaluate("window.speechstream.decodedSamples") == before
    assert not page.evaluate("window.speechstream.done")
    assert page.inner_text("#status") == "stopped"


def test_static_files_refuse_traversal(gateway):
    import urllib.error
    import urllib.request

    http = gateway.replace("ws://", "http://").removesuffix("/v1/stream")
    with urllib.request.urlopen(http + "/static/app.js") as r:
        assert r.headers["Content-Type"].split(";")[0] in ("text/javascript", "application/javascript")
    for path in ["/static/../server.py", "/static/%2e%2e/server.py", "/static/", "/static/.hidden.js", "/etc/passwd"]:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(http + path)
        assert e.value.code in (403, 404)  # refused: a directory (403) or no such file


def test_page_behind_an_api_key_and_an_origin_allow_list(triton, browser, tmp_path):
    """The page passes its own ?api_key= to the WebSocket; its origin is allowed."""
    from perf.servers import free_ports, start_gateway, stop

    (port,) = free_ports(1)  # the Origin must be known before the gateway starts
    origin = f"http://127.0.0.1:{port}"
    with (tmp_path / "gateway.log").open("w") as log:
        process, port = start_gateway(triton.grpc_url, log, "--api-key", "k3y", "--allowed-origins", origin, port=port)
        try:
            page = browser.new_page()
            page.goto(f"{origin}/")
            page.click("#speak")
            page.wait_for_function("window.speechstream.errors.length", timeout=30_000)  # no key: refused
            page.goto(f"{origin}/?api_key=k3y")
            page.click("#speak")
            page.wait_for_function("window.speechstream.done || window.speechstream.errors.length", timeout=60_000)
            report = page.evaluate("window.speechstream")
            assert report["errors"] == [] and report["audioMs"] > 3000
        finally:
            stop(process)


def test_page_says_busy_and_retries_when_the_server_is_at_capacity(triton, browser, tmp_path):
    """A gateway admitting 1 % of its measured capacity (one stream): while another client
    speaks, the page's request is refused with `server_busy`; the page says so, retries
    when told to, and speaks once the other stream is cancelled."""
    import json
    import time

    from gateway.client import SyncSpeechClient
    from perf.servers import start_gateway, stop
    from perf.workloads import workload

    with (tmp_path / "gateway.log").open("w") as log:
        process, port = start_gateway(triton.grpc_url, log, "--admission-load", "0.01", "--probe-interval", "0")
        try:
            holder = SyncSpeechClient.connect(f"ws://127.0.0.1:{port}/v1/stream", format="pcm_s16le")
            list(holder.speak("Let the server measure itself."))
            holder.ws.send(json.dumps({"type": "speak", "context_id": "held", "text": workload("paragraph")}))
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.click("#speak")
            deadline, status = time.monotonic() + 10, ""
            while not status.startswith("busy, retrying") and time.monotonic() < deadline:
                status = page.inner_text("#status")
                page.wait_for_timeout(50)
            holder.ws.send(json.dumps({"type": "cancel", "context_id": "held"}))
            page.wait_for_function("window.speechstream.done || window.speechstream.errors.length", timeout=60_000)
            report = page.evaluate("window.speechstream")
            holder.close()
        finally:
            stop(process)
    assert status.startswith("busy, retrying")
    assert report["retries"] >= 1 and report["errors"] == [] and report["audioMs"] > 3000
