"""Experiment matrices: file validation, cell identity, scheduling defaults,
the report from stored data, and real parallel runs with resume."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satbed_testlib import REPO, needs_root, satbed
from satbed.core.errors import SatbedError

SMOKE = os.path.join(REPO, "experiments", "smoke.yaml")


def write(tmp_path, text: str) -> str:
    p = tmp_path / "exp.yaml"
    p.write_text(text)
    return str(p)


def test_smoke_file_expands_to_distinct_stable_cells():
    from satbed.execution import matrix
    one, two = matrix.load(SMOKE), matrix.load(SMOKE)
    assert len(one.cells) == 8
    assert [c.hash for c in one.cells] == [c.hash for c in two.cells]
    assert len({c.hash for c in one.cells}) == 8
    # Repetitions differ only by seed, and the seed is part of the identity.
    reps = {c.repetition: c.config["seed"] for c in one.cells}
    assert reps == {0: 1, 1: 2}


def test_a_cell_keeps_its_identity_in_another_checkout(monkeypatch):
    # Scenario, topology and link-profile paths are absolute in a cell's
    # configuration; a resume from another clone must find the same cells.
    from satbed.execution import matrix
    from satbed.model import experiment
    for name in ("scenarios/outage.yaml", "experiments/wanrate-adapt.yaml"):
        cells = matrix.load(os.path.join(REPO, name)).cells
        assert any(REPO in json.dumps(c.config) for c in cells), name
        moved = [json.loads(json.dumps(c.config).replace(REPO, "/srv/another-clone")) for c in cells]
        monkeypatch.setattr(experiment, "REPO_ROOT", "/srv/another-clone")
        assert [experiment.cell_digest(m) for m in moved] == [c.hash for c in cells], name
        monkeypatch.undo()


def test_loss_is_in_a_cells_identity_and_absent_where_zero(tmp_path):
    """Per-packet loss is recorded in the cell's configuration (so two error
    models never share a cell), and a cell without it keeps the identity it
    had before loss existed: no loss key, the same hash as loss: 0 written out."""
    from satbed.execution import matrix
    base = "fixed: {client: ping, pep: none, emulator: userspace}\n"
    none = matrix.load(write(tmp_path, base)).cells[0]
    zero = matrix.load(write(tmp_path, "fixed: {client: ping, pep: none, emulator: userspace, loss: 0}\n")).cells[0]
    lossy = matrix.load(write(tmp_path, "fixed: {client: ping, pep: none, emulator: userspace, loss: 0.001%}\n")).cells[0]
    assert "loss" not in none.config["link"]["a_to_b"] and none.hash == zero.hash
    assert lossy.config["link"]["a_to_b"]["loss"] == lossy.config["link"]["b_to_a"]["loss"] == pytest.approx(1e-5)
    assert lossy.hash != none.hash


def test_changing_any_parameter_changes_the_hash(tmp_path):
    from satbed.execution import matrix
    base = "fixed: {client: ping, pep: none, emulator: userspace, rate: 8mbit}\n"
    h = matrix.load(write(tmp_path, base)).cells[0].hash
    for extra in ("  rtt: 100\n", "  ber: 1e-7\n", "  loss: 1e-5\n", "  size: 2M\n", "  queue: 50\n",
                  "  link: {cburst_bytes: 0}\n"):
        text = "fixed:\n  client: ping\n  pep: none\n  emulator: userspace\n  rate: 8mbit\n" + extra
        assert matrix.load(write(tmp_path, text)).cells[0].hash != h, extra
    assert matrix.load(write(tmp_path, base), backend="docker").cells[0].hash != h


@pytest.mark.parametrize("text, message", [
    ("fixed: {client: ping}\nbogus: 1\n", "top level: Additional properties are not allowed ('bogus' was unexpected)"),
    ("fixed: {colour: red}\n", "fixed.colour: unknown parameter"),
    ("axes: {client: [ping, telnetx]}\n", "axes.client: unknown client 'telnetx'"),
    ("axes: {pep: [none, nosuchpep]}\n", "axes.pep: unknown PEP 'nosuchpep'"),
    ("axes: {ber: [0, 2]}\n", "axes.ber: BER must be in [0, 1)"),
    ("axes: {rtt: [fast]}\n", "axes.rtt: bad rtt 'fast'"),
    ("axes: {size: [10Q]}\n", "axes.size: bad size '10Q'"),
    ("axes: {rtt: []}\n", "axes.rtt: [] is too short"),
    ("axes: {rtt: 600}\n", "axes.rtt: 600 is not of type 'array'"),
    ("axes: {rtt: [0, 0]}\n", "axes.rtt: repeated value"),
    ("fixed: {rtt: 0}\naxes: {rtt: [0]}\n", "axes.rtt: also given in fixed"),
    ("repetitions: 0\n", "repetitions: 0 is less than the minimum of 1"),
    ("fixed: {direction: sideways}\n", "fixed.direction: 'sideways' is not one of"),
    ("fixed: {link: {warp: 9}}\n", "fixed.link: unknown link field 'warp'"),
    ("fixed: {emulator: bridge, rtt: 100}\n", "bridge is a plain bridge"),
    ("fixed: [1, 2]\n", "fixed: [1, 2] is not of type 'object', 'null'"),
    ("fixed: {rtt: [\n", "not valid YAML"),
    ("variants: {a: {}}\n", "variants: {'a': {}} is not of type 'array', 'null'"),
    ("variants: [{set: {rtt: 0}}]\n", "variants.0: 'name' is a required property"),
    ("axes: {rtt: [0, 100]}\nvariants: [{name: x, set: {rtt: 0}}]\n", "variants.0.set.rtt: also an axis"),
    ("variants: [{name: x, set: {rtt: fast}}]\n", "variants.0.set.rtt: bad rtt 'fast'"),
    ("variants: [{name: x, clients: [nosuch]}]\n", "variants.0.clients: unknown client 'nosuch'"),
    ("variants: [{name: x, clients: [ftp]}, {name: x, clients: [ftp, scp]}]\n", "'x' given twice for the same client"),
    ("axes: {client: [scp, saratoga]}\nreference: {colour: red}\n", "reference.colour: not a parameter"),
    ("axes: {client: [scp, ftp]}\nreference: {client: saratoga}\n", "reference: no cell has client=saratoga"),
    ("axes: {client: [scp, saratoga]}\nreference: {rtt: soon}\n", "reference.rtt: bad rtt 'soon'"),
])
def test_bad_files_fail_with_one_line(tmp_path, text, message):
    from satbed.execution import matrix
    from satbed.core.errors import SatbedError
    path = write(tmp_path, text)
    with pytest.raises(SatbedError) as e:
        matrix.load(path)
    assert message in str(e.value)
    assert str(e.value).startswith(path)
    assert "\n" not in str(e.value)


def test_cli_reports_bad_file_in_one_line(tmp_path):
    cp = satbed("matrix", write(tmp_path, "axes: {client: [nosuch]}\n"), "--out", str(tmp_path / "o"))
    assert cp.returncode == 2
    assert cp.stderr.count("\n") == 1 and "unknown client 'nosuch'" in cp.stderr


def test_variants_are_named_bundles_over_fixed_and_may_be_limited_to_clients(tmp_path):
    from satbed.execution import matrix
    text = ("fixed: {pep: none, rtt: 500, emulator: userspace, rate: 2mbit}\n"
            "axes: {client: [ftp, scp]}\n"
            "variants:\n"
            "  - {name: ground, set: {rtt: 0}}\n"
            "  - {name: split, set: {pep: pepd, pep_options: wan_buf=195000}}\n"
            "  - {name: legacy, clients: [ftp], set: {queue: 20}}\n"
            "  - {name: legacy, clients: [scp], set: {queue: 30}}\n")
    cells = matrix.load(write(tmp_path, text)).cells
    got = sorted((c.params["client"], c.params["variant"], c.params["rtt"], c.params["pep"], c.params["queue"])
                 for c in cells)
    assert got == [("ftp", "ground", 0.0, "none", None), ("ftp", "legacy", 500.0, "none", 20),
                   ("ftp", "split", 500.0, "pepd", None),
                   ("scp", "ground", 0.0, "none", None), ("scp", "legacy", 500.0, "none", 30),
                   ("scp", "split", 500.0, "pepd", None)]
    split = next(c for c in cells if c.params["variant"] == "split")
    assert split.config["pep_options"] == "wan_buf=195000" and "[split]" in split.label()


def test_shipped_scenarios_with_variants():
    from satbed.execution import matrix
    sg = matrix.load(os.path.join(REPO, "scenarios", "split-gateways.yaml")).cells
    assert sorted(c.params["variant"] for c in sg) == [
        "gateways", "gateways-study-q10", "gateways-study-q10-paced", "gateways-study-q10-paced-rcv52k",
        "gateways-study-q10-paced-snd32k", "gateways-study-q10-paced-snd56k", "large-windows",
        "large-windows-q10", "large-windows-study-q10", "large-windows-study-q40", "satellite",
        "satellite-study-q10", "satellite-study-q10-rcv52k", "satellite-study-q10-snd32k",
        "satellite-study-q10-snd56k", "terrestrial", "terrestrial-study-q10"]
    by = {c.params["variant"]: c for c in sg}
    # The study's conditions: a 10-packet queue at the T1 port, Reno hosts without SACK.
    assert by["large-windows-study-q10"].config["profiles"] == {"server": "large-windows-195k-reno",
                                                                 "client": "large-windows-195k-reno"}
    assert by["large-windows-study-q10"].params["queue"] == 10 and by["satellite"].params["queue"] == 100
    assert by["terrestrial"].params["rtt"] == 0 and by["satellite"].params["rtt"] == 500
    assert by["large-windows"].config["profiles"] == {"server": "large-windows-195k", "client": "large-windows-195k"}
    assert by["gateways"].config["pep"] == "pepd" and by["gateways"].config["profiles"]["server"] == "default-64k"
    # The receiver's window from NcFTP's own buffer request, in those variants only: every
    # other cell's configuration, and so its hash, is as it was.
    assert {v: c.config["client_rcvbuf"] for v, c in by.items() if "client_rcvbuf" in c.config} == {
        "satellite-study-q10-rcv52k": 26800, "gateways-study-q10-paced-rcv52k": 26800}
    gh = matrix.load(os.path.join(REPO, "scenarios", "globalhawk.yaml")).cells
    today = [c for c in gh if c.params["variant"] == "today"]
    study = [c for c in gh if c.params["variant"] == "study"]
    # 6 clients x (none, pepd, pepd wan=rate) x 4 RTTs x 3 BERs.
    assert len(today) == len(study) == 216
    assert {c.config["pep_options"] for c in today if c.params["pep"] == "none"} == {""}
    # The study's hosts are NcFTP's for FTP and the 2.6.18 BIC host for
    # every other client (today's are the experiment file's: test_scenario).
    assert {c.config["profiles"]["clientA"] for c in study if c.params["client"] == "ftp"} == {"ncftp-3.2.2"}
    assert {c.config["profiles"]["clientA"] for c in study if c.params["client"] != "ftp"} == {"linux-2.6.18-bic"}
    # QUIC on today's hosts only, once per delay and BER, never behind a PEP.
    quic = [c for c in gh if c.params["client"] in ("quic", "http3")]
    assert len(quic) == 2 * 4 * 3 and {c.params["variant"] for c in quic} == {"quic"}
    assert {(c.config["pep"], c.config["pep_options"]) for c in quic} == {("none", "")}


def test_shipped_experiment_files_parse():
    from satbed.execution import matrix
    for name, cells in (("globalhawk", 6 * 3 * 4 * 3), ("quick", 3 * 2 * 2 * 3)):
        assert len(matrix.load(os.path.join(REPO, "experiments", f"{name}.yaml")).cells) == cells


def test_admission_fills_the_cpu_budget_by_cost(tmp_path):
    from satbed.execution import admission, matrix
    fast = matrix.load(write(tmp_path, "fixed: {client: scp, pep: none, rate: 8mbit, emulator: userspace}\n"
                                       "axes: {rtt: [0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100,"
                                       " 1200, 1300, 1400, 1500]}\n")).cells
    slow = matrix.load(write(tmp_path, "fixed: {client: scp, pep: none, rate: 8mbit, ber: 1e-5, emulator: userspace}\n"
                                       "axes: {rtt: [2000, 2500, 3000, 3500, 4000]}\n")).cells
    host = {"cores": 2, "mem_available": 16 << 30}
    admit = admission.Admission.for_host(None, host)
    assert admit.budget == pytest.approx(1.8)
    assert 0.1 < fast[0].cost < 0.12 and slow[-1].cost < 0.035     # 7.6 Mbit/s vs a loss-bound crawl
    running: list = []
    while (i := admit.pick(fast, [admission.Running(c, 0.0) for c in running])) is not None:
        running.append(fast.pop(i))
    assert len(running) == 15                    # 15 x 0.114 cores: a sixteenth would pass 1.8
    full = list(running)
    running.pop()                                # one ends: the five crawling ones fit in its place
    while (i := admit.pick(slow, [admission.Running(c, 0.0) for c in running])) is not None:
        running.append(slow.pop(i))
    assert len(running) == 19 and not slow
    assert sum(c.cost for c in running) <= 1.8
    assert admit.pick([], []) is None and admit.pick(full, []) == 0
    # Measured: the busy cores hold the cells as they are now; a cell still
    # warming up adds what its model says it is yet to take (less what its
    # control group measures). Settled cells that cost less than the model
    # said leave room; the same cells warming do not.
    assert all(c.warmup_s >= 20 for c in full)
    settled = [admission.Running(c, c.warmup_s) for c in full]
    warm = [admission.Running(c, c.warmup_s - 1) for c in full]
    assert admit.pick(full, settled) is None                      # no measurement: the model alone
    assert admit.pick(full, settled, busy=0.5) == 0               # 15 cells measured at 0.5 cores
    assert admit.pick(full, warm, busy=0.5) is None
    assert admit.pick(full, settled, busy=1.75) is None           # another program, or a model too low
    load = admission.Admission.load
    assert load(settled[:2] + warm[:1], 0.25) == pytest.approx(0.25 + full[0].cost)
    measured = [w._replace(cores=0.04) for w in warm[:3]]
    assert load(measured, 0.25) == pytest.approx(0.25 + sum(c.cost - 0.04 for c in full[:3]))
    assert load([warm[0]._replace(cores=5.0)], 0.25) == 0.25   # above its model: all of it is in busy already
    # Placement weighs the same remainders, on the cores they were pinned to.
    pinned = [m._replace(cpus=frozenset({1})) for m in measured]
    assert admission.pending_load(pinned + settled[:2] + [warm[0]._replace(cores=5.0)]) == \
        [pytest.approx((c.cost - 0.04, frozenset({1}))) for c in full[:3]]
    meter = admission.CpuMeter()
    meter.sample()
    sum(range(300000))
    time.sleep(0.1)     # every core's counters move (100 ticks a second)
    meter.sample()
    assert 0 <= meter.busy_cores() <= meter.cores
    per_core = meter.busy_by_core()
    assert set(per_core) == set(range(meter.cores)) and all(0 <= v <= 1 for v in per_core.values())
    # Memory bounds the count; a fixed --jobs ignores cost.
    assert admission.Admission.for_host(None, {"cores": 2, "mem_available": 600 << 20}).max_cells == 2
    fixed = admission.Admission.for_host(3, host)
    assert fixed.pick(full, settled[:2]) == 0 and fixed.pick(full, settled[:3]) is None
    # A cell whose cost exceeds the budget (1 Gbit/s) still runs, alone.
    big = full[0]
    big.cost = 20.0
    assert admit.pick([big], []) == 0 and admit.pick([big], settled[1:2]) is None
    # The wall time simulation: four 100 s full-rate cells fit at once.
    assert admit.simulate(full[1:5], [100, 100, 100, 100]) == 100
    assert admission.Admission.for_host(2, host).simulate(full[1:5], [100, 100, 100, 100]) == 200



def test_calibration_rescales_a_kind_by_what_its_finished_cells_took(tmp_path):
    """A finished cell's CPU over its wall time, against its model, rescales
    the cells of its kind (client, PEP, options, BER) still to start or
    warming; a kind with nothing finished borrows its PEP, options and BER's
    ratio, and one with neither keeps the model."""
    from satbed.execution import admission, matrix
    cells = matrix.load(write(tmp_path, "fixed: {pep: none, rate: 8mbit, emulator: userspace}\n"
                                        "axes: {client: [scp, ftp], ber: [0, 1e-5], rtt: [100, 300, 600]}\n")).cells
    model = {c.hash: c.cost for c in cells}
    kind = {(c.params["client"], c.params["ber"], c.params["rtt"]): c for c in cells}
    cal = admission.Calibration()
    first = kind[("scp", 0, 100)]
    cal.learn(first, cpu_s=0.5 * model[first.hash] * 100, seconds=100)      # took half its model
    cal.learn(kind[("scp", 0, 600)], cpu_s=None, seconds=100)                # no group: nothing learnt
    cal.learn(kind[("scp", 0, 300)], cpu_s=50.0, seconds=5)                  # mostly setup: nothing learnt
    cal.recost(cells)
    assert kind[("scp", 0, 300)].cost == pytest.approx(0.5 * model[kind[("scp", 0, 300)].hash])
    assert kind[("ftp", 0, 600)].cost == pytest.approx(0.5 * model[kind[("ftp", 0, 600)].hash])  # borrowed
    assert kind[("scp", 1e-5, 600)].cost == model[kind[("scp", 1e-5, 600)].hash]                # nothing known
    ftp = kind[("ftp", 0, 100)]
    cal.learn(ftp, cpu_s=100 * model[ftp.hash] * 100, seconds=100)             # a hundredfold: capped at 4
    cal.recost(cells)
    assert kind[("ftp", 0, 600)].cost == pytest.approx(4 * model[kind[("ftp", 0, 600)].hash])
    assert kind[("scp", 0, 600)].cost == pytest.approx(0.5 * model[kind[("scp", 0, 600)].hash])  # its own kind
    cal.recost(cells)       # again: from the model, not from the last cost
    assert kind[("scp", 0, 600)].cost == pytest.approx(0.5 * model[kind[("scp", 0, 600)].hash])


@needs_root
def test_a_cells_control_group_counts_what_it_started_and_goes_when_it_ends():
    """The admission reads a warming cell's load from its group: every
    process the worker starts, a daemon that left the worker's session (as
    the PEPs do) included. The group goes once its last process has."""
    from satbed.execution import cellgroup
    busy = "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done"
    # The worker's stand-in starts nothing before it is in the group (spawn_worker's order).
    worker = subprocess.Popen(["sh", "-c", f"sleep 0.3; setsid -f sh -c '{busy}'"])
    group = cellgroup.CellGroup.make(worker.pid)
    assert group is not None and os.path.basename(group.path) == f"{cellgroup.PREFIX}{worker.pid}"
    group.sample()
    assert not group.remove()                      # the worker is in it
    worker.wait(timeout=60)
    deadline = time.monotonic() + 60
    while True:
        group.sample()
        if group.remove():
            break
        assert time.monotonic() < deadline         # the daemon, reparented, keeps it
        time.sleep(0.1)
    assert group.samples[-1][1] > 0.1              # CPU-s: the daemon's loop, not just the shell's start
    assert not os.path.exists(group.path)
    # A killed matrix's empty group is removed by the next; a live one stays.
    live = subprocess.Popen(["sleep", "30"])
    kept = cellgroup.CellGroup.make(live.pid)
    left = cellgroup.CellGroup.make(os.getpid())
    assert kept is not None and left is not None
    with open(os.path.join(os.path.dirname(left.path), "cgroup.procs"), "w", encoding="ascii") as f:
        f.write(str(os.getpid()))                  # this process back out of it
    try:
        assert cellgroup.remove_leftovers() == [left.path]
        assert os.path.isdir(kept.path)
    finally:
        live.kill()
        live.wait()
        assert cellgroup.remove_all([kept]) == []


def test_cells_are_placed_on_the_least_loaded_core():
    from satbed.execution.admission import PIN_MAX_COST, CorePlacement
    two = CorePlacement((0, 1))
    running: list = []
    for cost in (0.19, 0.19, 0.03, 0.03, 0.19, 0.19, 0.19, 0.03):
        cpus = two.pick(cost, running)
        assert cpus is not None and len(cpus) == 1
        running.append((cost, cpus))
    load = [sum(c for c, cpus in running if core in cpus) for core in (0, 1)]
    assert load == pytest.approx([0.6, 0.44])   # each cell went where the least was running
    # A cell that may need more than a core runs free and weighs on both alike.
    assert two.pick(PIN_MAX_COST + 0.01, running) is None
    assert two.pick(0.1, [(1.0, None), (0.2, frozenset({1}))]) == frozenset({0})
    # Measured: each core's busy share, and the warming cells on top.
    assert two.pick(0.1, [], {0: 0.7, 1: 0.2}) == frozenset({1})
    assert two.pick(0.1, [(0.6, frozenset({1}))], {0: 0.7, 1: 0.2}) == frozenset({0})
    # One core: nothing to choose, nothing pinned; other cores than 0 and 1.
    assert CorePlacement((0,)).pick(0.1, []) is None
    assert CorePlacement((2, 5)).pick(0.1, [(0.1, frozenset({2}))]) == frozenset({5})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 0.5), st.one_of(st.none(), st.sampled_from([0, 1, 2]))), max_size=30),
       st.floats(0.0, 0.5))
def test_placement_picks_a_core_no_busier_than_any_other(cells, cost):
    from satbed.execution.admission import CorePlacement
    three = CorePlacement((0, 1, 2))
    running = [(c, None if core is None else frozenset({core})) for c, core in cells]
    cpus = three.pick(cost, running)
    assert cpus is not None and len(cpus) == 1 and cpus <= {0, 1, 2}
    load = {k: sum(c for c, p in running if p is not None and k in p) for k in (0, 1, 2)}
    (core,) = cpus
    assert all(load[core] <= load[k] + 1e-9 for k in load)


def _fake_store(out: str) -> None:
    """A partial Global Hawk matrix: no 600 ms cells, one BER missing at 300 ms,
    a failed cell, and three repetitions for intervals."""
    from satbed.results.store import CellRow, Store
    os.makedirs(out, exist_ok=True)
    with Store(os.path.join(out, "results.sqlite")) as s:
        n = 0
        for client in ("ftp", "scp", "saratoga"):
            for pep in ("none", "pepd"):
                for rtt in (0.0, 100.0, 300.0):
                    for ber in (0.0, 1e-7, 1e-5):
                        if rtt == 300.0 and ber == 1e-7:
                            continue
                        for rep in range(3):
                            n += 1
                            bps = 7.5e6 / (1 + rtt / 100 * (pep == "none")) * (1 - 40 * ber) * (1 + 0.01 * rep)
                            params = {"client": client, "pep": pep, "rtt": rtt, "ber": ber, "size": 1 << 20,
                                      "direction": "download", "rate": None, "emulator": "userspace"}
                            status = "failed" if n == 7 else "ok"
                            transfer = params["size"] * 8 / bps
                            s.put(CellRow(hash=f"{n:016x}", experiment="fake", params=params, config={},
                                          repetition=rep, status=status, goodput_bps=bps if status == "ok" else None,
                                          error="boom" if status != "ok" else None,
                                          metrics={"goodput_bps": bps, "seconds": transfer},
                                          started=time.time(), finished=time.time() + 4 + transfer,
                                          seconds=4.0 + transfer, estimate=4.0))
        # One cell directory with a graph, as the analysis layer leaves it.
        d = os.path.join(out, "cells", f"{1:016x}", "analysis", "lan_a")
        os.makedirs(d)
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        plt.plot([0, 1], [0, 1])
        plt.savefig(os.path.join(d, "tsg.png"))
        plt.close()


def test_report_draws_three_charts_from_a_partial_matrix(tmp_path):
    from satbed.report import charts
    from satbed.report.page import build
    out = str(tmp_path / "m")
    _fake_store(out)
    path = build(out)
    page = open(path).read()
    for name in ("chart1", "chart2", "chart3"):
        assert f"id='{name}'" in page
        assert os.path.getsize(os.path.join(out, "charts", f"{name}.png")) > 5000
    assert page.count("data:image/png;base64,") == 4       # three charts and the gallery graph
    assert "no 600 ms" not in page and "nearest present value" in page   # chart 2 falls back to 300 ms
    # The docs pages that explain it, as files of this checkout, with their paths in words.
    from satbed.core.proc import REPO_ROOT
    for rel in ("docs/guide/experiments.md", "docs/guide/results.md"):
        assert os.path.isfile(os.path.join(REPO_ROOT, rel))
        assert f"href='file://{os.path.join(REPO_ROOT, rel)}'><code>{rel}</code>" in page
    rows = open(os.path.join(out, "results.csv")).read().splitlines()
    assert len(rows) == 1 + 3 * 2 * 8 * 3
    head = rows[0].split(",")
    failed = [r.split(",") for r in rows[1:] if r.split(",")[head.index("status")] == "failed"]
    assert [r[head.index("hash")] for r in failed] == [f"{7:016x}"]
    # Chart 3 at BER 1e-5 has every RTT for every series, with intervals.
    from satbed.results.store import Store
    with Store(os.path.join(out, "results.sqlite")) as s:
        c3 = charts.draw_chart(s.cells(), *charts.CHARTS[2])
    assert c3["value"] == 1e-5
    pts = [p for p in c3["points"] if p["client"] == "scp" and p["pep"] == "pepd"]
    assert [p["rtt"] for p in pts] == [0.0, 100.0, 300.0]
    # Repetitions at b, 1.01 b and 1.02 b (b = 7.5e6 * (1 - 40 * 1e-5)): standard deviation
    # 0.01 b, so the interval is t(2 dof) 4.303 * 0.01 b / sqrt(3).
    b = 7.5e6 * (1 - 40 * 1e-5)
    assert all(p["n"] == 3 and p["ci95_bps"] == pytest.approx(4.303 * 0.01 * b / 3 ** 0.5, rel=1e-3)
               for p in pts), pts


def test_pepd_wan_rate_is_a_series_of_its_own(tmp_path):
    """The Global Hawk charts' rows: none, pepd (TCP WAN leg) and pepd
    wan=rate, each its own line, not pepd held at its most common options."""
    from satbed.execution import matrix
    from satbed.report import charts
    from satbed.report.page import build
    from satbed.results.store import CellRow, Store
    cells = matrix.load(write(tmp_path, "fixed: {client: scp, rtt: 600, emulator: userspace}\n"
                                        "axes: {pep: [none, pepd], pep_options: ['', wan=rate], ber: [0, 1e-5]}\n")).cells
    assert sorted((c.params["pep"], c.params["pep_options"]) for c in cells) == \
        [("none", ""), ("none", ""), ("pepd", ""), ("pepd", ""), ("pepd", "wan=rate"), ("pepd", "wan=rate")]
    assert any("pepd wan=rate" in c.label() for c in cells)
    out = str(tmp_path / "m")
    os.makedirs(out)
    with Store(os.path.join(out, "results.sqlite")) as s:
        for n, c in enumerate(cells):
            bps = {"none": 1e6, "": 5e6, "wan=rate": 7e6}[c.params["pep_options"] if c.params["pep"] == "pepd"
                                                           else "none"]
            s.put(CellRow(hash=f"{n:016x}", experiment="fake", params=c.params, config={}, repetition=0,
                          status="ok", goodput_bps=bps, error=None, metrics={"goodput_bps": bps},
                          started=time.time(), finished=time.time() + 10, seconds=10.0, estimate=10.0))
        rows = s.cells()
    c2 = charts.draw_chart(rows, *charts.CHARTS[1])
    got = {(p["pep"], p["ber"]): p["mean_bps"] for p in c2["points"]}
    assert got == {("none", 0.0): 1e6, ("none", 1e-5): 1e6, ("pepd", 0.0): 5e6, ("pepd", 1e-5): 5e6,
                   ("pepd wan=rate", 0.0): 7e6, ("pepd wan=rate", 1e-5): 7e6}
    page = open(build(out)).read()
    assert "pepd wan=rate" in page


def test_summary_compares_each_row_with_the_reference_row_of_the_same_conditions(tmp_path):
    """reference: {client: saratoga} puts each row beside Saratoga's row with
    the same PEP and BER: goodput over the whole command and after the first
    received byte (the application's set-up apart)."""
    from satbed.execution import matrix
    from satbed.report.page import build
    from satbed.report.summary import summary_table, terminal_summary
    from satbed.results.store import CellRow, Store
    exp = matrix.load(write(tmp_path, "fixed: {rtt: 600, emulator: userspace}\nreference: {client: saratoga}\n"
                                      "axes: {client: [saratoga, scp], ber: [0, 1e-5]}\n"))
    assert exp.reference == {"client": "saratoga"}
    figures = {("saratoga", 0.0): (8e6, 0.6), ("scp", 0.0): (6e6, 6.0),
               ("saratoga", 1e-5): (4e6, 0.6), ("scp", 1e-5): (4e6, 6.0)}
    rows = []
    for n, c in enumerate(exp.cells):
        bps, first = figures[(c.params["client"], c.params["ber"])]
        seconds = 100.0
        rows.append(CellRow(hash=f"{n:016x}", experiment="ref", params=c.params, config={}, repetition=0,
                            status="ok", goodput_bps=bps, metrics={
                                "goodput_bps": bps, "first_byte_s": first,
                                "goodput_after_first_byte_bps": bps * seconds / (seconds - first)},
                            started=time.time(), seconds=seconds))
    table = {(d["client"], d["ber"]): d for d in summary_table(rows, exp.reference)}
    assert table[("scp", 0.0)]["ref_pct"] == pytest.approx(75.0)
    assert table[("scp", 0.0)]["ref_after_first_byte_pct"] == pytest.approx(75.0 * 99.4 / 94.0)
    assert table[("scp", 1e-5)]["ref_pct"] == pytest.approx(100.0)
    assert table[("saratoga", 0.0)]["ref_pct"] == pytest.approx(100.0)
    text = terminal_summary(rows, reference=exp.reference)
    assert "% of saratoga" in text.splitlines()[0] and "1st byte s" in text.splitlines()[0]
    scp0 = next(line for line in text.splitlines() if line.startswith("scp") and " 0 " in line)
    assert "75.0 %" in scp0 and "6.00" in scp0
    # Without a reference the columns of percentages are absent.
    assert "% of" not in terminal_summary(rows)
    # The report redraws the same from the store: the run recorded its reference,
    # also in a database written before runs had that column.
    out = tmp_path / "m"
    out.mkdir()
    old = sqlite3.connect(out / "results.sqlite")
    old.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, experiment TEXT NOT NULL, file TEXT,"
                " jobs INTEGER, cells INTEGER, skipped INTEGER, started REAL, finished REAL, outcome TEXT, host TEXT)")
    old.commit()
    old.close()
    with Store(str(out / "results.sqlite")) as s:
        s.begin_run(exp.name, exp.file, 1, len(rows), 0, {}, reference=exp.reference)
        for r in rows:
            s.put(r)
        assert s.runs()[-1]["reference"] == {"client": "saratoga"}
    page = open(build(str(out))).read()
    assert "% of client=saratoga" in page and "75.0 %" in page and "s before the first byte" in page


def test_report_draws_the_three_charts_per_hosts_variant_from_a_matrix_without_600_ms(tmp_path):
    """Each variant's charts stand alone: chart 2 falls back to 300 ms within
    its own variant (it was once matched against the other variant's chart 1
    and failed with a KeyError)."""
    from satbed.report.page import build
    from satbed.results.store import CellRow, Store
    out = str(tmp_path / "v")
    os.makedirs(out)
    with Store(os.path.join(out, "results.sqlite")) as s:
        n = 0
        for variant in ("today", "study"):
            for pep in ("none", "pepd"):
                for rtt in (0.0, 300.0):
                    for ber in (0.0, 1e-5):
                        n += 1
                        bps = 7e6 / (1 + rtt / 100) * (1 - 40 * ber)
                        params = {"client": "ftp", "pep": pep, "rtt": rtt, "ber": ber, "size": 1 << 20,
                                  "direction": "download", "variant": variant}
                        s.put(CellRow(hash=f"{n:016x}", experiment="v", params=params, config={}, repetition=0,
                                      status="ok", goodput_bps=bps, metrics={"goodput_bps": bps, "seconds": 1.0}))
    page = open(build(out)).read()
    for v in ("today", "study"):
        assert f"id='chart1_{v}'" in page and f"id='chart3_{v}'" in page
        assert os.path.getsize(os.path.join(out, "charts", f"chart1_{v}.png")) > 5000
    assert "not drawn twice" not in page     # chart 2 at 300 ms is not chart 1 at 0 ms


def test_report_without_throughput_still_has_three_charts(tmp_path):
    from satbed.report.page import build
    from satbed.results.store import CellRow, Store
    out = str(tmp_path / "p")
    os.makedirs(out)
    with Store(os.path.join(out, "results.sqlite")) as s:
        s.put(CellRow(hash="a" * 16, experiment="p", params={"client": "ping", "pep": "none", "rtt": 0.0, "ber": 0.0,
                                                           "size": 1, "direction": "download"},
                      config={}, repetition=0, status="ok", metrics={"rtt_ms_avg": 1.5}))
    page = open(build(out)).read()
    assert page.count("class='chart'") == 3


def test_report_and_csv_carry_cpu_per_gb(tmp_path):
    """Cells that recorded both ends' CPU time show it per GB in the summary
    (mean over repetitions) and as seconds in results.csv."""
    from satbed.report.page import build
    from satbed.results.store import CellRow, Store
    out = str(tmp_path / "cpu")
    os.makedirs(out)
    with Store(os.path.join(out, "results.sqlite")) as s:
        for rep, client_s in enumerate((0.5, 0.7)):
            s.put(CellRow(hash=f"{rep:016x}", experiment="cpu",
                          params={"client": "saratoga", "pep": "none", "rtt": 600.0, "ber": 0.0, "size": 20_000_000,
                                  "direction": "download"},
                          config={}, repetition=rep, status="ok", goodput_bps=7e6,
                          metrics={"bytes": 20_000_000, "cpu_client_s": client_s, "cpu_server_s": 0.3}))
    page = open(build(out)).read()
    assert "CPU s per GB (both ends)" in page and "<td>45.0</td>" in page     # (0.8 + 1.0) / 2 / 0.02
    rows = open(os.path.join(out, "results.csv")).read().splitlines()
    head = rows[0].split(",")
    assert rows[1].split(",")[head.index("cpu_client_s")] == "0.5"
    assert rows[1].split(",")[head.index("cpu_server_s")] == "0.3"


def test_wall_estimate_interpolates_measured_cells(tmp_path):
    from satbed.execution import estimate, matrix
    out = str(tmp_path / "m")
    _fake_store(out)
    exp = matrix.load(write(tmp_path, "fixed: {client: nuttcp-tcp, pep: none, emulator: userspace, size: 4M,"
                                       " rate: 8mbit}\naxes: {rtt: [50, 300, 600], ber: [0, 1e-7]}\n"))
    est = estimate.wall_estimate(exp, [os.path.join(out, "results.sqlite")], jobs=1)
    # nuttcp-tcp borrows ftp's curve (seconds per byte at 0, 100 and 300 ms: 1, 2 and 4
    # units), interpolated at 50 ms and held beyond the last RTT measured (300 ms; 100 ms
    # at BER 1e-7, which the fake matrix lacks at 300 ms), scaled to 4 MiB, plus 4 s per cell.
    # By hand: one unit is 4 MiB at 7.5 Mbit/s, 4.474 s, times the repetitions' mean
    # 1/goodput factor (1 + 1/1.01 + 1/1.02) / 3 = 0.99016; units 1.5 + 4 + 4 at BER 0 and
    # 1.5 + 2 + 2 at 1e-7 (a factor 1/(1 - 4e-6) there): 42.08 + 24.37 s, plus 6 x 4 s.
    assert est["cells_without_measurement"] == 0 and est["cells_expected_to_stall"] == 0
    assert est["overhead_s"] == {"base": 4.0, "per_mb": 0.0}
    assert est["wall_seconds"] == pytest.approx(90.45, abs=0.5)      # whole seconds: 90


def test_wall_estimate_costs_cells_by_the_cpu_their_measured_kind_took(tmp_path, monkeypatch):
    """Stored cells that kept their CPU seconds calibrate the admission the
    estimate simulates, as a running matrix calibrates its own: cells that
    took four times their model's cores run fewer at once."""
    from satbed.execution import admission, estimate, matrix
    from satbed.results.store import CellRow, Store
    monkeypatch.setattr(admission, "host_info", lambda: {"cores": 2, "mem_available": 8 << 30})
    exp = matrix.load(write(tmp_path, "fixed: {pep: none, emulator: userspace, size: 1M, rate: 8mbit}\n"
                                      "axes: {client: [ftp, scp], rtt: [0, 100, 300, 600], ber: [0, 1e-7]}\n"))

    def store(name: str, ratio: float | None) -> str:
        path = str(tmp_path / name / "results.sqlite")
        os.makedirs(os.path.dirname(path))
        with Store(path) as s:
            for i, c in enumerate(exp.cells):
                s.put(CellRow(hash=c.hash, experiment="x", params=c.params, config=c.config, repetition=0,
                              status="ok", goodput_bps=7e6, metrics={"seconds": 96.0}, seconds=100.0,
                              cpu_s=None if ratio is None else ratio * c.cost * 100.0))
        return path

    model = estimate.wall_estimate(exp, [store("none", None)])
    same = estimate.wall_estimate(exp, [store("same", 1.0)])
    heavy = estimate.wall_estimate(exp, [store("heavy", 4.0)])
    assert model["cells_measuring_cpu"] == 0 and heavy["cells_measuring_cpu"] == len(exp.cells) == 16
    assert same["wall_seconds"] == model["wall_seconds"]
    assert heavy["wall_seconds"] > 2 * model["wall_seconds"]


# --- real runs -------------------------------------------------------------------------------

def _leftovers(out: str) -> list[str]:
    """Testbeds of this matrix's cells that are still around."""
    left = []
    for res in glob.glob(os.path.join(out, "cells", "*", "result.json")):
        prefix = json.load(open(res)).get("testbed_prefix")
        if prefix and os.path.exists(f"/run/satbed/{prefix}.json"):
            left.append(prefix)
        links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
        if prefix and f" {prefix}-" in links:
            left.append(prefix + " links")
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    left += [ln for ln in ps.splitlines() if "satbed.worker" in ln and out in ln]
    return left


def _statuses(out: str) -> dict[str, int]:
    db = sqlite3.connect(os.path.join(out, "results.sqlite"))
    try:
        return dict(db.execute("SELECT status, count(*) FROM cells GROUP BY status").fetchall())
    finally:
        db.close()


@needs_root
def test_smoke_runs_in_parallel_resumes_and_reports(tmp_path):
    out = str(tmp_path / "smoke")
    t0 = time.monotonic()
    cp = satbed("matrix", SMOKE, "--jobs", "4", "--out", out, timeout=300)
    first = time.monotonic() - t0
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout.splitlines()[-1]) == {"ok": 8, "limited": 0, "failed": 0, "timeout": 0, "skipped": 0}
    assert "[8/8] ok" in cp.stderr and "ETA" in cp.stderr
    assert _statuses(out) == {"ok": 8}
    assert len(os.listdir(os.path.join(out, "cells"))) == 8
    for res in glob.glob(os.path.join(out, "cells", "*", "result.json")):
        r = json.load(open(res))
        ber = json.load(open(os.path.join(os.path.dirname(res), "config.json")))["link"]["a_to_b"]["ber"]
        # loss is a fraction of the pings sent; at BER 1e-6 about 0.2 % of pings are lost:
        # at most one of these few, none at BER 0.
        assert r["loss"] == pytest.approx((r["sent"] - r["received"]) / r["sent"])
        assert r["sent"] - r["received"] <= (1 if ber else 0), r
    # Cells really ran side by side: the sum of cell times exceeds the wall time.
    db = sqlite3.connect(os.path.join(out, "results.sqlite"))
    cell_s = db.execute("SELECT sum(seconds) FROM cells").fetchone()[0]
    db.close()
    assert cell_s > 1.8 * first * 0.8
    assert _leftovers(out) == []

    # The resume runs nothing again: every cell's result stays as it was.
    results = glob.glob(os.path.join(out, "cells", "*", "result.json"))
    written = {r: os.stat(r).st_mtime_ns for r in results}
    cp = satbed("matrix", SMOKE, "--jobs", "4", "--out", out, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout.splitlines()[-1])["skipped"] == 8
    assert {r: os.stat(r).st_mtime_ns for r in results} == written

    cp = satbed("report", out)
    assert cp.returncode == 0, cp.stderr
    page = open(os.path.join(out, "report.html")).read()
    assert page.count("class='chart'") == 3
    assert len(open(os.path.join(out, "results.csv")).read().splitlines()) == 9


def _matrix_process(exp: str, out: str, jobs: int) -> subprocess.Popen:
    """`satbed matrix` as a child that Ctrl-C would reach: a shell's
    background job inherits SIGINT ignored, and Python keeps it so; the
    matrix gets the terminal's default."""
    return subprocess.Popen(["/usr/bin/python3", "-m", "satbed", "matrix", exp, "--jobs", str(jobs), "--out", out],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": REPO}, cwd=REPO,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for_ok(out: str, cells: int, poll: float, limit_s: float = 180) -> None:
    """Until at least `cells` cells are ok (at most limit_s)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if os.path.exists(os.path.join(out, "results.sqlite")) and _statuses(out).get("ok", 0) >= cells:
                return
        except sqlite3.OperationalError:    # the file exists a moment before its tables
            pass
        time.sleep(poll)


def _interrupt(p: subprocess.Popen) -> str:
    """Ctrl-C; the matrix's stderr once it has exited."""
    p.send_signal(signal.SIGINT)
    return p.communicate(timeout=90)[1]


def _reap(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
        p.wait()


@needs_root
def test_interrupted_run_stops_cleanly_and_resumes(tmp_path):
    # Twenty ping cells of ~5 s each, two at a time: a run long enough that the
    # interrupt (after two cells and the twin check) lands while cells are still to run.
    n = 20
    exp = write(tmp_path, "repetitions: 10\nfixed: {client: ping, pep: none, emulator: userspace, rate: 8mbit,"
                          " captures: none}\naxes: {rtt: [500, 600]}\n")
    out = str(tmp_path / "intr")
    p = _matrix_process(exp, out, jobs=2)
    try:
        # Interrupt once some cells are done and others are mid-run.
        _wait_for_ok(out, 2, poll=0.5)
        # A second matrix on the same directory would run the same cells twice.
        twin = satbed("matrix", exp, "--out", out, timeout=60)
        assert twin.returncode == 2 and "another `satbed matrix` is running" in twin.stderr
        err = _interrupt(p)
    finally:
        _reap(p)
    assert p.returncode == 130, err
    assert "run again to resume" in err
    st = _statuses(out)
    assert 2 <= st.get("ok", 0) < n, st
    assert st.get("interrupted", 0) >= 1, st
    assert _leftovers(out) == []

    cp = satbed("matrix", exp, "--jobs", "4", "--out", out, timeout=300)
    assert cp.returncode == 0, cp.stderr
    counts = json.loads(cp.stdout.splitlines()[-1])
    assert counts["skipped"] == st["ok"] and counts["ok"] == n - st["ok"]
    assert _statuses(out) == {"ok": n}
    assert _leftovers(out) == []


@needs_root
def test_a_cell_over_its_time_limit_is_stopped_recorded_and_the_rest_continue(tmp_path):
    # A ping cell needs a few seconds for its testbed alone: a 1 s limit stops it mid-setup.
    path = write(tmp_path, "timeout: 1\nfixed: {client: ping, pep: none, emulator: userspace, rate: 8mbit,"
                           " captures: none}\naxes: {rtt: [0, 100]}\n")
    out = str(tmp_path / "to")
    cp = satbed("matrix", path, "--jobs", "2", "--out", out, timeout=200)
    assert cp.returncode == 1, cp.stderr
    assert json.loads(cp.stdout.splitlines()[-1])["timeout"] == 2
    db = sqlite3.connect(os.path.join(out, "results.sqlite"))
    errors = [e for (e,) in db.execute("SELECT error FROM cells")]
    db.close()
    assert errors == ["timed out after 1s"] * 2
    assert _leftovers(out) == []
    # Timed-out cells count as done unless retried, and the matrix still did not measure them.
    cp = satbed("matrix", path, "--jobs", "2", "--out", out, timeout=200)
    assert cp.returncode == 1, cp.stderr
    assert json.loads(cp.stdout.splitlines()[-1])["skipped"] == 2
    assert "2 x timeout: timed out after 1s" in cp.stderr and "--retry" in cp.stderr.splitlines()[-1]


def test_delivered_bytes_counts_written_data_and_rsyncs_temporary_copy(tmp_path):
    from satbed.backends.clients.transfer import delivered_bytes, prefix_matches
    source = tmp_path / "payload.bin"
    source.write_bytes(os.urandom(3 << 20))
    dest = tmp_path / "recv" / "payload.bin"
    dest.parent.mkdir()
    assert delivered_bytes(str(dest)) == 0
    assert prefix_matches(str(dest), str(source)) is None
    # rsync writes .NAME.XXXXXX beside the destination until it renames it.
    (dest.parent / ".payload.bin.Ab12Cd").write_bytes(source.read_bytes()[:700_000])
    assert delivered_bytes(str(dest)) == 700_000
    dest.write_bytes(source.read_bytes()[:1 << 20])
    assert prefix_matches(str(dest), str(source)) is True
    with open(dest, "r+b") as f:
        f.seek(1000)
        f.write(b"\0")
    assert prefix_matches(str(dest), str(source)) is False
    # An out-of-order receiver leaves holes: only the written data counts, no prefix to check.
    sparse = tmp_path / "recv" / "sparse.bin"
    with open(sparse, "wb") as f:
        f.write(b"x" * 65536)
        f.seek(3 << 20)
        f.write(b"y" * 65536)
    assert 65536 * 2 <= delivered_bytes(str(sparse)) < 1 << 20
    assert prefix_matches(str(sparse), str(source)) is None
    # The Saratoga client writes NAME.part and renames it once the checksum verifies.
    got = tmp_path / "recv" / "got.bin"
    (got.parent / "got.bin.part").write_bytes(b"z" * 8192)
    assert delivered_bytes(str(got)) == 8192


def test_first_byte_is_when_the_copy_first_holds_data(tmp_path):
    """The set-up a client spends before its first received byte is timed
    from the command's start; nothing arriving leaves it unknown."""
    import time
    from satbed.backends.clients.transfer import FirstByte
    dest = tmp_path / "payload.bin"
    dest.write_bytes(b"")           # created empty, as clients do before data comes
    start = time.monotonic()
    watch = FirstByte(str(dest), start)
    time.sleep(0.3)
    written = time.monotonic() - start
    dest.write_bytes(b"data")
    deadline = time.monotonic() + 30
    while watch.seconds is None and time.monotonic() < deadline:
        time.sleep(0.01)
    first = watch.stop()
    assert first is not None and written <= first <= time.monotonic() - start
    never = FirstByte(str(tmp_path / "never.bin"), time.monotonic())
    assert never.stop() is None


def test_time_limit_is_validated(tmp_path):
    from satbed.execution import matrix
    from satbed.core.errors import SatbedError
    for bad in ("-5", "0", "soon", "true"):
        with pytest.raises(SatbedError, match="time_limit must be a positive number"):
            matrix.load(write(tmp_path, f"fixed: {{client: scp, time_limit: {bad}}}\n"))
    cells = matrix.load(write(tmp_path, "fixed: {client: scp, rtt: 600, ber: 1e-5, size: 100M, time_limit: 60}\n"
                                        "axes: {pep: [none, pepd]}\n")).cells
    stalled, split = cells
    # TCP end to end at 11% frame loss is modelled far below the rate: it runs to its limit.
    assert 60 < stalled.estimate_s < 60 + 40
    assert split.estimate_s > stalled.estimate_s
    assert stalled.timeout_s < 60 + 300     # bounded by the limit, not by 100 MB at a twentieth of the rate


@needs_root
def test_a_transfer_over_the_time_limit_is_measured_and_charted(tmp_path):
    # TCP without a PEP at 600 ms and BER 1e-5 moves tens of kbit/s: 4 MB cannot
    # arrive in 15 s, so the cell is measured over the limit.
    path = write(tmp_path, "fixed: {client: scp, pep: none, emulator: userspace, rtt: 600, ber: 1e-5, size: 4M,"
                           " time_limit: 15}\n")
    out = str(tmp_path / "lim")
    cp = satbed("matrix", path, "--jobs", "1", "--out", out, timeout=300)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout.splitlines()[-1])["limited"] == 1
    assert "in the time limit" in cp.stderr
    from satbed.results.metrics import run_metrics
    (res,) = glob.glob(os.path.join(out, "cells", "*", "result.json"))
    r = run_metrics(os.path.dirname(res))      # result.json with the cell's analysis.json
    assert r["time_limited"] and r["integrity"] == "incomplete" and r["prefix_integrity"] == "ok"
    assert 0 < r["bytes"] < 4 << 20 and r["goodput_bps"] > 0
    assert 14 < r["seconds"] < 17
    # tcptrace agrees that only part of the file crossed, and nothing was drawn yet.
    assert r["analysis"]["lan_a"]["main"]["complete"] is False
    assert not glob.glob(os.path.join(out, "cells", "*", "analysis", "*", "*.png"))
    assert _leftovers(out) == []
    cp = satbed("report", out)
    assert cp.returncode == 0, cp.stderr
    page = open(os.path.join(out, "report.html")).read()
    assert "hollow circle" in page and "limited" in page
    # The gallery drew the study's view from the stored capture.
    assert glob.glob(os.path.join(out, "cells", "*", "analysis", "lan_a", "tsg_window.png"))


@needs_root
def test_a_failing_cell_makes_the_matrix_exit_nonzero_with_its_reason_last(tmp_path):
    # The PEP's program is there but exits at once: that cell fails, the other measures.
    path = write(tmp_path, "fixed: {client: scp, rtt: 0, size: 256K, emulator: userspace, captures: none}\n"
                           "axes: {pep: [none, pepsal]}\n")
    out = str(tmp_path / "fail")
    cp = satbed("matrix", path, "--out", out, timeout=300, env={"SATBED_PEPSAL_BIN": "/bin/false"})
    assert cp.returncode == 1, cp.stderr
    assert _statuses(out) == {"ok": 1, "failed": 1}
    last = cp.stderr.strip().splitlines()[-4:]
    assert any("1 x failed:" in ln and "pepsal" in ln for ln in last), cp.stderr
    assert "1 of 2 cells did not measure" in last[-1]
    assert _leftovers(out) == []
    # The report names the reason beside the charts, not only in the cells table.
    assert satbed("report", out).returncode == 0
    page = open(os.path.join(out, "report.html")).read()
    assert page.index("<h2>Failures</h2>") < page.index("<h2>Charts</h2>")
    assert "pepsal" in page[page.index("<h2>Failures</h2>"):page.index("<h2>Charts</h2>")]


@needs_root
def test_a_resumed_matrix_adopts_cells_a_killed_matrix_left_running(tmp_path):
    # 600 ms ping cells take ~8 s: SIGKILL the matrix while two run in their own sessions.
    exp = write(tmp_path, "repetitions: 3\nfixed: {client: ping, pep: none, emulator: userspace, rate: 8mbit,"
                          " captures: none, rtt: 600}\n")
    out = str(tmp_path / "adopt")
    # A testbed per cell (--no-batch): two cells run while the third waits.
    p = subprocess.Popen(["/usr/bin/python3", "-m", "satbed", "matrix", exp, "--jobs", "2", "--no-batch",
                          "--out", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": REPO},
                         cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while len(glob.glob(os.path.join(out, "cells", "*", "cell.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        p.kill()
        p.wait()
    live = {os.path.basename(os.path.dirname(f)) for f in glob.glob(os.path.join(out, "cells", "*", "cell.pid"))}
    assert len(live) == 2
    cp = satbed("matrix", exp, "--jobs", "2", "--no-batch", "--out", out, timeout=300)
    assert cp.returncode == 0, cp.stderr
    assert cp.stderr.count("still running from a killed matrix") >= 1, cp.stderr
    assert _statuses(out) == {"ok": 3}
    # Each adopted cell ran once: its directory was never deleted and restarted.
    for h in live:
        log = open(os.path.join(out, "cells", h, "matrix.log")).read()
        assert open(os.path.join(out, "cells", h, "cell.exit")).read().strip() == "0"
        assert log.count("satbed matrix") == 0
    assert _leftovers(out) == []


def test_report_carries_capture_metrics_and_draws_no_chart_twice(tmp_path):
    """Only RTT 600 ms: Chart 1 (RTT 0) would repeat Chart 2 and is not drawn;
    the summary carries the cells' capture figures and no empty ping column."""
    from satbed.report.page import build
    from satbed.results.store import CellRow, Store
    out = str(tmp_path / "c")
    os.makedirs(out)

    def analysed(rtt_avg: float, rexmt: int, sacks: int) -> dict:
        def vantage(rtt_to_sender: float) -> dict:
            return {"main": {"summary": {"rtt_avg_ms": rtt_avg + rtt_to_sender, "rexmt_pkts": rexmt,
                                         "sack_blocks_seen": sacks},
                             "spoofing_throughput": {"rtt_vantage_sender_ms": rtt_to_sender}}}
        # Download: wan_b sits next to the sender (Client B), wan_a 600 ms away.
        return {"goodput_bps": 2e6, "analysis": {"wan_a": vantage(600.0), "wan_b": vantage(0.1)},
                "end_to_end_throughput": {"sender_bps": 2.2e6, "receiver_bps": 2.1e6}}

    with Store(os.path.join(out, "results.sqlite")) as s:
        for rep, (rtt_avg, rexmt, sacks) in enumerate(((700.0, 10, 30), (900.0, 20, 50))):
            s.put(CellRow(hash=f"{rep:016x}", experiment="c",
                          params={"client": "scp", "pep": "none", "rtt": 600.0, "ber": 1e-5, "size": 1 << 20,
                                  "direction": "download"},
                          config={}, repetition=rep, status="ok", goodput_bps=2e6,
                          metrics=analysed(rtt_avg, rexmt, sacks)))
    page = open(build(out)).read()
    assert "so it is not drawn twice" in page
    assert not os.path.exists(os.path.join(out, "charts", "chart1.png"))
    assert os.path.exists(os.path.join(out, "charts", "chart2.png"))
    assert "ping RTT ms" not in page
    for column in ("sender view Mbit/s", "receiver view Mbit/s", "RTT avg ms (satellite hop)",
                   "retransmitted pkts (satellite hop)", "SACK blocks (satellite hop)"):
        assert column in page, column
    # Means over the two repetitions, at wan_b (next to the sender).
    assert "<td>800.1</td>" in page and "<td>15</td>" in page and "<td>40</td>" in page
    assert "<td>2.200</td>" in page and "<td>2.100</td>" in page
    rows = open(os.path.join(out, "results.csv")).read().splitlines()
    assert "sat_rtt_ms_avg" in rows[0] and "800.1" not in rows[1] and "700.1" in rows[1]


def test_gallery_draws_ftp_and_scp_first(tmp_path):
    from satbed.report.gallery import GALLERY_DRAWN, gallery
    from satbed.results.store import CellRow
    out = str(tmp_path / "g")
    rows = []
    for i, (client, pep) in enumerate((("ftp", "none"), ("ftp", "pepd"), ("ftp", "pepsal"), ("scp", "none"),
                                       ("scp", "pepd"), ("scp", "pepsal"))):
        h = f"{i:016x}"
        d = os.path.join(out, "cells", h)
        os.makedirs(d)
        open(os.path.join(d, "report.html"), "w").write("<html></html>")
        rows.append(CellRow(hash=h, experiment="g", params={"client": client, "pep": pep, "rtt": 600.0,
                                                            "ber": 1e-5}, config={}, repetition=0, status="ok"))
    shown = gallery(out, rows, stream=open(os.devnull, "w"))
    first = [(it["row"].params["client"], it["row"].params["pep"]) for it in shown[:GALLERY_DRAWN]]
    assert {c for c, _ in first} == {"ftp", "scp"}


# --- batches: cells that share a testbed ---------------------------------------------------------

def test_batch_key_groups_cells_by_what_needs_a_rebuild(tmp_path):
    from satbed.execution import batches, matrix
    # Size and repetition change only the transfer; the RTT and the PEP rebuild the testbed.
    cells = matrix.load(write(tmp_path, "repetitions: 2\nfixed: {client: ftp, emulator: userspace, rate: 8mbit}\n"
                                        "axes: {size: [64K, 1M], rtt: [100, 500], pep: [none, pepd]}\n")).cells
    keys = {}
    for c in cells:
        keys.setdefault(batches.batch_key(c), set()).add((c.params["rtt"], c.params["pep"]))
    assert len(keys) == 4 and all(len(v) == 1 for v in keys.values())
    planned = batches.plan_batches(cells)
    assert sorted(len(b) for b in planned) == [4, 4, 4, 4]
    # Repetition by repetition: every size of repetition 0 before any of repetition 1.
    assert [c.repetition for c in planned[0]] == [0, 0, 1, 1]
    assert [len(b) for b in batches.plan_batches(cells, batch=False)] == [1] * 16
    # A link schedule starts with each transfer: such cells get a testbed each.
    sched = matrix.load(write(tmp_path, "fixed: {client: ftp, emulator: userspace, rate: 8mbit,"
                                        " link: {outage: {period_s: 40, down_s: 10, offset_s: 10}}}\naxes: {size: [64K, 1M]}\n"))
    assert [batches.batch_key(c) for c in sched.cells] == [None, None]
    # A long group is cut so a batch stays near BATCH_S.
    long = matrix.load(write(tmp_path, "repetitions: 40\nfixed: {client: ftp, emulator: userspace, rate: 1mbit,"
                                       " size: 4M}\n")).cells
    parts = batches.plan_batches(long)
    assert len(parts) > 1 and sum(map(len, parts)) == 40
    assert all(batches.batch_estimate(b) <= batches.BATCH_S + max(c.estimate_s for c in b) for b in parts)


BATCH_EXP = ("fixed: {client: ftp, pep: none, emulator: userspace, rate: 8mbit, rtt: 100}\n"
             "axes: {size: [%s]}\n")


@needs_root
def test_two_cells_in_one_batch_are_two_intact_separately_captured_transfers(tmp_path):
    from satbed.results.metrics import run_metrics
    path = write(tmp_path, BATCH_EXP % "64K, 256K")
    out = str(tmp_path / "batch")
    cp = satbed("matrix", path, "--jobs", "1", "--out", out, timeout=300)
    assert cp.returncode == 0, cp.stderr
    assert "2 of them in 1 batches sharing a testbed" in cp.stderr
    assert _statuses(out) == {"ok": 2}
    (batch_dir,) = glob.glob(os.path.join(out, "batches", "*"))
    results = {}
    for d in glob.glob(os.path.join(out, "cells", "*")):
        r = run_metrics(d)      # result.json with the cell's analysis.json
        cfg = json.load(open(os.path.join(d, "config.json")))
        assert cfg["batch"] == r["batch"] and r["batch"]["testbed_dir"] == batch_dir
        assert r["integrity"] == "ok" and "error" not in r
        assert os.path.getsize(os.path.join(d, "captures", "lan_a.pcap")) > 0
        # A light cell runs on one core (admission.CorePlacement), where there are several.
        env = json.load(open(os.path.join(d, "environment.json")))
        assert len(env["affinity"]) == (1 if len(os.sched_getaffinity(0)) > 1 else len(os.sched_getaffinity(0)))
        results[cfg["size_bytes"]] = r
    assert sorted(results) == [64 << 10, 256 << 10]
    # Each transfer's emulator record has an unbatched run's shape: its own
    # counters, the link values in force (not differenced to zero).
    for size, r in results.items():
        dirs = r["emulator"]["stats"]["totals"]["directions"].values()
        assert all(d["rate_bps"] == 8e6 and d["delay_ms"] == 50 for d in dirs) and r["emulator"]["config"]
        assert r["emulator"]["stats"]["io"] == "socket"      # auto, at 8 Mbit/s: no ring timer
        data = max(d["bytes_out"] for d in dirs)     # the direction the file took
        assert size <= data < 2 * size + (256 << 10), (size, data)
    # One testbed for both, each transfer in its own capture: the data each
    # capture saw is its own transfer's, not the other's too.
    assert len({r["testbed_prefix"] for r in results.values()}) == 1
    assert {r["batch"]["index"] for r in results.values()} == {0, 1}
    for size, r in results.items():
        main = r["analysis"]["lan_a"]["main"]["summary"]
        assert size <= main["unique_bytes"] < size + 4096, (size, main)
    # The testbed's own record: both transfers, torn down, nothing left.
    tb = json.load(open(os.path.join(batch_dir, "result.json")))
    assert tb["transfers_run"] == 2 and "error" not in tb
    assert _leftovers(out) == [] and not os.path.exists(f"/run/satbed/{tb['testbed_prefix']}.json")


@needs_root
def test_an_interrupted_batch_resumes_at_its_first_undone_cell(tmp_path):
    path = write(tmp_path, BATCH_EXP % "16K, 32K, 48K, 64K")
    out = str(tmp_path / "resume")
    p = _matrix_process(path, out, jobs=1)
    try:
        _wait_for_ok(out, 1, poll=0.2)
        err = _interrupt(p)
    finally:
        _reap(p)
    assert p.returncode == 130, err
    st = _statuses(out)
    assert 1 <= st["ok"] < 4, st
    assert _leftovers(out) == []
    (first_batch,) = glob.glob(os.path.join(out, "batches", "*"))
    order = json.load(open(os.path.join(first_batch, "batch.json")))["cells"]
    done = order[:st["ok"]]
    kept = {h: os.path.getmtime(os.path.join(out, "cells", h, "result.json")) for h in done}

    cp = satbed("matrix", path, "--jobs", "1", "--out", out, timeout=300)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout.splitlines()[-1])["skipped"] == st["ok"]
    assert _statuses(out) == {"ok": 4}
    # The second batch started at the first cell the first one had not
    # finished (a transfer's analysis runs beside the next transfer, so the
    # interrupt may find two done); a lone remaining cell runs on its own.
    rest = order[st["ok"]:]
    new = set(glob.glob(os.path.join(out, "batches", "*"))) - {first_batch}
    if len(rest) > 1:
        (second,) = new
        assert json.load(open(os.path.join(second, "batch.json")))["cells"] == rest
    else:
        assert not new
    assert {h: os.path.getmtime(os.path.join(out, "cells", h, "result.json")) for h in done} == kept
    assert _leftovers(out) == []


def test_a_transfer_share_of_a_shared_emulator_differences_counters_only():
    from satbed.execution import slices
    was = {"t_s": 10.0, "directions": {"a_to_b": {"frames_in": 100, "bytes_in": 150_000, "drops": {"ber": 3, "queue": 1},
                                                  "rate_bps": 8e6, "delay_ms": 300, "ber": 1e-5, "up": True,
                                                  "queue_high_water_packets": 40, "tx_late_p99_us": 900}}}
    now = {"t_s": 25.0, "directions": {"a_to_b": {"frames_in": 160, "bytes_in": 240_000, "drops": {"ber": 5, "queue": 1},
                                                  "rate_bps": 8e6, "delay_ms": 300, "ber": 1e-5, "up": True,
                                                  "queue_high_water_packets": 45, "tx_late_p99_us": 700}}}
    share = slices.satemu_share(now, was)
    d = share["directions"]["a_to_b"]
    assert (d["frames_in"], d["bytes_in"], d["drops"]) == (60, 90_000, {"ber": 2, "queue": 0})
    # Values in force, marks and quantiles are not counters: as at the end.
    assert (d["rate_bps"], d["delay_ms"], d["ber"], d["up"]) == (8e6, 300, 1e-5, True)
    assert (d["queue_high_water_packets"], d["tx_late_p99_us"]) == (45, 700)
    assert (share["t_s"], share["since_t_s"]) == (25.0, 10.0)


def test_pepd_on_a_lossy_link_gets_its_defaults_in_the_configuration(tmp_path):
    """pepd's options for a link with bit errors (cc=bbr buffer_factor=8) are
    the model's, in config.json and the cell's identity; the user's win."""
    from satbed.execution import matrix
    from satbed.model import peps
    cells = matrix.load(write(tmp_path, "fixed: {client: scp, pep: pepd, rtt: 600, emulator: userspace}\n"
                                        "axes: {ber: [0, 1e-5], pep_options: ['', 'cc=cubic', 'wan_buf=1000000']}\n")).cells
    got = {(c.params["ber"], c.params["pep_options"]): c.config["pep_options"] for c in cells}
    assert got == {(0.0, ""): "", (0.0, "cc=cubic"): "cc=cubic", (0.0, "wan_buf=1000000"): "wan_buf=1000000",
                   (1e-5, ""): "cc=bbr buffer_factor=8", (1e-5, "cc=cubic"): "cc=cubic buffer_factor=8",
                   (1e-5, "wan_buf=1000000"): "wan_buf=1000000 cc=bbr"}
    assert peps.effective_options("pepsal", "", 1e-5) == ""


needs_scps_runtime = pytest.mark.skipif(
    not os.path.exists("/dev/net/tun") or not shutil.which("brctl") or not shutil.which("ifconfig"),
    reason="the SCPS stand-in needs /dev/net/tun, brctl and ifconfig")


@needs_root
@needs_scps_runtime
def test_cells_of_a_pep_not_installed_are_unavailable_and_a_later_run_runs_them(tmp_path):
    """No SCPS gateway here: its cell is stored unavailable with the
    adapter's line, never started, and the matrix exits 0 with the other
    cell measured. Once the gateway is there (the CI stand-in, standing in
    for the lab's binary) the next run runs it."""
    if shutil.which("scps-gateway") or os.path.exists(os.path.join(REPO, "bin", "scps-gateway")):
        pytest.skip("an SCPS gateway is installed here")
    path = write(tmp_path, "fixed: {client: ping, size: 16K, rtt: 0, emulator: bridge, captures: none}\n"
                           "axes: {pep: [none, scps]}\n")
    out = str(tmp_path / "m")
    cp = satbed("matrix", path, "--out", out, timeout=300, env={"SATBED_SCPS_BIN": ""})
    assert cp.returncode == 0, cp.stderr
    assert "1 to run, 1 unavailable here" in cp.stderr
    assert _statuses(out) == {"ok": 1, "unavailable": 1}
    row = _row(out, "scps")
    assert row["status"] == "unavailable" and row["error"].startswith("scps: no SCPS gateway binary"), row
    assert row["attempts"] == 0 and not os.path.exists(os.path.join(out, "cells", row["hash"]))
    assert "  1 x scps: no SCPS gateway binary" in cp.stderr and "failures" not in cp.stderr
    assert json.loads(cp.stdout.strip().splitlines()[-1])["unavailable"] == 1
    assert satbed("report", out).returncode == 0
    page = open(os.path.join(out, "report.html")).read()
    assert "<h2>Unavailable</h2>" in page and "no SCPS gateway binary" in page and "<h2>Failures</h2>" not in page

    gateway = {"SATBED_SCPS_BIN": os.path.join(REPO, "tests", "standins", "scps-gateway")}
    cp = satbed("matrix", path, "--out", out, timeout=300, env=gateway)
    assert cp.returncode == 0, cp.stderr
    assert "1 already done, 1 to run (" in cp.stderr
    assert _statuses(out) == {"ok": 2}
    assert _row(out, "scps")["attempts"] == 1
    assert _leftovers(out) == []


def _row(out: str, pep: str) -> dict:
    db = sqlite3.connect(os.path.join(out, "results.sqlite"))
    db.row_factory = sqlite3.Row
    try:
        rows = [dict(r) for r in db.execute("SELECT * FROM cells")]
    finally:
        db.close()
    return next(r for r in rows if json.loads(r["params"])["pep"] == pep)


def test_unavailable_cells_are_listed_apart_from_failures():
    from satbed.report.summary import failure_reasons, summary_table, terminal_summary, unavailable_reasons
    from satbed.results.store import DONE, MEASURED, CellRow
    why = "scps: no SCPS gateway binary: satbed ships none"
    params = {"client": "ping", "rtt": 0, "ber": 0, "size": 1024, "direction": "download"}
    rows = [CellRow(f"h{i}", "e", {**params, "pep": "scps", "rtt": i}, {}, 0, "unavailable", why) for i in range(3)]
    rows += [CellRow("f", "e", {**params, "pep": "pepd"}, {}, 0, "failed", "pepd: boom"),
             CellRow("o", "e", {**params, "pep": "none"}, {}, 0, "ok", None, 1e6)]
    assert "unavailable" not in DONE and "unavailable" not in MEASURED      # a later run tries them again
    assert unavailable_reasons(rows) == [(why, 3)]
    assert failure_reasons(rows) == [("failed: pepd: boom", 1)]
    assert [d["failed"] for d in summary_table(rows) if d["pep"] == "scps"] == [0, 0, 0]
    text = terminal_summary(rows)
    assert f"    3 x {why}" in text and "    1 x failed: pepd: boom" in text
    assert text.index("failures, most common first") < text.index("unavailable here (not run")
    assert "(1 unavailable here)" in text


def test_a_matrix_asks_each_pep_that_runs_once(tmp_path, monkeypatch):
    """What runs on the PEP nodes is asked about, once per PEP and options;
    a `pep` that every node's placement overrides is not; images and other
    backends are not asked."""
    from satbed.backends import pepnodes
    from satbed.execution import matrix, supervisor
    asked: list[tuple[str, str]] = []

    def available(name: str, options: str = "") -> str:
        asked.append((name, options))
        return f"{name}: not here" if name == "scps" else ""
    monkeypatch.setattr(pepnodes, "available", available)
    exp = matrix.load(write(tmp_path, "fixed: {client: ping, emulator: userspace}\n"
                                      "axes: {pep: [none, pepd, scps], rtt: [0, 100]}\n"))
    missing = supervisor.unavailable(exp.cells, "mininet")
    assert sorted(asked) == [("none", ""), ("pepd", ""), ("scps", "")]
    assert sorted(missing.values()) == ["scps: not here"] * 2
    assert all(c.params["pep"] == "scps" for c in exp.cells if c.hash in missing)
    assert supervisor.unavailable(exp.cells, "docker") == {} and supervisor.unavailable(exp.cells, "ansible") == {}
    # Both PEP nodes placed: the scenario's `pep: pepd` runs nowhere and is not asked.
    scen = tmp_path / "placed.yaml"
    scen.write_text("topology: globalhawk\npep: pepd\nlink: {emulator: userspace}\n"
                    "peps: {pepA: {name: scps, options: rtt_ms=800}, pepB: none}\n"
                    "workload: {main: {client: ping}}\nmatrix: {axes: {rtt: [0, 100]}}\n")
    asked.clear()
    missing = supervisor.unavailable(matrix.load(str(scen)).cells, "mininet")
    assert sorted(asked) == [("none", ""), ("scps", "rtt_ms=800")] and len(missing) == 2


@pytest.mark.parametrize("client, direction", [("scp", "download"), ("ftp", "upload")])
def test_a_receive_buffer_a_client_cannot_take_fails_the_file_before_any_cell(tmp_path, client, direction):
    """workload.main.rcvbuf reaches only NcFTP's downloads (ncftpget -B):
    asked of another tool, or of an upload, the whole file is refused in
    one line naming the cell, instead of every cell failing as it starts."""
    from satbed.execution import matrix
    exp = tmp_path / "rcvbuf.yaml"
    exp.write_text(f"name: rcvbuf\ndescription: a receive buffer where it cannot go\n"
                   f"fixed: {{scenario: {REPO}/scenarios/split-gateways.yaml, {SPLIT_PARAMETERS}, "
                   f"client: {client}, direction: {direction}}}\n"
                   "variants:\n  - {name: held, set: {workload.main.rcvbuf: 26800}}\n")
    with pytest.raises(SatbedError) as e:
        matrix.load(str(exp))
    assert str(e.value).startswith(f"{exp}: workload.main.rcvbuf: {client} cannot ask for a receive buffer "
                                   f"in a {direction} ({client}/none [held]")
    cp = satbed("matrix", str(exp), "--out", str(tmp_path / "out"), timeout=60)
    assert cp.returncode == 2 and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
    assert not (tmp_path / "out" / "results.sqlite").exists()


# What scenarios/split-gateways.yaml sets that an experiment file naming it must say itself
# (its client too, which the tests give).
SPLIT_PARAMETERS = "topology: split-gateways, rate: 1544kbit, rtt: 500, queue: 100, emulator: userspace, size: 20M"


@pytest.mark.parametrize("named, refused", [
    ("", "sets topology: 'split-gateways', but these cells would run with 'globalhawk'"),
    ("topology: split-gateways", "sets rate: '1544kbit', but these cells would run with None"),
    ("topology: split-gateways, rate: 1544kbit, rtt: 500, queue: 100, emulator: userspace",
     "sets client: 'ftp', but these cells would run with 'ping'"),
    (SPLIT_PARAMETERS + ", client: ftp", None)])
def test_an_experiment_naming_a_scenario_runs_its_network_or_says_which_value_is_missing(tmp_path, named, refused):
    """An experiment file takes a scenario's topology file, links and workload
    but its parameters from fixed:. Naming a scenario without the values it
    sets would silently run another network (the Global Hawk topology at
    8 Mbit/s instead of the split-gateway study's T1): the file is refused,
    one line naming the first value missing, until every one is given."""
    from satbed.execution import matrix
    exp = tmp_path / "named.yaml"
    exp.write_text(f"name: named\ndescription: a scenario named from an experiment file\n"
                   f"fixed: {{scenario: {REPO}/scenarios/split-gateways.yaml" + (f", {named}" if named else "")
                   + "}\n")
    if refused is None:
        cells = matrix.load(str(exp)).cells
        assert [(c.params["topology"], c.params["rate"], c.params["rtt"]) for c in cells] == [
            ("split-gateways", "1544kbit", 500.0)]
        return
    with pytest.raises(SatbedError) as e:
        matrix.load(str(exp))
    assert refused in str(e.value) and str(e.value).endswith("write " + refused.split()[1].rstrip(":")
                                                               + ": in fixed:"), str(e.value)
