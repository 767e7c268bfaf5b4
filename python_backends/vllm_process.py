"""The processes a vLLM engine runs in, shared by the Talker and the Thinker. Runs in
the vLLM environment, before the engine starts.

vLLM 0.32 runs a CPU engine in two processes, its engine core and a worker that runs
the model, and each awaits the other's next message spinning (`sched_yield`) for up to
a second after the last. While a stream is generated the engine core waits that way
through every step of the worker's, and takes most of a core. On a small host that is
the core Code2Wav, the BLS models, the gateway and its clients need. Run in the engine
core's process instead (its "uni" executor, which a GPU engine uses anyway), the model
computes on the engine core's own threads, and nothing spins.
"""

from __future__ import annotations

import os


def compute_in_engine_core() -> None:
    """Have the engine about to start (its engine core is a child process) run its model
    in its engine core's process, on one core fewer than this process may use (at least
    one), as many as vLLM's worker would have had. The operator's environment wins."""
    # On a CPU, vLLM moves a single-process engine to its worker process unless this is 0.
    # It also stops vLLM's synchronous LLMEngine from starting an engine core process;
    # the async engine used here always starts one.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) - 1)))
