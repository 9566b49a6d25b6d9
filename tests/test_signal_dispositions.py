"""satbed.cli.main called in-process hands back the signal dispositions it was
given, on every way out: a return, a one-line error, a bug, argparse's exit,
SIGTERM and Ctrl-C, through each place that changes a disposition on the
way (the matrix parent's stopping, a run's shielded teardown, the testbed's
teardown, the path watch, the container shell). A process that called it
otherwise keeps, say, SIGINT ignored, and so does every child it starts.

Nothing is built: what would touch the machine is patched away, and the code
that changes the dispositions runs as it stands."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import tempfile
import time
from types import SimpleNamespace

import pytest

import satbed_testlib  # noqa: F401  (puts the repository on sys.path)
from satbed import cli, worker
from satbed.backends import records, testbed
from satbed.backends.nodeshell import NodeShell
from satbed.core.errors import SatbedError
from satbed.execution import runner, supervisor
from satbed.execution.session import Session

QUICK = os.path.join(satbed_testlib.REPO, "experiments", "quick.yaml")
WATCHED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


def dispositions() -> dict[int, object]:
    return {s: signal.getsignal(s) for s in WATCHED}


def in_process(argv: list[str]) -> tuple[int, str]:
    """(exit status, stderr) of `satbed ARGV` run by cli.main in this process."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = cli.main(argv)
        except SystemExit as e:     # argparse, and SIGTERM unwinding
            rc = e.code if isinstance(e.code, int) else 2
    return rc, err.getvalue()


@pytest.fixture()
def before(monkeypatch, tmp_path):
    """The dispositions a caller had (SIGHUP ignored, as under nohup), put back
    by the test whatever happens; nothing reaches the machine's records."""
    monkeypatch.setattr(records, "RECORD_DIR", str(tmp_path / "records"))
    monkeypatch.setattr(cli, "require_root", lambda: None)
    monkeypatch.setattr(supervisor, "require_root", lambda: None)
    saved = dispositions()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        yield dispositions()
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def _report(action):
    def cmd_report(args) -> int:
        return action()
    return cmd_report


def _raise(e: BaseException):
    def action():
        raise e
    return action


def _sigterm() -> int:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)     # the handler raises before this ends
    return 0


# The ways out of cli.main itself, taken by `satbed report` doing what each says.
@pytest.mark.parametrize("action, status", [
    (lambda: 0, 0),
    (_raise(SatbedError("bad input")), 2),
    (_raise(RuntimeError("a bug")), 70),
    (_raise(KeyboardInterrupt()), 130),
    (_sigterm, 128 + signal.SIGTERM),
], ids=["return", "error", "bug", "ctrl-c", "sigterm"])
def test_main_hands_back_the_dispositions(before, monkeypatch, tmp_path, action, status):
    monkeypatch.setattr(cli, "cmd_report", _report(action))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))     # where a bug's traceback is saved
    assert in_process(["report", str(tmp_path)])[0] == status
    assert dispositions() == before


def test_argparse_exit_hands_back_the_dispositions(before):
    assert in_process(["matrix", "--no-such-option"])[0] == 2
    assert dispositions() == before


def test_an_interrupted_matrix_hands_back_the_dispositions(before, monkeypatch, tmp_path):
    class Meter:
        def sample(self) -> None:
            raise KeyboardInterrupt     # Ctrl-C in the parent's loop: the stopping path

    monkeypatch.setattr(supervisor, "CpuMeter", Meter)
    monkeypatch.setattr(supervisor, "unavailable", lambda cells, backend: {})
    monkeypatch.setattr(supervisor, "clean_leftovers", lambda: [])

    def spawned(*args, **kw):
        raise AssertionError("a cell started: this test must build nothing")
    monkeypatch.setattr(supervisor, "spawn", spawned)
    monkeypatch.setattr(supervisor, "spawn_batch", spawned)
    rc, err = in_process(["matrix", QUICK, "--out", str(tmp_path / "m")])
    assert rc == 130 and "running cells stopped" in err, err
    assert dispositions() == before


class _Emulator:
    """Up at the check before the transfer, down at the watcher's first look."""

    def __init__(self) -> None:
        self.looks = 0

    def down(self) -> str:
        self.looks += 1
        return "" if self.looks == 1 else "emulator sat: exited"


def _build(inside):
    def build(self: Session) -> None:
        self.tb.started = True      # so the testbed's own teardown runs
        inside(self)
    return build


def _watched(session: Session) -> None:
    from_watch = signal.getsignal(signal.SIGUSR1)
    with runner.watch.guarded([], [_Emulator()], interval=0.05):
        assert signal.getsignal(signal.SIGUSR1) is not from_watch
        time.sleep(5)   # the watcher's SIGUSR1 ends this


class _Pep:
    """A started PEP whose health is always up, counting how often it is asked."""

    def __init__(self, name: str, runs_nothing: bool) -> None:
        self.name, self.runs_nothing, self.started, self.asked = name, runs_nothing, True, 0
        self.node = SimpleNamespace(name=f"node-{name}")

    def health(self) -> tuple[bool, str]:
        self.asked += 1
        return True, f"{self.name}: up"


def test_the_path_watch_asks_only_the_peps_that_run_something_during_the_transfer():
    """`none` in a namespace starts nothing: asked before and after the
    transfer, not every interval (40 cells at once asked 16 times a second)."""
    none, pepd = _Pep("none", True), _Pep("pepd", False)
    with runner.watch.guarded([none, pepd], [], interval=0.05):
        time.sleep(0.5)
    assert none.asked == 2
    assert pepd.asked >= 6


def _interrupted_twice(session: Session) -> None:
    stop = Session.stop

    def stop_under_ctrl_c(self: Session, result: dict) -> None:
        os.kill(os.getpid(), signal.SIGINT)     # noted by shielded(), not raised
        stop(self, result)
    session.stop = stop_under_ctrl_c.__get__(session)
    raise KeyboardInterrupt


# `satbed run`: a path that goes down mid-transfer (the path watch), and a Ctrl-C
# with a second one during the teardown (shielded, the testbed's teardown).
@pytest.mark.parametrize("inside, status, said", [
    (_watched, 2, "during the transfer: emulator sat: exited"),
    (_interrupted_twice, 130, "tearing the testbed down; please wait"),
], ids=["path-down", "ctrl-c-twice"])
def test_a_run_hands_back_the_dispositions(before, monkeypatch, tmp_path, inside, status, said):
    stopped = []
    monkeypatch.setattr(Session, "build", _build(inside))
    monkeypatch.setattr(testbed.Testbed, "stop", lambda self, stop=testbed.Testbed.stop: stopped.append(stop(self)))
    rc, err = in_process(["run", "--client", "ping", "--out", str(tmp_path / "runs")])
    assert rc == status and said in err, err
    assert stopped, "the testbed's teardown did not run"
    assert dispositions() == before


def test_the_container_shell_hands_back_the_dispositions(before, monkeypatch):
    class Proc:
        def wait(self) -> int:
            return 0

    class Node:
        procs: list = []
        netns = None        # holds no namespace of its own

        def release_netns(self) -> None:
            pass

        def popen(self, args, **kw) -> Proc:
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN     # Ctrl-C is the command's
            self.procs.append(proc := Proc())
            return proc

        def stop(self) -> None:
            pass

    def start(self: testbed.Testbed, backend) -> None:
        self.nodes["clientA"] = Node()
        self.started = True     # so the testbed's own teardown runs, outside any shield

    def cmdloop(self: NodeShell) -> None:
        self.onecmd("clientA true")
        raise KeyboardInterrupt

    monkeypatch.setattr(testbed.Testbed, "start", start)
    monkeypatch.setattr(NodeShell, "cmdloop", cmdloop)
    assert in_process(["cli", "--backend", "docker"])[0] == 130
    assert dispositions() == before


def test_the_cell_worker_hands_back_the_dispositions(before, monkeypatch, tmp_path):
    def run_cell(cell_dir: str, analyze) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(worker.cellrun, "run_cell", run_cell)
    with pytest.raises(KeyboardInterrupt):
        worker.main(["cell", str(tmp_path)])
    assert dispositions() == before
