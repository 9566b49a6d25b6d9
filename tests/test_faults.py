"""Faults on the path during a transfer: a PEP killed on either side, or the
emulator killed, is named as the failure within seconds (not the client it
stranded, minutes later at its timeout); and outage schedules count from the
transfer's start, so an outage at offset 0 meets the transfer, not the
testbed's setup."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import time

import pytest

from satbed.core.proc import BIN_DIR
from satbed_testlib import REPO, needs_root, satbed

pytestmark = [needs_root, pytest.mark.skipif(
    not all(os.path.exists(os.path.join(BIN_DIR, b)) for b in ("satemu", "pepd")),
    reason="bin/satemu and bin/pepd not built (make build)")]

NAMED_WITHIN_S = 10


def _start(tmp_path, *extra: str) -> subprocess.Popen:
    # 40 MB at 8 Mbit/s and 600 ms: a minute of transfer to interrupt.
    return subprocess.Popen(["/usr/bin/python3", "-m", "satbed", "run", "--client", "scp", "--rtt", "600",
                             "--size", "40M", "--captures", "none", "--out", str(tmp_path), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": REPO})


def _wait_for(path_glob: str, limit: float = 120) -> str:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        found = glob.glob(path_glob)
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"nothing matched {path_glob} within {limit} s")


def _transfer_running(tmp_path) -> None:
    """Wait until the payload is crossing: the received copy has grown."""
    received = _wait_for(os.path.join(str(tmp_path), "*", "files", "scp", "ground", "payload.bin"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if os.path.exists(received) and os.path.getsize(received) > 1 << 20:
            return
        time.sleep(0.2)
    raise AssertionError("the transfer never got going")


def _kill_and_time(p: subprocess.Popen, pid: int) -> tuple[float, str]:
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    try:
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return time.monotonic() - killed, err


@pytest.mark.parametrize("node", ["pepA", "pepB"])
def test_a_pep_killed_mid_transfer_is_named_within_seconds(node, tmp_path):
    p = _start(tmp_path, "--pep", "pepd")
    _transfer_running(tmp_path)
    pidfile = _wait_for(os.path.join(str(tmp_path), "*", "pep", node, "pepd.pid"))
    seconds, err = _kill_and_time(p, int(open(pidfile).read().strip()))
    print(f"pepd on {node} killed: the run ended {seconds:.1f} s later")
    assert p.returncode == 2, err
    assert f"PEP pepd on {node} is down" in err, err
    # The interval check, then the client's stop and the teardown.
    assert seconds < NAMED_WITHIN_S + 20, f"{seconds:.1f} s: {err}"
    (res,) = glob.glob(os.path.join(str(tmp_path), "*", "result.json"))
    result = json.load(open(res))
    assert f"PEP pepd on {node} is down" in result["error"]
    dead = result["pep"]["nodes"][node]
    assert dead["running"] is False and "pepd not running" in dead["down"], dead


def test_the_emulator_killed_mid_transfer_is_named(tmp_path):
    p = _start(tmp_path)
    _transfer_running(tmp_path)
    out = subprocess.run(["pgrep", "-f", f"satemu .*-stats-dir {tmp_path}"], capture_output=True, text=True)
    pids = [int(x) for x in out.stdout.split()]
    assert len(pids) == 1, out
    seconds, err = _kill_and_time(p, pids[0])
    print(f"satemu killed: the run ended {seconds:.1f} s later")
    assert p.returncode == 2, err
    assert "emulator satemu on emulator exited" in err, err
    assert seconds < NAMED_WITHIN_S + 20, f"{seconds:.1f} s: {err}"


def test_an_outage_at_offset_zero_meets_the_transfer_not_the_setup(tmp_path):
    exp = tmp_path / "outage.yaml"
    exp.write_text("fixed: {client: scp, pep: none, rtt: 100, size: 2M, emulator: userspace, captures: none,\n"
                   "        link: {outage: {period_s: 120, down_s: 2, offset_s: 0}}}\n")
    out = str(tmp_path / "m")
    cp = satbed("matrix", str(exp), "--out", out, timeout=300)
    assert cp.returncode == 0, cp.stderr
    (res,) = glob.glob(os.path.join(out, "cells", "*", "result.json"))
    result = json.load(open(res))
    assert result["integrity"] == "ok"
    assert set(result["schedule_clock_started_s"]) == {"emulator"}
    # The outage's 2 s fell on the transfer: it lost frames, and it took at least that long.
    totals = result["emulator"]["stats"]["totals"]
    print(json.dumps(totals))
    assert _outage_drops(totals) > 0, totals
    assert result["seconds"] > 2


def _outage_drops(doc) -> int:
    """Every count filed under an outage key anywhere in satemu's totals."""
    if isinstance(doc, dict):
        return sum(v if "outage" in k and isinstance(v, int) else _outage_drops(v) for k, v in doc.items())
    if isinstance(doc, list):
        return sum(_outage_drops(v) for v in doc)
    return 0
