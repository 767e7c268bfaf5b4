"""A pytest plugin (tests/conftest.py loads it): the suite fails if it leaves anything in
/dev/shm that was not there when it started. Triton's stubs, vLLM's processes and
Python's multiprocessing all map memory there, and a machine that runs the suite or
restarts the servers often would lose that memory for good."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHM = Path("/dev/shm")
AT_START = pytest.StashKey[set[str]]()


def entries() -> set[str]:
    return set(os.listdir(SHM)) if SHM.is_dir() else set()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[AT_START] = entries()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    left = sorted(entries() - session.config.stash.get(AT_START, set()))
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"the suite left {len(left)} entries in {SHM}: {', '.join(left)}", red=True)
    if exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
