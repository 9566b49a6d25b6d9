"""The Slurm executor on a real Slurm cluster: Debian's slurmctld and two
slurmd nodes with munge, in containers (docker/slurm/cluster.sh), this
machine the submit host with Debian's Slurm client tools. A small matrix runs
across both nodes with each cell's node recorded and resumes; the fidelity
check measures a cell on both nodes and records it; Ctrl-C cancels the array and the matrix
resumes; a node killed mid-cell has its cell requeued and finished on the
other node. Where Slurm or Docker is missing these tests
fail (conftest's CI allow-list has no skip for them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time

import pytest

from satbed_testlib import REPO, images_lock, needs_root, satbed
from satbed.backends import docker
from satbed.core.errors import SatbedError
from satbed.execution import fidelity, slurm
from satbed.results import store
from satbed.results.store import CellRow, Store

CLUSTER = os.path.join(REPO, "docker", "slurm", "cluster.sh")
# Where the tcp client's receiver writes, in a cell's directory, as bytes arrive.
RECEIVED = os.path.join("files", "tcp", "recv", "payload.bin")
NODES = ("node1", "node2")
# Four link-bound cells (1 MB at 2 Mbit/s over 100 ms): a few seconds each.
SMALL = """name: slurm-small
description: four small tcp cells for the Slurm executor's tests
repetitions: 2
timeout: 120
fixed: {client: tcp, pep: none, emulator: userspace, rate: 2mbit, size: 1M, direction: download, ber: 0,
        captures: none, analyze: false}
axes:
  rtt: [0, 100]
"""
# One cell to lose its node in, or to Ctrl-C: 2 MB at 1 Mbit/s over 600 ms,
# about 20 s. The tests act once its first bytes have arrived (_mid_cell), so
# it need only outlast that moment; the cell then runs again whole on resume
# or requeue, so each second of it is paid twice.
LONG = """name: slurm-long
description: one tcp cell of about 20 s, for killing its node or Ctrl-C mid-transfer
repetitions: 1
timeout: 180
fixed: {pep: none, emulator: userspace, rate: 1mbit, size: 2M, direction: download, ber: 0,
        captures: none, analyze: false, rtt: 600}
axes:
  client: [tcp]
"""


def _name() -> str:
    return f"satbed-slurm-{os.getpid()}"


@pytest.fixture(scope="module")
def slurm_cluster():
    """slurmctld and two slurmd nodes, the satbed/slurm image built first
    where it is not current; removed with their network afterwards."""
    for tool in slurm.TOOLS:
        assert shutil.which(tool), f"{tool} missing: `make deps` installs slurm-client"
    assert shutil.which("docker"), "docker missing"
    # The nodes run this checkout's satemu (build-images.sh, called here before, checked it too).
    assert os.access(os.path.join(REPO, "bin", "satemu"), os.X_OK), "bin/satemu missing: run `make build`"
    # Under the images lock, as every module's image build: a build beside
    # another worker's would bootstrap Debian and build satbed/base twice at once.
    with images_lock():
        docker.build_images(["slurm"], log=lambda line: None)
    name = _name()
    # The shared directory: the same path on this host and in every node.
    root = tempfile.mkdtemp(prefix="satbed-slurm-", dir="/var/tmp")
    try:
        up = subprocess.run([CLUSTER, "up", name, root, str(len(NODES))], capture_output=True, text=True,
                            timeout=300)
        assert up.returncode == 0, up.stderr
        yield {"name": name, "root": root, "env": {"SLURM_CONF": up.stdout.strip()}}
    finally:
        subprocess.run([CLUSTER, "down", name, root], capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)
        left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=org.satbed.slurm={name}"],
                              capture_output=True, text=True, timeout=60).stdout.split()
        assert not left, f"cluster containers left: {left}"


def _experiment(cluster: dict, text: str, name: str) -> str:
    path = os.path.join(cluster["root"], "shared", f"{name}.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _rows(out: str) -> list:
    with Store(os.path.join(out, "results.sqlite")) as store:
        return store.cells()


# ------------------------------------------------------------ no cluster needed

@pytest.mark.parametrize("version", [1, 2])
def test_an_older_store_gains_the_later_columns_and_keeps_its_rows(tmp_path, version):
    path = str(tmp_path / "results.sqlite")
    db = sqlite3.connect(path)
    schema = store_schema(version)
    assert " cpu_s " not in schema and (" node " in schema) == (version == 2)
    db.executescript(schema)
    db.execute("INSERT INTO cells (hash, experiment, params, config, repetition, status) "
               "VALUES ('h1', 'e', '{}', '{}', 0, 'ok')")
    db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()
    with Store(path, read_only=True) as kept:        # read as it is: its later columns unknown
        [row] = kept.cells()
        assert row.hash == "h1" and row.node is None and row.cpu_s is None
    with Store(path) as opened:
        [row] = opened.cells()
        assert row.hash == "h1" and row.node is None and row.cpu_s is None
        opened.put(CellRow(hash="h2", experiment="e", params={}, config={}, repetition=0, status="ok",
                           node="n1", cpu_s=12.5))
        assert (opened.get("h2").node, opened.get("h2").cpu_s) == ("n1", 12.5)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == store.STORE_FORMAT == 3


def store_schema(version: int) -> str:
    """An older format's shape: today's, less the columns added since."""
    later = [name for name, _ in store.LATER_COLUMNS][version - 1:]
    lines = store.SCHEMA.split("\n")
    kept = [line for line in lines if line.split()[:1] not in ([n] for n in later)]
    # The table's last column ends without a comma.
    return re.sub(r",([ \t]*(?:--[^\n]*)?\n\);)", r"\1", "\n".join(kept), count=1)


def test_a_requeued_task_clears_what_its_lost_attempt_left(tmp_path):
    cell = tmp_path / "cells" / "abc"
    (cell / "logs").mkdir(parents=True)
    (cell / "cell.json").write_text("{}")
    (cell / "result.json").write_text("half")
    (cell / "logs" / "x").write_text("half")
    (tmp_path / "array").mkdir()
    (tmp_path / "array" / slurm.TASKS_FILE).write_text(json.dumps([str(cell)]))
    env = {"SLURM_ARRAY_TASK_ID": "0", "SLURMD_NODENAME": "node2", "SLURM_RESTART_COUNT": "1",
           "SLURM_ARRAY_JOB_ID": "7"}
    assert slurm.prepare_task(str(tmp_path / "array"), env) == str(cell)
    assert sorted(os.listdir(cell)) == ["cell.json", "cell.node"]
    doc = json.loads((cell / "cell.node").read_text())
    assert (doc["node"], doc["restarts"], doc["job"]) == ("node2", 1, "7")
    with pytest.raises(SatbedError, match="no cell for array task"):
        slurm.prepare_task(str(tmp_path / "array"), {**env, "SLURM_ARRAY_TASK_ID": "1"})


class _CancelledMidCell(slurm.SlurmExecutor):
    """A cluster whose tasks run until scancel, which, as Slurm does, signals
    every process of each task: `as_cancelled` is what each cell then wrote
    as its exit status (None: nothing)."""

    def __init__(self, dirs: list[str], as_cancelled: list[str | None]):
        super().__init__(poll_s=0.01)
        object.__setattr__(self, "scene", {"dirs": dirs, "as_cancelled": as_cancelled, "cancelled": False})

    def states(self, job):
        state = "CANCELLED" if self.scene["cancelled"] else "RUNNING"
        return {i: (state, "node1") for i in range(len(self.scene["dirs"]))}

    def cancel(self, job):
        self.scene["cancelled"] = True
        for d, rc in zip(self.scene["dirs"], self.scene["as_cancelled"]):
            if rc is not None:
                with open(os.path.join(d, slurm.EXIT_FILE), "w", encoding="ascii") as f:
                    f.write(rc + "\n")


def test_ctrl_c_records_what_the_cancel_ended_as_interrupted(tmp_path):
    """A cell that writes a failure as the cancel kills its transfer was
    stopped, not failed (a resumed matrix runs it again); one that finished
    before the Ctrl-C, or finishes in success meanwhile, keeps its result."""
    dirs = [str(tmp_path / str(i)) for i in range(4)]
    for d in dirs:
        os.makedirs(d)
    executor = _CancelledMidCell(dirs, ["1", None, "0", None])
    recorded = {}

    def record(cell, started, cell_dir, rc, why):
        recorded[cell] = (rc, why)

    def ctrl_c():
        # Cell 3 fails after the poll looked and before the Ctrl-C.
        with open(os.path.join(dirs[3], slurm.EXIT_FILE), "w", encoding="ascii") as f:
            f.write("1\n")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        executor.wait("7", [slurm.Task(f"cell{i}", d) for i, d in enumerate(dirs)], record, ctrl_c)
    assert recorded == {"cell0": (None, "interrupted"), "cell1": (None, "interrupted"), "cell2": (0, None),
                        "cell3": (1, None)}


@needs_root
def test_a_matrix_spreads_over_the_nodes_records_them_and_resumes(slurm_cluster):
    exp = _experiment(slurm_cluster, SMALL, "small")
    out = os.path.join(slurm_cluster["root"], "shared", "small")
    cp = satbed("matrix", exp, "--out", out, "--executor", "slurm", env=slurm_cluster["env"], timeout=600)
    assert cp.returncode == 0, cp.stderr[-2000:]
    rows = _rows(out)
    assert len(rows) == 4 and {r.status for r in rows} == {"ok"}, [(r.status, r.error) for r in rows]
    assert {r.node for r in rows} == set(NODES), [r.node for r in rows]
    for r in rows:
        assert r.goodput_bps and r.metrics.get("integrity") == "ok"
        with open(os.path.join(out, "cells", r.hash, "cell.node"), encoding="utf-8") as f:
            assert json.load(f)["node"] == r.node
    # Resume: nothing left to run, so nothing is submitted.
    with open(os.path.join(out, slurm.JOB_FILE), encoding="utf-8") as f:
        job = json.load(f)["job"]
    again = satbed("matrix", exp, "--out", out, "--executor", "slurm", env=slurm_cluster["env"], timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "4 already done, 0 to run" in again.stderr
    with open(os.path.join(out, slurm.JOB_FILE), encoding="utf-8") as f:
        assert json.load(f)["job"] == job
    # --retry after a cell is marked failed runs that cell alone again.
    db = sqlite3.connect(os.path.join(out, "results.sqlite"))
    db.execute("UPDATE cells SET status = 'failed' WHERE hash = ?", (rows[0].hash,))
    db.commit()
    db.close()
    retry = satbed("matrix", exp, "--out", out, "--executor", "slurm", "--retry", env=slurm_cluster["env"],
                   timeout=300)
    assert retry.returncode == 0, retry.stderr[-2000:]
    assert "3 already done, 1 to run" in retry.stderr
    assert {r.status for r in _rows(out)} == {"ok"}


@pytest.mark.parametrize("goodputs, medians, diff", [
    # one slow round on node2 does not move its median
    ({"node1": [1.90e6, 1.91e6, 1.92e6], "node2": [1.60e6, 1.93e6, 1.94e6]}, {"node1": 1.91e6, "node2": 1.93e6},
     100 * 0.02 / 1.91),
    # apart by a share of the lower, whichever node that is
    ({"node1": [2.0e6, 2.0e6, 2.0e6], "node2": [1.95e6, 1.95e6, 1.9e6]}, {"node1": 2.0e6, "node2": 1.95e6},
     100 * 0.05 / 1.95),
    ({"node1": [1.0e6], "node2": [1.0e6]}, {"node1": 1.0e6, "node2": 1.0e6}, 0.0),
])
def test_two_nodes_are_compared_by_their_median_goodputs(goodputs, medians, diff):
    got_medians, got_diff = fidelity.node_agreement(goodputs)
    assert got_medians == medians and got_diff == pytest.approx(diff)


@needs_root
def test_the_fidelity_check_measures_a_cell_on_each_node(slurm_cluster):
    # Whether the two nodes agree within 2 % is a measurement, taken on a quiet
    # machine (docs/guide/slurm.md): here both "nodes" share two cores with the
    # rest of the suite. This checks what the executor ran and recorded.
    exp = _experiment(slurm_cluster, SMALL.replace("rtt: [0, 100]", "rtt: [0]"), "fidelity")
    out = os.path.join(slurm_cluster["root"], "shared", "fidelity")
    cp = satbed("matrix", exp, "--out", out, "--executor", "slurm", "--fidelity", env=slurm_cluster["env"],
                timeout=300)
    assert "fidelity:" in cp.stdout, cp.stderr[-2000:]
    [run] = os.listdir(os.path.join(out, "fidelity"))
    with open(os.path.join(out, "fidelity", run, "fidelity.json"), encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["ran_on"] == {n: n for n in NODES}
    # Three rounds on each node, each a 1 MB transfer through a 2 Mbit/s link:
    # in bits per second, below the link's rate and not far below it.
    assert sorted(doc["goodputs_bps"]) == sorted(NODES) and doc["rounds"] == 3
    for n in NODES:
        assert len(doc["goodputs_bps"][n]) == 3 and all(1.0e6 < g < 2.0e6 for g in doc["goodputs_bps"][n]), doc
    medians, diff = fidelity.node_agreement(doc["goodputs_bps"])
    assert doc["nodes"] == medians and doc["diff_pct"] == pytest.approx(diff)
    assert doc["agree"] == (diff <= fidelity.NODE_AGREEMENT_PCT)
    # The command's verdict is the record's: exit 1 when the nodes disagree.
    assert cp.returncode == (0 if doc["agree"] else 1), (cp.returncode, doc)
    assert f"{diff:.2f}% apart" in cp.stdout


def _wait(what, predicate, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _start(cluster: dict, exp: str, out: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": REPO, **cluster["env"]}
    # SIGINT as a terminal gives it. cli.main hands back what it changes (test_signal_dispositions.py),
    # but pytest itself may start with SIGINT ignored (a background job of a non-interactive shell
    # is), and a child that inherits SIG_IGN keeps ignoring Ctrl-C: this test would then prove nothing.
    return subprocess.Popen(["/usr/bin/python3", "-m", "satbed", "matrix", exp, "--out", out, "--executor", "slurm"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _mid_cell(parent: subprocess.Popen, out: str) -> str:
    """The hash of the one cell once a node runs it and its transfer has
    delivered its first bytes: the cell is then surely running, with most of
    its transfer still to come."""
    def transferring():
        assert parent.poll() is None, parent.communicate()[1][-2000:]
        try:
            [h] = os.listdir(os.path.join(out, "cells"))
        except (FileNotFoundError, ValueError):
            return None
        d = os.path.join(out, "cells", h)
        try:
            got = os.path.getsize(os.path.join(d, RECEIVED))
        except OSError:
            return None
        return h if got > 0 and os.path.exists(os.path.join(d, "cell.node")) else None
    return _wait("the cell's transfer to start on a node", transferring, 180)


@needs_root
def test_ctrl_c_cancels_the_array_and_the_matrix_resumes(slurm_cluster):
    exp = _experiment(slurm_cluster, LONG, "interrupted")
    out = os.path.join(slurm_cluster["root"], "shared", "interrupted")
    parent = _start(slurm_cluster, exp, out)
    try:
        h = _mid_cell(parent, out)
        with open(os.path.join(out, slurm.JOB_FILE), encoding="utf-8") as f:
            job = json.load(f)["job"]
        # The signal must find the cell running, or the test proves nothing.
        assert parent.poll() is None and not os.path.exists(os.path.join(out, "cells", h, "cell.exit"))
        parent.send_signal(signal.SIGINT)
        _, stderr = parent.communicate(timeout=120)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert parent.returncode == 130, stderr[-2000:]
    # The array is cancelled, not left running on the nodes.
    q = subprocess.run(["squeue", "-h", "-r", "-j", job, "--states=all", "-o", "%T"], capture_output=True, text=True,
                       timeout=30, env={**os.environ, **slurm_cluster["env"]})
    assert q.returncode == 0 and set(q.stdout.split()) == {"CANCELLED"}, q.stdout + q.stderr
    [row] = _rows(out)
    assert row.status == "interrupted"
    again = satbed("matrix", exp, "--out", out, "--executor", "slurm", env=slurm_cluster["env"], timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "0 already done, 1 to run" in again.stderr
    [row] = _rows(out)
    assert row.status == "ok" and row.metrics.get("integrity") == "ok"


@needs_root
def test_a_node_killed_mid_cell_has_its_cell_requeued_on_the_other(slurm_cluster):
    exp = _experiment(slurm_cluster, LONG, "long")
    out = os.path.join(slurm_cluster["root"], "shared", "long")
    parent = _start(slurm_cluster, exp, out)
    try:
        h = _mid_cell(parent, out)
        with open(os.path.join(out, "cells", h, "cell.node"), encoding="utf-8") as f:
            killed = json.load(f)["node"]
        subprocess.run(["docker", "kill", f"{slurm_cluster['name']}-{killed}"], check=True, timeout=60,
                       capture_output=True)
        stdout, stderr = parent.communicate(timeout=400)
        assert parent.returncode == 0, stderr[-2000:]
        [row] = _rows(out)
        assert row.status == "ok" and row.node != killed and row.node in NODES, (row.status, row.error, row.node)
        with open(os.path.join(out, "cells", h, "cell.node"), encoding="utf-8") as f:
            assert json.load(f)["restarts"] >= 1
        assert row.metrics.get("integrity") == "ok"
    finally:
        if parent.poll() is None:
            parent.send_signal(signal.SIGINT)
            parent.wait(timeout=120)
