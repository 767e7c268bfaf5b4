"""Talking to the page at / in a real headless Chromium whose fake microphone says a
question (tests/pages.py): the page streams it up in listen mode and shows what the
recognizer heard; without a recognizer, or without a microphone, it says why. The voice
chat heard and answered aloud is tests/vllm/test_chat.py's (it needs the chat model)."""

import pytest

from tests.pages import CHROMIUM, FLAGS, REPORT, fake_microphone, http_of, microphone_browser
from tests.speech import word_error_rate

QUESTION = "What is your favorite kind of music to listen to on a rainy day?"
FINAL = "window.speechstream.turns.some(t => t.final && t.transcript) || window.speechstream.errors.length"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """This module's tabs hear QUESTION, after 1 s of silence and before 3 s, looped."""
    with microphone_browser(fake_microphone(tmp_path_factory.mktemp("microphone") / "question.wav", QUESTION)) as b:
        yield b


@pytest.fixture(scope="module")
def listen_gateway(triton, module_gateways):
    """A gateway that listens, in front of the session's Triton (which serves the recognizer)."""
    return module_gateways.start(triton.grpc_url, "--probe-interval", "0", "--admission-load", "0", "--listen",
                                 name="listen-gateway").url


def test_the_page_writes_what_its_microphone_hears(listen_gateway, open_page):
    """Dictation: Talk streams the microphone in real time, the question's partials show
    grey as it is spoken, then its final, black, with the question's words; no reply (no
    chat). Stop talking releases the microphone and sends nothing more."""
    problems = []
    page = open_page(http_of(listen_gateway) + "/", problems)
    page.click("#talk")
    page.wait_for_function("window.speechstream.listening", timeout=20_000)
    assert page.inner_text("#talk") == "Stop talking" and page.is_enabled("#end-speech")
    page.wait_for_function(FINAL, timeout=60_000)
    report = page.evaluate(REPORT)
    assert report["errors"] == [] and problems == []
    turn = next(t for t in report["turns"] if t["final"])
    assert word_error_rate(QUESTION, turn["transcript"]) <= 0.2, turn["transcript"]
    assert turn["partials"] >= 1  # shown while the question was spoken
    assert turn["reply"] is None and turn["voice_to_voice_ms"] is None
    said = page.locator(f"#turns li[data-turn='{turn['turn_id']}'] .said")
    assert said.inner_text() == turn["transcript"] and said.get_attribute("class") == "said final"
    # The microphone's audio went up as it was recorded: the question and the silence
    # that ended it by the final (and none more than 2 s ahead of real time, or the server
    # would have refused it: audio_not_accepted, among the errors).
    assert report["micMs"] >= 3000

    page.click("#talk")
    stopped = page.evaluate(REPORT)
    assert not stopped["listening"] and page.inner_text("#talk") == "Talk" and not page.is_enabled("#end-speech")
    page.wait_for_timeout(500)
    assert page.evaluate(REPORT)["micMs"] == stopped["micMs"]  # nothing more sent


def test_talk_on_a_server_without_a_recognizer_says_so(gateway, open_page):
    """The session's gateway runs without --listen: listen_unavailable, said in words, and
    the microphone let go."""
    problems = []
    page = open_page(http_of(gateway) + "/", problems)
    page.click("#talk")
    page.wait_for_function("window.speechstream.errors.length", timeout=20_000)
    report = page.evaluate(REPORT)
    assert report["errors"] == [
        "This server does not listen: it runs no speech recognizer (start it with --listen, or --chat)."]
    assert page.inner_text("#status") == report["errors"][0] and report["state"] == "error"
    assert not report["listening"] and report["micMs"] == 0 and page.inner_text("#talk") == "Talk"
    assert problems == []
    # The page still speaks.
    page.click("#speak")
    page.wait_for_function("window.speechstream.done || window.speechstream.errors.length", timeout=90_000)
    assert page.evaluate(REPORT)["errors"] == []


def test_a_refused_microphone_is_said(gateway, browser):
    """The browser refuses the microphone (as when a person says no): the page says how to
    allow it, and connects nowhere. A Chromium of its own, without the fake permission UI
    that grants every request, the microphone denied to the page's origin."""
    refusing = browser.browser_type.launch(executable_path=CHROMIUM, args=[*FLAGS, "--use-fake-device-for-media-stream"])
    try:
        page = refusing.new_page()
        page.goto(http_of(gateway) + "/")
        tab = page.context.new_cdp_session(page).send("Target.getTargetInfo")["targetInfo"]
        refusing.new_browser_cdp_session().send("Browser.setPermission", {
            "permission": {"name": "microphone"}, "setting": "denied", "origin": http_of(gateway),
            "browserContextId": tab["browserContextId"]})
        page.click("#talk")
        page.wait_for_function("window.speechstream.errors.length", timeout=20_000)
        report = page.evaluate(REPORT)
    finally:
        refusing.close()
    assert report["errors"] == ["The browser refused the microphone: allow it for this page (the address bar's "
                                "site settings), then press Talk."]
    assert not report["listening"] and report["state"] == "error"
