"""Runs killed at ten moments after their testbed's record appears, from setup
to teardown, alternately by SIGKILL and by a double Ctrl-C, so each way meets
every phase once: after SIGKILL and `satbed clean`, or after a double Ctrl-C alone, nothing of the run is
left (records, links, namespace shells, processes, payloads and keys), and an
interrupted run's result.json says so."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import time

import pytest

from satbed.core.proc import BIN_DIR
from satbed_testlib import REPO, needs_root, root_links, satbed

pytestmark = [needs_root, pytest.mark.skipif(not os.path.exists(os.path.join(BIN_DIR, "satemu")),
                                             reason="bin/satemu not built (make build)")]

# Seconds after the run's record appears (its testbed exists): setup, PEP start,
# payload, transfer, teardown.
MOMENTS = (0.0, 0.5, 1.2, 1.9, 2.7, 3.7, 5.2, 6.7, 8.7, 11.7)
# Two moments per phase: one for each way of killing. Both ways at all ten
# moments took 371 s of `make test`, the SIGKILL half serialised (its clean
# takes every dead owner's testbed).
SIGKILL_MOMENTS, CTRL_C_MOMENTS = MOMENTS[0::2], MOMENTS[1::2]
RECORD_WAIT_S = 60
def _start(out: str) -> subprocess.Popen:
    return subprocess.Popen(["/usr/bin/python3", "-m", "satbed", "run", "--client", "scp", "--pep", "pepd",
                             "--rtt", "100", "--size", "8M", "--out", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": REPO})


def _prefixes_of(pid: int) -> set[str]:
    found = set()
    for path in glob.glob("/run/satbed/sb*.json"):
        try:
            with open(path, encoding="utf-8") as f:
                if json.load(f).get("owner_pid") == pid:
                    found.add(os.path.basename(path)[:-5])
        except (OSError, ValueError):
            pass
    return found


def _watch_until(p: subprocess.Popen, moment: float) -> set[str]:
    """The testbed prefixes the run owns by `moment` seconds after its record
    appeared. Waiting for the record, not for a time since the start, means a
    slow start never leaves the test with no prefix and so nothing to check."""
    deadline = time.monotonic() + RECORD_WAIT_S
    while not (prefixes := _prefixes_of(p.pid)) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert prefixes, f"no testbed record from the run within {RECORD_WAIT_S} s"
    deadline = time.monotonic() + moment
    while time.monotonic() < deadline:
        prefixes |= _prefixes_of(p.pid)
        time.sleep(0.05)
    return prefixes | _prefixes_of(p.pid)


def _left(prefix: str, out: str) -> list[str]:
    """What a run with this prefix left on the machine and on disk."""
    left = [f"record {prefix}"] if os.path.exists(f"/run/satbed/{prefix}.json") else []
    left += [f"link {ln}" for ln in root_links() if ln.startswith(prefix + "-")]
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
    left += [f"process {p.strip()}" for p in ps if f"mininet:{prefix}" in p or f"/{prefix}-" in p
             or f"-{prefix}/" in p]
    left += [f"files {d}" for d in glob.glob(os.path.join(out, f"*-{prefix}", "files"))]
    return left


def _wait_gone(prefix: str, out: str, limit: float = 10) -> list[str]:
    deadline = time.monotonic() + limit
    while (left := _left(prefix, out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.mark.parametrize("moment", SIGKILL_MOMENTS)
def test_sigkill_then_clean_leaves_nothing(moment, tmp_path):
    out = str(tmp_path)
    p = _start(out)
    prefixes = _watch_until(p, moment)
    p.kill()
    p.wait()
    cp = satbed("clean", timeout=120)
    assert cp.returncode == 0, cp.stderr
    for prefix in prefixes:
        assert _wait_gone(prefix, out) == [], cp.stdout


@pytest.mark.parametrize("moment", CTRL_C_MOMENTS)
def test_double_ctrl_c_leaves_nothing_and_says_interrupted(moment, tmp_path):
    out = str(tmp_path)
    p = _start(out)
    prefixes = _watch_until(p, moment)
    p.send_signal(signal.SIGINT)
    time.sleep(0.5)
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode in (0, 130), err      # 0: the transfer ended before the first Ctrl-C
    for prefix in prefixes:
        assert _wait_gone(prefix, out) == [], err
    if p.returncode == 130:
        for res in glob.glob(os.path.join(out, "*", "result.json")):
            assert json.load(open(res))["error"] == "interrupted"
