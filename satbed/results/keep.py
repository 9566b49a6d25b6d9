"""A matrix run kept for publication (a study page's stored run): its
results.sqlite without what a page never reads (every connection tcptrace
listed beside the main one), and each cell's revision from its
environment.json, so the page can say what the cells ran on once their
directories are gone. The run's own directory is only read."""

from __future__ import annotations

import glob
import json
import os
import sqlite3

from satbed.core.errors import SatbedError
from satbed.core.files import write_text
from satbed.results.store import DONE, Store

REVISIONS = "revisions.json"


def _slim(metrics: dict) -> dict:
    analysis = metrics.get("analysis")
    if isinstance(analysis, dict):
        metrics["analysis"] = {k: ({f: x for f, x in v.items() if f != "connection_list"} if isinstance(v, dict) else v)
                               for k, v in analysis.items()}
    return metrics


def _revisions(src: str) -> dict[str, dict]:
    """{cell hash: {"git": ...}} from the cells' environment.json, over what
    a revisions.json in src already says: a run resumed from a kept
    results.sqlite (and its revisions.json) on another machine has only its
    new cells' directories."""
    found: dict[str, dict] = {}
    try:
        with open(os.path.join(src, REVISIONS), encoding="utf-8") as f:
            earlier = json.load(f)
        found.update({h: v for h, v in earlier.items() if isinstance(v, dict) and isinstance(v.get("git"), dict)})
    except (OSError, ValueError, AttributeError):
        pass
    for path in glob.glob(os.path.join(src, "cells", "*", "**", "environment.json"), recursive=True):
        try:
            with open(path, encoding="utf-8") as f:
                git = json.load(f).get("git")
        except (OSError, ValueError, AttributeError):
            continue
        cell = os.path.relpath(path, os.path.join(src, "cells")).split(os.sep)[0]
        if isinstance(git, dict):
            found[cell] = {"git": git}
    return found


def keep(src: str, dest: str) -> dict:
    """Write dest/results.sqlite (slimmed, compacted) and dest/revisions.json
    (the revisions of its finished cells) from the matrix run in src;
    returns what was kept."""
    db = os.path.join(src, "results.sqlite")
    if not os.path.isfile(db):
        raise SatbedError(f"{src}: no results.sqlite (the --out directory of `satbed matrix`)")
    with Store(db, read_only=True):
        pass                                    # a store of another shape or format: one line, here
    os.makedirs(dest, exist_ok=True)
    out = os.path.join(dest, "results.sqlite")
    if os.path.exists(out):
        raise SatbedError(f"{out} exists: keep a run into an empty directory")
    try:
        source = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        target = sqlite3.connect(out)
        source.backup(target)                   # a consistent copy even while a matrix writes
        source.close()
        for cell_hash, metrics in target.execute("SELECT hash, metrics FROM cells").fetchall():
            if metrics:
                target.execute("UPDATE cells SET metrics = ? WHERE hash = ?",
                               (json.dumps(_slim(json.loads(metrics)), sort_keys=True), cell_hash))
        target.commit()
        target.execute("VACUUM")
        target.close()
    except (sqlite3.Error, ValueError) as e:
        if os.path.exists(out):
            os.unlink(out)
        raise SatbedError(f"{db}: cannot be kept ({e})") from None
    with Store(out, read_only=True) as kept:
        finished = {r.hash for r in kept.cells() if r.status in DONE}
    # An interrupted cell left a directory but no result: a resumed run redoes it.
    revisions = {h: v for h, v in _revisions(src).items() if h in finished}
    write_text(os.path.join(dest, REVISIONS), json.dumps(revisions, sort_keys=True, indent=0) + "\n")
    return {"results": out, "bytes": os.path.getsize(out), "revisions": len(revisions)}
