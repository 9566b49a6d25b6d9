"""`satbed keep`: a matrix run kept for a study page (satbed/results/keep.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3

import pytest

from satbed.core.errors import SatbedError
from satbed.results import keep
from satbed.results.store import Store

from satbed_testlib import REPO, satbed

FIXTURE = os.path.join(REPO, "tests", "data", "globalhawk-page")


def _run(tmp_path) -> tuple[str, str]:
    """A copy of a stored run with one cell's directory and a connection list
    in that cell's analysis, as a matrix leaves them."""
    src = tmp_path / "run"
    shutil.copytree(FIXTURE, src)
    db = sqlite3.connect(src / "results.sqlite")
    cell, metrics = db.execute("SELECT hash, metrics FROM cells WHERE metrics LIKE '%lan_a%' LIMIT 1").fetchone()
    doc = json.loads(metrics)
    doc["analysis"]["lan_a"]["connection_list"] = [{"a": "10.0.0.1:21", "b": "10.0.0.2:4242"}] * 50
    db.execute("UPDATE cells SET metrics = ? WHERE hash = ?", (json.dumps(doc), cell))
    db.commit()
    db.close()
    os.makedirs(src / "cells" / cell)
    (src / "cells" / cell / "environment.json").write_text(json.dumps({"git": {"commit": "ab" * 20, "dirty": False}}))
    return str(src), cell


def _digest(d: str) -> dict[str, str]:
    return {os.path.relpath(os.path.join(r, f), d): hashlib.sha256(open(os.path.join(r, f), "rb").read()).hexdigest()
            for r, _, fs in os.walk(d) for f in fs}


def test_kept_run_holds_every_cell_without_connection_lists_and_names_revisions(tmp_path):
    src, cell = _run(tmp_path)
    before = _digest(src)
    dest = str(tmp_path / "kept")
    out = keep.keep(src, dest)
    assert _digest(src) == before                      # the run is only read
    with Store(os.path.join(src, "results.sqlite"), read_only=True) as a, Store(out["results"], read_only=True) as b:
        old, new = {r.hash: r for r in a.cells()}, {r.hash: r for r in b.cells()}
        assert a.runs() == b.runs()
    assert old.keys() == new.keys()
    for h, r in old.items():
        k = new[h]
        assert (k.params, k.status, k.goodput_bps, k.started, k.finished) == (r.params, r.status, r.goodput_bps,
                                                                               r.started, r.finished)
        for vantage, figures in (r.metrics.get("analysis") or {}).items():
            want = {f: v for f, v in figures.items() if f != "connection_list"}
            assert k.metrics["analysis"][vantage] == want
    assert "connection_list" in old[cell].metrics["analysis"]["lan_a"]
    assert "connection_list" not in new[cell].metrics["analysis"]["lan_a"]
    revisions = json.load(open(os.path.join(dest, keep.REVISIONS)))
    assert revisions == {cell: {"git": {"commit": "ab" * 20, "dirty": False}}}


def test_keep_refuses_in_one_line(tmp_path):
    src, _ = _run(tmp_path)
    keep.keep(src, str(tmp_path / "kept"))
    with pytest.raises(SatbedError, match="exists"):
        keep.keep(src, str(tmp_path / "kept"))
    cp = satbed("keep", str(tmp_path / "nothing"), str(tmp_path / "kept2"), timeout=60)
    assert cp.returncode == 2 and len(cp.stderr.strip().splitlines()) == 1 and "no results.sqlite" in cp.stderr
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.sqlite").write_bytes(b"not a database at all" * 100)
    cp = satbed("keep", str(tmp_path / "bad"), str(tmp_path / "kept3"), timeout=60)
    assert cp.returncode == 2 and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
    assert not os.path.exists(tmp_path / "kept3" / "results.sqlite")


def test_a_resumed_run_keeps_the_revisions_its_earlier_cells_were_kept_with(tmp_path):
    """A run resumed elsewhere from a kept store has only its new cells'
    directories: the revisions kept before are carried over."""
    src, cell = _run(tmp_path)
    with Store(os.path.join(src, "results.sqlite"), read_only=True) as store:
        other = next(r.hash for r in store.cells() if r.hash != cell and r.status in ("ok", "limited"))
    earlier = {other: {"git": {"commit": "cd" * 20, "dirty": False}}}
    (tmp_path / "run" / keep.REVISIONS).write_text(json.dumps(earlier))
    keep.keep(src, str(tmp_path / "kept"))
    revisions = json.load(open(tmp_path / "kept" / keep.REVISIONS))
    assert revisions == {**earlier, cell: {"git": {"commit": "ab" * 20, "dirty": False}}}
