"""One tritonserver process on the model repository: its command line, its start and
readiness, its Python backend stubs, and a stop (graceful, or at once) that leaves no
stub, no process of theirs and no shared memory behind."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from contract import models as c
from contract.voices import find_voices
from operations.environment import (
    GPU_CONFIG,
    MODEL_REPOSITORY,
    backend_directory,
    chat_model_dir,
    check_ar_model,
    server_environment,
    tritonserver_binary,
)
from operations.process_tree import alive, kill_all, kill_session, model_of, reap, stub_of
from operations.shared_memory import made_since, remove_stale_regions, remove_unmapped, stub_regions
from python_backends.piper.voice import load_voice

log = logging.getLogger("speechstream.triton")


STUCK_GRACE_S = 3.0  # Triton counts its live models once a second: this long with none but stuck ones, it waits for nothing
EXIT_POLL_S = 0.1


@dataclass(frozen=True)
class Stopped:
    """How a stop went: Triton's exit code and time, and what it left behind (stubs that
    outlived it and their shm regions, which stop() then killed and removed)."""

    exit_code: int
    seconds: float
    stubs_left_running: int
    shm_left_after_exit: int
    models_left: tuple[str, ...] = ()  # the models of the stubs left running


@dataclass
class TritonProcess:
    """A tritonserver process on the given ports, and its Python backend stubs."""

    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    host: str = "127.0.0.1"
    model_repository: Path = MODEL_REPOSITORY
    log_verbose: int = 0
    voices: str | None = None  # a directory of Piper voices, besides the embedded one
    ar_model: str | None = None  # an Orpheus-format model directory: serve the autoregressive family too
    chat_model: str | None = None  # a chat model directory, or EMBEDDED_CHAT: serve the Thinker too
    gpu: bool = False  # models with a configs/gpu.pbtxt load it (the AR family on the GPU)
    listen: bool = False  # serve the recognizer (`asr`) too; a chat model brings it as well (a voice chat needs ears)
    process: subprocess.Popen | None = field(default=None, init=False)
    _stdout: object = field(default=None, init=False, repr=False)
    _stubs: list[psutil.Process] = field(default_factory=list, init=False, repr=False)
    _former_stubs: set[psutil.Process] = field(default_factory=set, init=False, repr=False)  # reaped once Triton is gone
    _chat_dir: str | None = field(default=None, init=False, repr=False)  # chat_model's directory, resolved once
    _started_at: float = field(default=0.0, init=False, repr=False)  # time.time() of the last start

    def command(self) -> list[str]:
        return [
            str(tritonserver_binary()),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backend_directory()}",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.metrics_port}",
            "--allow-cpu-metrics=true",
            "--exit-on-error=true",
            f"--log-verbose={self.log_verbose}",
            "--model-control-mode=explicit",
            *(f"--load-model={model}" for model in self.models()),
            *([f"--model-config-name={GPU_CONFIG}"] if self.gpu else []),
        ]

    def models(self) -> tuple[str, ...]:
        """The models this server loads: the Piper chain, the AR family's with `ar_model`,
        the Thinker with `chat_model`, and the recognizer with `listen` or `chat_model`."""
        piper = (c.ACOUSTIC_MODEL, c.VOCODER_MODEL, c.TTS_MODEL)
        ar = (c.TALKER_MODEL, c.CODE2WAV_MODEL, c.TTS_AR_MODEL) if self.ar_model else ()
        thinker = (c.THINKER_MODEL,) if self.chat_model else ()
        return piper + ar + thinker + ((c.ASR_MODEL,) if self.listen or self.chat_model else ())

    def start(self, stdout=None) -> None:
        for voice in find_voices(self.voices).values():  # VoiceError, with what to fix, before Triton starts
            load_voice(voice)  # derive the graphs once here, not in three model processes at once
        if self.ar_model:
            check_ar_model(self.ar_model)
        if self.chat_model and self._chat_dir is None:  # not again on each restart
            self._chat_dir = chat_model_dir(self.chat_model)
        removed = remove_stale_regions()
        if removed:
            log.warning("removed %d shared-memory regions left by Triton processes that are gone", removed)
        log.info("starting %s", " ".join(self.command()))
        self._stdout = stdout
        self._started_at = time.time()
        # A session of its own: a signal Triton or a dying stub sends to its process group
        # does not reach the supervisor, which stops Triton itself.
        self.process = subprocess.Popen(
            self.command(), env=server_environment(self.voices, self.ar_model, self._chat_dir), stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True
        )

    def is_ready(self) -> bool:
        """Whether it says it is ready and its metrics answer: Triton starts its metrics
        service a few ms after its HTTP one, and admission reads the streams it serves there."""
        urls = (f"http://{self.host}:{self.http_port}/v2/health/ready", f"http://{self.host}:{self.metrics_port}/metrics")
        try:
            for url in urls:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status != 200:
                        return False
        except (urllib.error.URLError, OSError):
            return False
        return True

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Poll readiness until the server is ready; raise if it exits or times out. Its
        stubs, all started by then, are what `fault` checks from now on."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited with code {self.process.returncode} while starting")
            if self.is_ready():
                self._watch(self.stubs())
                return
            time.sleep(0.25)
        raise TimeoutError(f"tritonserver not ready after {timeout:.0f} s on port {self.http_port}")

    def stubs(self) -> list[psutil.Process]:
        """The Python backend stubs alive now (one per model instance): the server's
        children, and those it had when it became ready, which outlive a killed server."""
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        return [p for p in {*children, *self._stubs} if alive(p)]

    def stub(self, model: str) -> psutil.Process:
        """A live Python backend stub that runs `model`."""
        return stub_of(self.stubs(), model)

    def fault(self) -> str | None:
        """Why the server cannot serve (it exited, a stub died), or None."""
        if self.process.poll() is not None:
            return f"tritonserver exited with code {self.process.returncode}"
        dead = [stub.pid for stub in self._stubs if not alive(stub)]
        return f"Python backend stub {dead[0]} died" if dead else None

    def stop(self, timeout: float = 30.0) -> Stopped:
        """SIGTERM, which makes Triton drain and unload; SIGKILL after `timeout`. Stubs
        that outlive it (a model that failed to unload) are killed, and their shared
        memory regions removed."""
        started = time.monotonic()
        if self.process is None:
            return Stopped(0, 0.0, 0, 0)
        stubs = self.stubs()
        regions = stub_regions(stubs)
        if self.process.poll() is None:
            stuck = {model_of(stub) for stub in self._stubs if not alive(stub)}  # before the unloads end stubs
            self.process.terminate()
            self._await_exit(stubs, stuck, timeout)
        left = [stub for stub in stubs if alive(stub)]
        models = tuple(sorted(str(model_of(stub)) for stub in left))
        if left:
            log.warning("Python backend stubs of %s outlived tritonserver (they did not unload); killing them",
                        ", ".join(models))
        kill_all(left)
        stale = self._clean_up(regions)
        return Stopped(self.process.returncode, round(time.monotonic() - started, 1), len(left), stale, models)

    def _await_exit(self, stubs: list[psutil.Process], stuck: set[str | None], timeout: float) -> None:
        """Wait for a terminated Triton to exit; kill it after `timeout`, or once it has
        waited STUCK_GRACE_S on none of `stubs` but those of the `stuck` models: Triton
        2.51 never unloads a model one of whose stubs died before the stop (the failover
        had not replaced it yet), and would wait out its own 30 s exit timeout for it.
        Instances retired after a failover are such too, but their stubs are dead already."""
        deadline = time.monotonic() + timeout
        stuck_since = None
        while self.process.poll() is None:
            now = time.monotonic()
            left = [stub for stub in stubs if alive(stub)]
            if all(model_of(stub) in stuck for stub in left):
                stuck_since = stuck_since or now
            waits_on_stuck = stuck_since is not None and now - stuck_since >= STUCK_GRACE_S
            if waits_on_stuck:
                models = sorted({str(model_of(stub)) for stub in left}) or ["instances retired after a failover"]
                log.warning("tritonserver waits on %s, which it never unloads (one of its instances died); "
                            "killing it", ", ".join(models))
            elif now >= deadline:
                log.warning("tritonserver did not stop within %.0f s; killing it", timeout)
            if waits_on_stuck or now >= deadline:
                self.process.kill()
                self.process.wait()
                return
            time.sleep(EXIT_POLL_S)

    def kill(self) -> None:
        """Kill the server and its stubs at once (a dead stub makes a graceful stop wait
        30 s for it), and remove their shared memory."""
        stubs = self.stubs()
        regions = stub_regions(stubs)
        for stub in stubs:
            with contextlib.suppress(psutil.NoSuchProcess):  # it may die meanwhile
                stub.kill()
        self.process.kill()  # a no-op when it has exited
        self.process.wait()
        psutil.wait_procs(stubs, timeout=10)
        self._clean_up(regions)

    def _clean_up(self, regions: list[Path]) -> int:
        """Once Triton and its stubs are gone: kill what is left in its session, remove the
        stubs' `regions`, and the /dev/shm files made since Triton started that no process
        maps (vLLM's shared memory and semaphores, which its engine processes leave behind
        when killed, some made during the shutdown itself). How many regions were left."""
        self._kill_session_leftovers()
        stale = [region for region in regions if region.exists()]
        for region in stale:
            region.unlink(missing_ok=True)
        remove_unmapped(made_since(self._started_at))
        reap(self._former_stubs)  # with `adopt_orphans`, a stub Triton never reaped is ours now
        self._former_stubs.clear()
        return len(stale)

    def _kill_session_leftovers(self) -> None:
        """Kill what is left of Triton's session once Triton and its stubs are gone: a
        killed stub's own children (vLLM's engine core and workers, 3-4 GB and a dozen
        ports) outlive it otherwise."""
        left = kill_session(self.process.pid)
        if left:
            log.warning("killed %d processes left in tritonserver's session: %s", len(left), ", ".join(left))

    def _watch(self, stubs: list[psutil.Process]) -> None:
        """The stubs `fault` checks from now on, each one's model read while it can be."""
        self._stubs = stubs
        self._former_stubs.update(stubs)
        for stub in stubs:
            model_of(stub)
