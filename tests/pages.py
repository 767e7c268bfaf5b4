"""A pytest plugin (tests/conftest.py loads it): the page in a real headless Chromium
(Debian's), driven by Playwright, for the browser tier and the chat page's test. The page
reports what it measured in `window.speechstream` (gateway/static/app.js). A module that
talks to the page overrides `browser` with `microphone_browser(wav)`: Chromium's fake
microphone says a WAV file, looped (`fake_microphone` makes one)."""

import os
import shutil
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS", Path(__file__).parents[2] / "test-artifacts"))
FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]
RATE = 48000
REPORT = "window.speechstream"
FINISHED = "window.speechstream.done || window.speechstream.errors.length"
KEY_FIELD_HINT = "\u201cAPI key\u201d field"


@contextmanager
def chromium(*flags: str) -> Iterator:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=[*FLAGS, *flags])
        yield b
        b.close()


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def microphone_browser(wav: Path):
    """Chromium whose microphone is `wav`, played in real time and looped, granted to
    every page without asking."""
    return chromium("--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                    f"--use-file-for-fake-audio-capture={wav}")


def fake_microphone(path: Path, text: str, before_s: float = 1.0, after_s: float = 3.0) -> Path:
    """A WAV for the fake microphone: `before_s` of silence, `text` spoken by the embedded
    voice, `after_s` of silence; mono s16 at the recognizer's rate (16 kHz)."""
    import numpy as np

    from contract.models import ASR_SAMPLE_RATE as rate  # spoken()'s
    from tests.speech import spoken

    pcm = np.concatenate([np.zeros(round(before_s * rate), np.int16), spoken(text),
                          np.zeros(round(after_s * rate), np.int16)])
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())
    return path


@pytest.fixture
def open_page(browser):
    """Opens a tab at a URL, with console errors and uncaught exceptions going to a
    `problems` list when given, and an init script run first when given; the test's tabs
    close after it, so that no idle page's audio thread runs on in later tests."""
    pages = []

    def open_page(url, problems=None, init_script=None):
        page = browser.new_page()
        pages.append(page)
        if init_script:
            page.add_init_script(init_script)
        if problems is not None:
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(url)
        return page

    yield open_page
    for page in pages:
        page.close()


def http_of(gateway):
    return gateway.replace("ws://", "http://").removesuffix("/v1/stream")
