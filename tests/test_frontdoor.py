"""The front door: what a new user does first. The README's first command is
`make experiment`, on experiments/quick.yaml; a fresh clone runs it as written
(with REPETITIONS=1, the README's setting for one run per combination), and every client of the shipped
matrices runs with a relative --out from a working directory that is not the
repository (a relative path once broke every scp and ftp cell: sshd changes
to / and vsftpd took its anon_root as given). Those runs use umask 000, the
most permissive a user could have: run directories are still 0700 and the
servers, which chroot before dropping root, still reach their files."""

from __future__ import annotations

import glob
import json
import os
import sqlite3
import stat
import subprocess
import time

import pytest
import yaml

from satbed_testlib import REPO, needs_root

SATBED_ON_PATH = "/usr/local/bin/satbed"


def matrix_clients() -> list[str]:
    """Every client the shipped experiment files name."""
    found: list[str] = []
    for path in sorted(glob.glob(os.path.join(REPO, "experiments", "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
        names = doc.get("axes", {}).get("client", []) + [doc.get("fixed", {}).get("client")]
        found += [c for c in names if c and c not in found]
    return found


def user_env() -> dict[str, str]:
    """A login shell's environment: nothing satbed's tests or Makefile set."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "USER", "LOGNAME")
    return {k: v for k, v in os.environ.items() if k in keep}


@needs_root
@pytest.mark.parametrize("client", matrix_clients())
def test_every_matrix_client_runs_with_a_relative_out_from_another_directory(client, tmp_path):
    cp = subprocess.run(["/usr/bin/python3", "-m", "satbed", "run", "--client", client, "--rtt", "0",
                         "--size", "1M", "--out", "runs"], cwd=tmp_path, capture_output=True, text=True,
                        timeout=300, env={**user_env(), "PYTHONPATH": REPO}, umask=0)
    assert cp.returncode == 0, cp.stderr
    run_dir = cp.stdout.splitlines()[0]
    assert os.path.isabs(run_dir) and run_dir.startswith(str(tmp_path / "runs") + os.sep)
    assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700
    summary = json.loads(cp.stdout.splitlines()[1])
    if client == "ping":
        assert summary["rtt_ms_avg"] > 0
        return
    if client != "nuttcp-udp":      # memory to memory: nothing to verify
        assert summary["integrity"] == "ok"
    # Bits per second: 1 MB at RTT 0 crosses in about a second, so a goodput in
    # bytes per second (8 times lower) fails.
    assert summary["goodput_bps"] > 2e6, summary


def test_the_readme_starts_with_make_experiment_on_quick_yaml():
    """The README's first command, and what it runs: experiments/quick.yaml's
    36 cells (the fresh-clone test below runs each of its combinations once)."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        quick_start = f.read().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [ln.split("#")[0].strip() for ln in quick_start.splitlines() if ln.startswith("    make ")]
    assert commands[0] == "make experiment", commands
    # -n: what make would run, run nothing (the build's recipes only printed).
    cp = subprocess.run(["make", "-n", "experiment"], cwd=REPO, capture_output=True, text=True, timeout=60,
                        env=user_env())
    matrix_lines = [ln for ln in cp.stdout.splitlines() if "-m satbed matrix " in ln]
    assert len(matrix_lines) == 1 and "-m satbed matrix experiments/quick.yaml --out runs/quick;" in \
        matrix_lines[0], cp.stdout
    from satbed.execution import matrix
    assert len(matrix.load(os.path.join(REPO, "experiments", "quick.yaml")).cells) == 36


@needs_root
def test_a_fresh_clone_runs_make_experiment_as_the_readme_says(tmp_path):
    """`git clone`, then `make experiment`, nothing else: every cell measures,
    make exits 0 and says where the report is. REPETITIONS=1, the README's
    documented setting, runs each of quick.yaml's 12 combinations once: every
    kind of cell `make experiment` runs, a third of the cells. JOBS=4, the
    README's other setting: the rest of the suite keeps the cores busy, and
    the matrix's default admission, which holds cells back while the machine
    is busy, would run them one after another (7 min where 4 at a time take
    about 2)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()
    clone = tmp_path / "satbed"
    subprocess.run(["git", "clone", "-q", REPO, str(clone)], check=True, timeout=120)
    subprocess.run(["git", "checkout", "-q", head], cwd=clone, check=True, timeout=60)
    # `make build` points the satbed command at the tree it built: put it back.
    saved = open(SATBED_ON_PATH, "rb").read() if os.path.exists(SATBED_ON_PATH) else None
    started = time.monotonic()
    try:
        cp = subprocess.run(["make", "experiment", "REPETITIONS=1", "JOBS=4"], cwd=clone, capture_output=True,
                            text=True, timeout=30 * 60, env=user_env())
    finally:
        if saved is not None:
            with open(SATBED_ON_PATH + ".tmp", "wb") as f:
                f.write(saved)
            os.chmod(SATBED_ON_PATH + ".tmp", 0o755)
            os.replace(SATBED_ON_PATH + ".tmp", SATBED_ON_PATH)
    wall = time.monotonic() - started
    tail = "\n".join((cp.stdout + cp.stderr).splitlines()[-30:])
    assert cp.returncode == 0, tail
    db = sqlite3.connect(str(clone / "runs" / "quick" / "results.sqlite"))
    statuses = [(s, e) for s, e in db.execute("SELECT status, error FROM cells")]
    spans = list(db.execute("SELECT started, finished FROM cells"))
    db.close()
    most_at_once = max(sum(1 for s, f in spans if s <= t < f) for t, _ in spans)
    assert len(statuses) == 12, tail
    assert [x for x in statuses if x[0] not in ("ok", "limited")] == [], tail
    assert 2 <= most_at_once <= 4, (most_at_once, tail)
    assert "report: " in cp.stdout and (clone / "runs" / "quick" / "report.html").is_file(), tail
    print(f"make experiment REPETITIONS=1 JOBS=4 in a fresh clone: {wall:.0f} s")
