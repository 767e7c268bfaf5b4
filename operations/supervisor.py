"""A tritonserver kept serving. Triton 2.51 does not replace a dead Python backend stub,
and its model never answers again: a dead stub of a model with another live instance (a
vocoder's) is replaced by loading that model again, with no stream cut; otherwise the
whole server restarts when it exits or one of its stubs dies."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import Future
from dataclasses import dataclass, field

from operations.process_tree import alive, kill_all, model_of
from operations.triton_process import TritonProcess

log = logging.getLogger("speechstream.triton")

SUPERVISE_INTERVAL_S = 0.5
RELOAD_TIMEOUT_S = 120  # a model's new instances load within this (a vocoder's in seconds)
RETIRE_AFTER_S = 2.0  # after a reload, the old instances finish the calls they hold before they are killed


@dataclass
class TritonServer(TritonProcess):
    """A tritonserver process and its stubs, which `supervise` keeps serving."""

    _reloads: int = field(default=0, init=False, repr=False)  # models reloaded to replace a dead instance

    def restart(self, why: str) -> None:
        """Kill the server and its stubs, start again and wait until ready."""
        log.error("restarting tritonserver: %s", why)
        self.kill()
        self.start(self._stdout)
        self.wait_ready()
        log.info("tritonserver is back")

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
        self._load(model, urllib.request.Request(f"{base}/repository/models/{model}/load", data=body, method="POST",
                                                 headers={"Content-Type": "application/json"}))
        self._watch([stub for stub in self.stubs() if stub not in old])
        time.sleep(RETIRE_AFTER_S)  # the windows the old instances hold end; a killed stub's calls fail only after ~1 s
        kill_all([stub for stub in old if alive(stub)], wait=False)  # tritonserver reaps them; `fault` sees them dead

    def _load(self, model: str, load: urllib.request.Request) -> None:
        """Send Triton's load request and await its answer, or raise once tritonserver has
        exited meanwhile: a load cut short that way was left unanswered, and the
        supervisor, waiting on it, did not restart the server for RELOAD_TIMEOUT_S."""
        answered: Future[None] = Future()

        def post() -> None:
            try:
                urllib.request.urlopen(load, timeout=RELOAD_TIMEOUT_S).close()
                answered.set_result(None)
            except urllib.error.HTTPError as e:
                answered.set_exception(RuntimeError(f"Triton refused to load {model}: {e.read().decode(errors='replace')}"))
            except Exception as e:  # a connection reset or timed out: raised in the supervisor's thread
                answered.set_exception(e)

        threading.Thread(target=post, name=f"load-{model}", daemon=True).start()  # a daemon: exit never waits on it
        while True:
            try:
                return answered.result(timeout=SUPERVISE_INTERVAL_S)
            except TimeoutError:
                if self.process.poll() is not None:
                    raise RuntimeError(f"tritonserver exited while loading {model}") from None

    def replaceable(self) -> str | None:
        """The model whose dead stubs can be replaced without stopping Triton: Triton is
        up, and every dead stub ran one model that still has a live instance to serve."""
        if self.process.poll() is not None:
            return None
        dead = {model_of(stub) for stub in self._stubs if not alive(stub)}
        live = {model_of(stub) for stub in self._stubs if alive(stub)}
        return next(iter(dead)) if len(dead) == 1 and dead <= live and None not in dead else None

    def supervise(self, stopping: threading.Event) -> None:
        """Keep the server serving until `stopping` is set: reload the model of a dead
        stub that has another live instance, else restart the whole server. A restart
        that fails is tried again."""
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
