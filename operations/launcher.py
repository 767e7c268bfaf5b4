"""`speechstream-triton`: run Triton Inference Server on the model repository, without Docker.

The `nvidia-pytriton` wheel carries a real `tritonserver` and the Python backend. This
assembles a backend directory from it (with the stub built for this Python), derives
the voice's stage graphs into the cache, starts the server with this environment's
packages on the stub's path, waits until it is ready, restarts it when it exits or a
stub dies, and stops it cleanly on SIGINT or SIGTERM, leaving no stub or shared memory
behind.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from contract import models as c
from contract.voices import AR_MODEL_ENV, CHAT_MODEL_ENV, EMBEDDED_CHAT, VOICES_ENV, VoiceError, find_voices
from python_backends.piper.voice import cache_dir, load_voice

log = logging.getLogger("speechstream.triton")

PROJECT_ROOT = Path(__file__).resolve().parents[1]
MODEL_REPOSITORY = PROJECT_ROOT / "model_repository"
GPU_CONFIG = "gpu"  # model_repository/*/configs/gpu.pbtxt: Triton's --model-config-name
GPU_ENV = "SPEECHSTREAM_GPU"
# The AR family's environment (vLLM, torch, SNAC), made by `scripts/setup.sh --ar`.
AR_VENV = PROJECT_ROOT / os.environ.get("AR_VENV", ".venv-ar")


def pytriton_dir() -> Path:
    import pytriton

    return Path(pytriton.__file__).parent


def tritonserver_binary() -> Path:
    return pytriton_dir() / "tritonserver" / "bin" / "tritonserver"


def backend_directory() -> Path:
    """A backend directory holding the Python backend with this Python's stub."""
    source = pytriton_dir() / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = source / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise RuntimeError(f"nvidia-pytriton has no Python backend stub for Python {version}")
    target = cache_dir() / "backends" / f"python{version}"
    python = target / "python"
    if not (python / "triton_python_backend_stub").exists():
        python.mkdir(parents=True, exist_ok=True)
        for f in (source / "backends" / "python").iterdir():
            if f.is_file():
                shutil.copy2(f, python / f.name)
        shutil.copy2(stub, python / stub.name)
    return target


def server_environment(voices: str | None = None, ar_model: str | None = None,
                       chat_model: str | None = None) -> dict[str, str]:
    """The environment for tritonserver and its Python stubs.

    The stubs run the system's libpython in isolated mode, which ignores PYTHONPATH, so
    the model shims put SPEECHSTREAM_PYTHONPATH (the project and this environment's
    packages) on sys.path themselves; the server needs the wheel's own libraries. The
    models find the voices directory in $SPEECHSTREAM_VOICES. The AR family's Talker and
    Code2Wav take the AR environment's packages (SPEECHSTREAM_AR_PYTHONPATH) instead, and
    the model directory from $SPEECHSTREAM_AR_MODEL; the Thinker runs from the same
    environment, its chat model directory in $SPEECHSTREAM_CHAT_MODEL.
    """
    env = dict(os.environ)
    if voices:
        env[VOICES_ENV] = voices
    if ar_model:
        env[AR_MODEL_ENV] = str(Path(ar_model).resolve())
    if chat_model:
        env[CHAT_MODEL_ENV] = str(Path(chat_model).resolve())
    if ar_model or chat_model:
        env["SPEECHSTREAM_AR_PYTHON"] = str(AR_VENV / "bin" / "python")
        site = AR_VENV / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
        env["SPEECHSTREAM_AR_PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), str(site)])
    libs = pytriton_dir().parent / "nvidia_pytriton.libs"
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs), env.get("LD_LIBRARY_PATH")]))
    paths = [str(PROJECT_ROOT)] + [p for p in sys.path if p.endswith("site-packages")]
    env["SPEECHSTREAM_PYTHONPATH"] = os.pathsep.join(paths)
    return env


SHM = Path("/dev/shm")
SHM_PREFIX = "triton_python_backend_shm_region_"  # each Python backend stub's region
SUPERVISE_INTERVAL_S = 0.5
RELOAD_TIMEOUT_S = 120  # a model's new instances load within this (a vocoder's in seconds)
RETIRE_AFTER_S = 2.0  # after a reload, the old instances finish the calls they hold before they are killed


@dataclass(frozen=True)
class Stopped:
    """How a stop went: Triton's exit code and time, and what it left behind (stubs that
    outlived it and their shm regions, which stop() then killed and removed)."""

    exit_code: int
    seconds: float
    stubs_left_running: int
    shm_left_after_exit: int


@dataclass
class TritonServer:
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
    process: subprocess.Popen | None = field(default=None, init=False)
    _stdout: object = field(default=None, init=False, repr=False)
    _stubs: list[psutil.Process] = field(default_factory=list, init=False, repr=False)
    _chat_dir: str | None = field(default=None, init=False, repr=False)  # chat_model's directory, resolved once
    _reloads: int = field(default=0, init=False, repr=False)  # models reloaded to replace a dead instance

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
        """The models this server loads: the Piper chain, and the AR family's with `ar_model`."""
        piper = (c.ACOUSTIC_MODEL, c.VOCODER_MODEL, c.TTS_MODEL)
        ar = (c.TALKER_MODEL, c.CODE2WAV_MODEL, c.TTS_AR_MODEL) if self.ar_model else ()
        return piper + ar + ((c.THINKER_MODEL,) if self.chat_model else ())

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
        url = f"http://{self.host}:{self.http_port}/v2/health/ready"
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Poll readiness until the server is ready; raise if it exits or times out. Its
        stubs, all started by then, are what `healthy` checks from now on."""
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
        return stub_running(self.stubs(), model)

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
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("tritonserver did not stop within %.0f s; killing it", timeout)
                self.process.kill()
                self.process.wait()
        left = [stub for stub in stubs if alive(stub)]
        for stub in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                stub.kill()
        psutil.wait_procs(left, timeout=10)
        self._kill_session_leftovers()
        stale = [region for region in regions if region.exists()]
        for region in stale:
            region.unlink(missing_ok=True)
        remove_unmapped(self._shm_since_start())
        return Stopped(self.process.returncode, round(time.monotonic() - started, 1), len(left), len(stale))

    def restart(self, why: str) -> None:
        """Kill the server and its stubs at once (a dead stub makes a graceful stop wait
        30 s for it), remove their shared memory, start again and wait until ready."""
        log.error("restarting tritonserver: %s", why)
        stubs = self.stubs()
        regions = stub_regions(stubs)
        for stub in stubs:
            with contextlib.suppress(psutil.NoSuchProcess):  # it may die meanwhile
                stub.kill()
        self.process.kill()  # a no-op when it has exited
        self.process.wait()
        psutil.wait_procs(stubs, timeout=10)
        self._kill_session_leftovers()
        for region in regions:
            region.unlink(missing_ok=True)
        remove_unmapped(self._shm_since_start())
        self.start(self._stdout)
        self.wait_ready()
        log.info("tritonserver is back")

    def _shm_since_start(self) -> list[Path]:
        """The /dev/shm files made since Triton started: its stubs' regions, and vLLM's
        shared memory and semaphores, which its engine processes leave behind when killed
        (some made during the shutdown itself)."""
        made = []
        for path in SHM.iterdir():
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                if path.stat().st_mtime >= self._started_at:
                    made.append(path)
        return made

    def _kill_session_leftovers(self) -> None:
        """Kill what is left of Triton's session once Triton and its stubs are gone: a
        killed stub's own children (vLLM's engine core and workers, 3-4 GB and a dozen
        ports) outlive it otherwise."""
        left = [p for p in psutil.process_iter() if session_of(p) == self.process.pid]
        for process in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(left, timeout=10)
        if left:
            log.warning("killed %d processes left in tritonserver's session: %s", len(left),
                        ", ".join(f"{p.pid} {_name(p)}" for p in left))

    def reload(self, model: str) -> None:
        """Load `model` again with its own config: Triton starts new instances while the
        old ones serve on, then sends them no more requests. The old stubs still alive
        are then killed: Triton never retires them while one of theirs is dead, and a
        request they held is issued again by tts (its failover)."""
        base = f"http://{self.host}:{self.http_port}/v2"
        old = {stub for stub in self._stubs if model_of(stub) == model}
        with urllib.request.urlopen(f"{base}/models/{model}/config", timeout=5) as r:
            config = json.load(r)
        # A config unchanged but for its instances would keep the instances it has, the
        # dead one among them ("not healthy"); a new parameter makes Triton load all anew.
        # New instance names keep the old instances' names (which tts acts on when Triton
        # calls one unhealthy) from meaning the new ones.
        self._reloads += 1
        config.setdefault("parameters", {})["reload"] = {"string_value": str(self._reloads)}
        for i, group in enumerate(config["instance_group"]):
            group["name"] = f"{model}_r{self._reloads}_{i}"
        body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
        load = urllib.request.Request(f"{base}/repository/models/{model}/load", data=body, method="POST",
                                      headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(load, timeout=RELOAD_TIMEOUT_S).close()
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"Triton refused to load {model}: {e.read().decode(errors='replace')}") from None
        self._watch([stub for stub in self.stubs() if stub not in old])
        time.sleep(RETIRE_AFTER_S)  # the windows the old instances hold end; a killed stub's calls fail only after ~1 s
        left = [stub for stub in old if alive(stub)]
        for stub in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                stub.kill()
        psutil.wait_procs(left, timeout=10)

    def _watch(self, stubs: list[psutil.Process]) -> None:
        """The stubs `fault` checks from now on, each one's model read while it can be."""
        self._stubs = stubs
        for stub in stubs:
            model_of(stub)

    def replaceable(self) -> str | None:
        """The model whose dead stubs can be replaced without stopping Triton: Triton is
        up, and every dead stub ran one model that still has a live instance to serve."""
        if self.process.poll() is not None:
            return None
        dead = {model_of(stub) for stub in self._stubs if not alive(stub)}
        live = {model_of(stub) for stub in self._stubs if alive(stub)}
        return next(iter(dead)) if len(dead) == 1 and dead <= live and None not in dead else None

    def supervise(self, stopping: threading.Event) -> None:
        """Keep the server serving until `stopping` is set. A dead stub of a model with
        another live instance (a vocoder's) is replaced by reloading that model, with no
        stream cut; otherwise the whole server restarts when it exits or one of its stubs
        dies (Triton 2.51 does not replace a dead stub, and its model never answers
        again). A restart that fails is tried again."""
        while not stopping.wait(SUPERVISE_INTERVAL_S):
            if (why := self.fault()) is None:
                continue
            if (model := self.replaceable()) is not None:
                try:
                    log.warning("%s; reloading %s, whose other instances serve meanwhile", why, model)
                    self.reload(model)
                    log.info("%s is whole again", model)
                    continue
                except Exception:
                    log.exception("reloading %s failed; restarting tritonserver instead", model)
            try:
                self.restart(why)
            except Exception:  # whatever went wrong, the supervisor must go on
                log.exception("restarting tritonserver failed; trying again")


def stub_running(processes: list[psutil.Process], model: str) -> psutil.Process:
    """The stub among `processes` that runs `model` (a killed one may linger as a zombie)."""
    for process in processes:
        if model_of(process) == model:
            return process
    raise LookupError(f"no stub runs {model}")


@functools.lru_cache(maxsize=1024)
def model_of(process: psutil.Process) -> str | None:
    """The model a stub runs, from its command line (the model's `NAME/1/model.py`), read
    once: a dead stub's can no longer be read."""
    with contextlib.suppress(psutil.Error):
        for arg in process.cmdline():
            if arg.endswith("/1/model.py"):
                return Path(arg).parent.parent.name
    return None


def session_of(process: psutil.Process) -> int | None:
    """The process's session id (a launched Triton's is its pid), None once it is gone."""
    try:
        return os.getsid(process.pid)
    except OSError:  # gone meanwhile
        return None


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return "(gone)"


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stub_regions(stubs: list[psutil.Process]) -> list[Path]:
    """The shared memory region each stub was started with (named on its command line)."""
    regions = []
    for stub in stubs:
        try:
            regions += [SHM / arg for arg in stub.cmdline() if arg.startswith(SHM_PREFIX)]
        except psutil.Error:  # gone meanwhile
            continue
    return regions


def shm_mapped_by(pids) -> set[str]:
    """The /dev/shm names these processes map."""
    names = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:  # gone, or not ours to read
            continue
        names.update(line.split("/dev/shm/", 1)[1].split(" ")[0] for line in maps.splitlines() if "/dev/shm/" in line)
    return names


def shm_inodes_mapped() -> set[int]:
    """The inodes of the /dev/shm files that some process maps. By inode, not name: a
    POSIX semaphore (multiprocessing's `sem.mp-*`, which vLLM's processes open by name)
    is mapped under the temporary name it was made with, so its own name is never seen
    mapped, and removing it would break another server starting beside this one."""
    inodes = set()
    for pid in psutil.pids():
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:  # gone, or not ours to read
            continue
        inodes.update(int(line.split()[4]) for line in maps.splitlines() if "/dev/shm/" in line)
    return inodes


def remove_unmapped(paths) -> int:
    """Remove those of `paths` (in /dev/shm) that no process maps; returns how many."""
    in_use, removed = shm_inodes_mapped(), 0
    for path in paths:
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile
            if path.stat().st_ino not in in_use:
                path.unlink()
                removed += 1
    return removed


def remove_stale_regions() -> int:
    """Remove the Python backend's shared memory regions that no process uses: those of
    a Triton that crashed or was killed. Returns how many."""
    return remove_unmapped(SHM.glob(SHM_PREFIX + "*"))


def check_ar_model(directory: str) -> None:
    """VoiceError, saying what to do, unless the AR family can start from `directory`."""
    missing = [part for part in ("talker", "snac") if not (Path(directory) / part).is_dir()]
    if missing:
        raise VoiceError(f"AR model {directory}: no {' or '.join(missing)} directory in it (an Orpheus-format "
                         "model directory holds talker/, the Llama, and snac/, its SNAC decoder)")
    if not (AR_VENV / "bin" / "python").exists():
        raise VoiceError(f"AR model {directory}: no AR environment at {AR_VENV}; run `scripts/setup.sh --ar`")


def chat_model_dir(chat_model: str) -> str:
    """The chat model's directory: `chat_model` itself, or for EMBEDDED_CHAT the embedded
    SmolLM2, converted from its GGUF once (in the vLLM environment, which reads GGUF)."""
    if not (AR_VENV / "bin" / "python").exists():
        raise VoiceError(f"chat model: no vLLM environment at {AR_VENV}; run `scripts/setup.sh --chat`")
    if chat_model != EMBEDDED_CHAT:
        if not (Path(chat_model) / "config.json").exists():
            raise VoiceError(f"chat model {chat_model}: not a Hugging Face model directory (no config.json)")
        return chat_model
    run = subprocess.run([str(AR_VENV / "bin" / "python"), "-m", "python_backends.thinker.gguf_model"],
                         cwd=PROJECT_ROOT, capture_output=True, text=True)
    if run.returncode:
        raise VoiceError(f"the embedded chat model could not be made: {run.stderr.strip().splitlines()[-1:]}")
    return run.stdout.strip().splitlines()[-1]


def add_voices_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--voices", default=os.environ.get(VOICES_ENV),
        help=f"a directory of Piper voices (NAME.onnx beside NAME.onnx.json) to serve besides the embedded one "
             f"(env {VOICES_ENV})",
    )
    parser.add_argument(
        "--ar-model", default=os.environ.get(AR_MODEL_ENV),
        help=f"an Orpheus-format model directory (talker/ and snac/) to serve the autoregressive family from "
             f"(env {AR_MODEL_ENV})",
    )
    add_chat_arguments(parser)


def add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--chat-model", default=os.environ.get(CHAT_MODEL_ENV),
        help=f"a chat model directory (Hugging Face, Llama- or Qwen-style) for the voice chat's Thinker, or "
             f"'{EMBEDDED_CHAT}' for the embedded SmolLM2-135M-Instruct (env {CHAT_MODEL_ENV})",
    )
    add_chat_flag(parser)


def add_chat_flag(parser: argparse.ArgumentParser) -> None:
    """--chat, the embedded chat model: a shorthand for --chat-model embedded."""
    parser.add_argument("--chat", dest="chat_model", action="store_const", const=EMBEDDED_CHAT,
                        help=f"voice chat on the embedded chat model: --chat-model {EMBEDDED_CHAT}")


def add_gpu_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", action="store_true", default=os.environ.get(GPU_ENV) == "1",
                        help=f"load each model's configs/{GPU_CONFIG}.pbtxt where it has one: the AR family's Talker "
                             f"and Code2Wav on the GPU (env {GPU_ENV}=1)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="speechstream-triton", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("TRITON_HOST", "127.0.0.1"), help="address to bind (env TRITON_HOST)")
    parser.add_argument("--http-port", type=int, default=int(os.environ.get("TRITON_HTTP_PORT", 8000)), help="env TRITON_HTTP_PORT")
    parser.add_argument("--grpc-port", type=int, default=int(os.environ.get("TRITON_GRPC_PORT", 8001)), help="env TRITON_GRPC_PORT")
    parser.add_argument("--metrics-port", type=int, default=int(os.environ.get("TRITON_METRICS_PORT", 8002)), help="env TRITON_METRICS_PORT")
    parser.add_argument("--model-repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument("--log-verbose", type=int, default=0)
    add_voices_argument(parser)
    add_gpu_argument(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    server = TritonServer(
        args.http_port, args.grpc_port, args.metrics_port, args.host, args.model_repository, args.log_verbose, args.voices,
        args.ar_model, args.chat_model, args.gpu,
    )
    stopping = threading.Event()

    def stop(signum, _frame):
        log.info("received %s; stopping tritonserver", signal.Signals(signum).name)
        stopping.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        server.start()
    except VoiceError as e:
        log.error("%s", e)
        return 2
    try:
        server.wait_ready()
    except (RuntimeError, TimeoutError) as e:
        log.error("%s", e)
        server.stop()
        return 1
    log.info("ready: gRPC %s:%d, HTTP %s:%d, metrics %s:%d", args.host, args.grpc_port, args.host, args.http_port, args.host, args.metrics_port)
    server.supervise(stopping)  # Triton drains in-flight requests (up to 30 s) as it stops
    return server.stop().exit_code


if __name__ == "__main__":
    sys.exit(main())
