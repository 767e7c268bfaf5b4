"""`speechstream-say` against the running gateway: files that decode to the audio sent;
and its one-line errors when there is no gateway, or one that refuses it."""

import subprocess
import sys
import threading
import wave
from http import HTTPStatus

import av
import pytest
from websockets.sync.server import serve

from perf.tools.workloads import workload
from speechstream.client import say


@pytest.mark.parametrize("suffix", [".ogg", ".wav", ".flac"])
def test_say_writes_a_file_of_the_spoken_duration(gateway, tmp_path, suffix):
    text = tmp_path / "text.txt"
    text.write_text(workload("short"), encoding="utf-8")
    out = tmp_path / f"speech{suffix}"
    run = subprocess.run(
        [sys.executable, "-m", "speechstream.client.say", "--file", str(text), "--out", str(out), "--url", gateway, "--seed", "3"],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("first audio: ")
    seconds = float(run.stdout.split("; ")[1].split(" s ")[0])
    if suffix == ".wav":
        with wave.open(str(out)) as w:
            assert w.getframerate() == 48000 and w.getnchannels() == 1
            decoded = w.getnframes() / 48000
    else:
        with av.open(str(out)) as container:
            assert container.streams.audio[0].codec_context.name == {".ogg": "opus", ".flac": "flac"}[suffix]
            decoded = sum(f.samples for f in container.decode(audio=0)) / 48000
    assert 2.0 < seconds and abs(decoded - seconds) <= 0.02  # within one frame (plus Opus pre-skip)


def test_play_streams_pcm_into_the_player(gateway, tmp_path):
    # No sound card here: the "player" is a command that records what it is fed.
    sink = tmp_path / "played.raw"
    player = f"{sys.executable} -c \"import shutil,sys; shutil.copyfileobj(sys.stdin.buffer, open(r'{sink}', 'wb'))\""
    run = subprocess.run(
        [sys.executable, "-m", "speechstream.client.say", workload("short"), "--play", "--player", player, "--url", gateway],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    seconds = float(run.stdout.split("; ")[1].split(" s ")[0])
    assert run.stdout.rstrip().endswith("played")
    assert abs(sink.stat().st_size / 2 / 48000 - seconds) <= 0.02


def test_voice_picks_one_of_the_servers_voices_and_an_unknown_one_is_refused(gateway, tmp_path):
    from tests.voices import GERMAN

    def run(voice):
        return subprocess.run(
            [sys.executable, "-m", "speechstream.client.say", "Guten Tag.", "--out", str(tmp_path / "x.wav"), "--url", gateway,
             "--voice", voice], capture_output=True, text=True, timeout=120)

    assert run(GERMAN).returncode == 0
    refused = run("nobody")
    assert refused.returncode == 1 and "unknown_voice" in refused.stderr


def test_say_reports_an_unreachable_server(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "speechstream.client.say", "Hi.", "--out", str(tmp_path / "x.wav"), "--url", "ws://127.0.0.1:9/v1/stream"],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 1 and "speechstream-say:" in run.stderr


@pytest.fixture
def refusing(request):
    """A WebSocket server that answers every handshake with the status given (403 by
    default), keeping the Authorization headers."""
    keys, status = [], getattr(request, "param", HTTPStatus.FORBIDDEN)

    def refuse(connection, request):
        keys.append(request.headers.get("Authorization"))
        return connection.respond(status, "no\n")

    with serve(lambda ws: None, "127.0.0.1", 0, process_request=refuse) as server:
        thread = threading.Thread(target=server.serve_forever)
        thread.start()
        yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}/v1/stream", keys
        server.shutdown()
        thread.join()


@pytest.mark.parametrize("refusing,hint", [
    (HTTPStatus.UNAUTHORIZED, "the gateway needs its API key: --api-key KEY or GATEWAY_API_KEY"),
    (HTTPStatus.TOO_MANY_REQUESTS, "too many connections or wrong keys from this address; try again in a minute"),
], indirect=["refusing"])
def test_say_tells_what_to_do_about_a_refusal(refusing, hint, tmp_path, capsys):
    url, _ = refusing
    assert say.main(["Hi.", "--out", str(tmp_path / "x.wav"), "--url", url]) == 1
    assert capsys.readouterr().err.strip().endswith(f"({hint})")


def test_say_reports_a_refused_connection_in_one_line(refusing, tmp_path, capsys, monkeypatch):
    url, keys = refusing
    monkeypatch.setenv("GATEWAY_API_KEY", "from-env")
    assert say.main(["Hi.", "--out", str(tmp_path / "x.wav"), "--url", url]) == 1
    assert say.main(["Hi.", "--out", str(tmp_path / "x.wav"), "--url", url, "--api-key", "k3y"]) == 1
    assert keys == ["Bearer from-env", "Bearer k3y"]
    assert capsys.readouterr().err.splitlines() == ["speechstream-say: server rejected WebSocket connection: HTTP 403 "
                                                    "(the gateway refused this client (its Origin, or the key failed "
                                                    "too often))"] * 2
