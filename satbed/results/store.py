"""The results database of a matrix run: DIR/results.sqlite.

Only the matrix parent process writes it (cells report through their
directories), so there is one writer and no locking beyond SQLite's own.

  cells:   one row per cell, keyed by the hash of its full configuration
  runs:    one row per `satbed matrix` invocation (for wall time and the report)
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field

from satbed.core.errors import SatbedError

SCHEMA = """
CREATE TABLE IF NOT EXISTS cells (
    hash        TEXT PRIMARY KEY,
    experiment  TEXT NOT NULL,
    params      TEXT NOT NULL,      -- JSON: the axis values and fixed parameters, as written
    config      TEXT NOT NULL,      -- JSON: the full RunConfig the hash is taken over
    repetition  INTEGER NOT NULL,
    status      TEXT NOT NULL,      -- ok | limited | failed | timeout | interrupted | unavailable
    error       TEXT,
    goodput_bps REAL,
    metrics     TEXT,               -- JSON: the cell's result.json
    started     REAL,
    finished    REAL,
    seconds     REAL,
    estimate    REAL,               -- what the scheduler expected, for the ETA
    attempts    INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment  TEXT NOT NULL,
    file        TEXT,
    jobs        INTEGER,
    cells       INTEGER,
    skipped     INTEGER,
    started     REAL,
    finished    REAL,
    outcome     TEXT,
    host        TEXT,               -- JSON: cores, memory, kernel
    reference   TEXT                -- JSON: the experiment's reference row (parameter: value), or null
);
"""

# Statuses that count as done: a resumed run skips them (unless retrying).
DONE = ("ok", "limited", "failed", "timeout")
# Statuses whose goodput is a measurement (limited: over the time limit).
MEASURED = ("ok", "limited")
# A cell whose PEP this machine lacks (its adapter's `available` said why):
# never started, not a failure, and neither DONE nor MEASURED, so the next
# run, after the PEP is installed, runs it.
UNAVAILABLE = "unavailable"


@dataclass
class CellRow:
    hash: str
    experiment: str
    params: dict
    config: dict
    repetition: int
    status: str
    error: str | None = None
    goodput_bps: float | None = None
    metrics: dict = field(default_factory=dict)
    started: float | None = None
    finished: float | None = None
    seconds: float | None = None
    estimate: float | None = None
    attempts: int = 1


class Store:
    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            self.db = sqlite3.connect(path, timeout=30)
            self.db.executescript(SCHEMA)
            # Databases written before runs had a reference gain the column.
            if "reference" not in {r[1] for r in self.db.execute("PRAGMA table_info(runs)")}:
                self.db.execute("ALTER TABLE runs ADD COLUMN reference TEXT")
            self.db.commit()
            # A database of another shape (or a damaged one) fails here, not mid-matrix.
            self.db.execute("SELECT hash, params, config, status, metrics FROM cells LIMIT 1").fetchall()
        except sqlite3.Error as e:
            raise SatbedError(f"{path} is not a readable satbed results database ({e})") from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def get(self, cell_hash: str) -> CellRow | None:
        cur = self.db.execute("SELECT * FROM cells WHERE hash = ?", (cell_hash,))
        row = cur.fetchone()
        return _row(cur, row) if row else None

    def put(self, row: CellRow) -> None:
        old = self.get(row.hash)
        # A cell found unavailable was not attempted: it adds no attempt.
        attempts = old.attempts + (row.status != UNAVAILABLE) if old else row.attempts
        self.db.execute(
            "INSERT OR REPLACE INTO cells (hash, experiment, params, config, repetition, status, error,"
            " goodput_bps, metrics, started, finished, seconds, estimate, attempts)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (row.hash, row.experiment, _dump(row.params), _dump(row.config), row.repetition, row.status,
             row.error, row.goodput_bps, _dump(row.metrics), row.started, row.finished, row.seconds,
             row.estimate, attempts))
        self.db.commit()

    def cells(self, status: str | None = None) -> list[CellRow]:
        q, args = "SELECT * FROM cells", ()
        if status:
            q, args = q + " WHERE status = ?", (status,)
        cur = self.db.execute(q + " ORDER BY experiment, hash", args)
        return [_row(cur, r) for r in cur.fetchall()]

    def begin_run(self, experiment: str, file: str, jobs: int, cells: int, skipped: int, host: dict,
                  reference: dict | None = None) -> int:
        cur = self.db.execute(
            "INSERT INTO runs (experiment, file, jobs, cells, skipped, started, host, reference)"
            " VALUES (?,?,?,?,?,?,?,?)",
            (experiment, file, jobs, cells, skipped, time.time(), _dump(host),
             _dump(reference) if reference else None))
        self.db.commit()
        return int(cur.lastrowid)

    def end_run(self, run_id: int, outcome: str) -> None:
        self.db.execute("UPDATE runs SET finished = ?, outcome = ? WHERE id = ?", (time.time(), outcome, run_id))
        self.db.commit()

    def runs(self) -> list[dict]:
        cur = self.db.execute("SELECT * FROM runs ORDER BY id")
        names = [d[0] for d in cur.description]
        out = []
        for r in cur.fetchall():
            doc = dict(zip(names, r))
            doc["host"] = json.loads(doc["host"]) if doc.get("host") else {}
            doc["reference"] = json.loads(doc["reference"]) if doc.get("reference") else None
            out.append(doc)
        return out


def _dump(doc) -> str:
    return json.dumps(doc, sort_keys=True, default=str)


def _row(cur: sqlite3.Cursor, r: tuple) -> CellRow:
    doc = dict(zip([d[0] for d in cur.description], r))
    for k in ("params", "config", "metrics"):
        doc[k] = json.loads(doc[k]) if doc.get(k) else {}
    return CellRow(**doc)
