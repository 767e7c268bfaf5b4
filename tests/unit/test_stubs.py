"""Triton's stubs as /proc shows them (python_backends/stubs.py): `children` over a fake
/proc, and `StubWatch` over a /proc given as a function and a clock (a real process's
states: tests/integration/test_stubs.py)."""

from python_backends.stubs import LATELY_S, LEARN_EVERY_S, StubWatch, children, model_of

VOCODER = ["triton_python_backend_stub", "/models/vocoder/1/model.py", "triton_python_backend_shm_region_1"]
TTS = ["triton_python_backend_stub", "/models/tts/1/model.py", "triton_python_backend_shm_region_2"]


def test_children_are_read_from_proc_with_their_state_and_command_line(tmp_path):
    for pid, parent, state, args in [(10, 1, "S", VOCODER), (11, 1, "Z", [""]), (12, 2, "S", TTS)]:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (triton_python_b) {state} {parent} {pid} 0 -1\n")
        (tmp_path / str(pid) / "cmdline").write_bytes("\0".join(args).encode())
    (tmp_path / "13").mkdir()  # gone while read
    assert children(1, tmp_path) == {10: ("S", VOCODER), 11: ("Z", [""])}
    assert model_of(VOCODER) == "vocoder" and model_of([""]) is None


class FakeProc:
    def __init__(self) -> None:
        self.now = 0.0
        self.procs = {10: ("S", VOCODER), 11: ("S", VOCODER), 12: ("S", TTS)}
        self.reads = 0

    def read(self):
        self.reads += 1
        return dict(self.procs)

    def state_of(self, pid: int) -> str | None:
        return self.procs[pid][0] if pid in self.procs else None


def test_a_stub_dead_stopped_or_reaped_makes_its_model_faulty_for_a_while():
    proc = FakeProc()
    watch = StubWatch(proc.read, proc.state_of, now=lambda: proc.now)
    watch.learn()
    assert not watch.faulty("vocoder") and not watch.faulty("tts")
    proc.procs[11] = ("Z", [""])  # killed: its model is known from before
    assert watch.faulty("vocoder") and not watch.faulty("tts")
    proc.now += LATELY_S  # the supervisor replaced it long since
    assert not watch.faulty("vocoder")
    proc.procs[13] = ("S", VOCODER)
    watch.learn()
    proc.procs[13] = ("T", VOCODER)  # stopped
    assert watch.faulty("vocoder")
    proc.now += LATELY_S
    del proc.procs[12]  # reaped
    assert watch.faulty("tts") and not watch.faulty("vocoder")


def test_a_stub_never_seen_alive_is_not_known_and_learning_reads_proc_at_most_every_few_seconds():
    proc = FakeProc()
    watch = StubWatch(proc.read, proc.state_of, now=lambda: proc.now)
    watch.learn()
    watch.learn()
    assert proc.reads == 1
    proc.now += LEARN_EVERY_S
    watch.learn()
    assert proc.reads == 2
    proc.procs[14] = ("Z", [""])  # born and killed between two reads: whose it was is not known
    assert not watch.faulty("vocoder") and not watch.faulty("tts")
