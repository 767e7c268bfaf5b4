"""The unit tier: no server, no subprocess. A test here that starts a process, in its
fixtures too, fails, so that `scripts/test --fast` stays fast and needs nothing but the
server's environment. Libraries' own probes of the machine are let through."""

import os
import sys
from collections.abc import Generator

import pytest

_PROCESS_EVENTS = {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.system", "os.exec"}
# torch reads the CPU's topology with lscpu, matplotlib its fonts with fc-list, ctypes
# finds libraries with ldconfig: probes a unit test does not choose.
_MACHINE_PROBES = {"lscpu", "fc-list", "ldconfig", "ldconfig.real", "uname"}
_in_unit_test = False


def _program(args: tuple) -> str:
    """The program's name: every one of these events gives its path (os.system, its command) first."""
    words = os.fsdecode(args[0]).split() if args and args[0] else [""]
    return os.path.basename(words[0])


def _no_process(event: str, args: tuple) -> None:
    if _in_unit_test and event in _PROCESS_EVENTS and _program(args) not in _MACHINE_PROBES:
        raise RuntimeError(f"a unit test started a process ({event}: {args!r:.200}); it belongs in tests/integration")


sys.addaudithook(_no_process)  # audit hooks stay for the interpreter's life: the flag turns this one on


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    yield from _guarded()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield from _guarded()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield from _guarded()


def _guarded() -> Generator[None, None, None]:
    global _in_unit_test
    _in_unit_test = True
    try:
        return (yield)
    finally:
        _in_unit_test = False
