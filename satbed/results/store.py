"""The results database of a matrix run: DIR/results.sqlite.

Only the matrix parent process writes it (cells report through their
directories), so there is one writer and no locking beyond SQLite's own.

  cells:   one row per cell, keyed by the hash of its full configuration
  runs:    one row per `satbed matrix` invocation (for wall time and the report)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sqlite3
import time
from dataclasses import dataclass, field
from urllib.parse import quote

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
    attempts    INTEGER NOT NULL DEFAULT 1,
    node        TEXT,               -- the machine that ran it (a Slurm node's name, else this host's)
    cpu_s       REAL                -- CPU seconds its processes took (its control group), where measured
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

# The store's format (SQLite's user_version): 0 for stores written before it
# was set (the same shape), raised when the shape changes. A store of a newer
# format, or of another shape, is refused in one line rather than misread.
STORE_FORMAT = 3           # 2: cells.node; 3: cells.cpu_s
# Columns of cells added after format 1, in the order they came: an older
# store lacks a tail of them, and a store opened for writing gains them.
LATER_COLUMNS = (("node", "TEXT"), ("cpu_s", "REAL"))
LATEST_EPOCH_S = 1e11       # year 5138: a timestamp beyond it is damage, and beyond what gmtime takes

# Statuses that count as done: a resumed run skips them (unless retrying).
DONE = ("ok", "limited", "failed", "timeout")
# Statuses whose goodput is a measurement (limited: over the time limit).
MEASURED = ("ok", "limited")
# A cell whose PEP this machine lacks (its adapter's `available` said why):
# never started, not a failure, and neither DONE nor MEASURED, so the next
# run, after the PEP is installed, runs it.
UNAVAILABLE = "unavailable"
STATUSES = ("ok", "limited", "failed", "timeout", "interrupted", UNAVAILABLE)


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
    node: str | None = None
    cpu_s: float | None = None


def _older_shapes(want: set[str]) -> list[set[str]]:
    """The cells table's columns in each format older than this one."""
    names = [n for n, _ in LATER_COLUMNS]
    return [want - set(names[i:]) for i in range(len(names))]


class Store:
    """results.sqlite. A store opened for writing is created or brought to
    STORE_FORMAT; one opened read_only (reports, study pages, estimates) is
    never changed, so reading a run kept in the repository leaves it as it is."""

    def __init__(self, path: str, read_only: bool = False):
        self.path = path
        if os.path.exists(path) and not os.path.isfile(path):
            raise SatbedError(f"{path}: not a regular file, not a satbed results database")
        if read_only:
            self._open_read_only(path)
            return
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            self.db = sqlite3.connect(path, timeout=30)
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version > STORE_FORMAT:
                raise SatbedError(f"{path}: a results database of format {version}, newer than this satbed's "
                                  f"({STORE_FORMAT}): use the satbed that wrote it")
            self.db.executescript(SCHEMA)
            # Databases written before runs had a reference gain the column.
            if "reference" not in {r[1] for r in self.db.execute("PRAGMA table_info(runs)")}:
                self.db.execute("ALTER TABLE runs ADD COLUMN reference TEXT")
            # Older stores gain the columns added since (unknown for their rows).
            cells_columns = {r[1] for r in self.db.execute("PRAGMA table_info(cells)")}
            if cells_columns in _older_shapes({f.name for f in dataclasses.fields(CellRow)}):
                for name, kind in LATER_COLUMNS:
                    if name not in cells_columns:
                        self.db.execute(f"ALTER TABLE cells ADD COLUMN {name} {kind}")
            self.db.commit()
            # A database of another shape (or a damaged one) fails here, not mid-matrix.
            columns = {r[1] for r in self.db.execute("PRAGMA table_info(cells)")}
            want = {f.name for f in dataclasses.fields(CellRow)}
            if columns != want:
                odd = sorted(columns ^ want)
                raise SatbedError(f"{path}: not a satbed results database (its cells table "
                                  f"{'lacks' if odd[0] in want else 'has an unknown column'} {odd[0]!r})")
            self.db.execute("SELECT hash, params, config, status, metrics FROM cells LIMIT 1").fetchall()
            if version < STORE_FORMAT:
                self.db.execute(f"PRAGMA user_version = {STORE_FORMAT}")
                self.db.commit()
        except sqlite3.Error as e:
            raise SatbedError(f"{path} is not a readable satbed results database ({e})") from None

    def _open_read_only(self, path: str) -> None:
        if not os.path.isfile(path):
            raise SatbedError(f"{path}: no such results database")
        try:
            self.db = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True, timeout=30)
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version > STORE_FORMAT:
                raise SatbedError(f"{path}: a results database of format {version}, newer than this satbed's "
                                  f"({STORE_FORMAT}): use the satbed that wrote it")
            columns = {r[1] for r in self.db.execute("PRAGMA table_info(cells)")}
            want = {f.name for f in dataclasses.fields(CellRow)}
            if columns != want and columns not in _older_shapes(want):   # older: its later columns read as unknown
                raise SatbedError(f"{path}: not a satbed results database (its cells table has columns "
                                  f"{', '.join(sorted(columns ^ want)) or 'none'} that format {STORE_FORMAT} does not)")
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
        return _row(cur, row, self.path) if row else None

    def put(self, row: CellRow) -> None:
        old = self.get(row.hash)
        # A cell found unavailable was not attempted: it adds no attempt.
        attempts = old.attempts + (row.status != UNAVAILABLE) if old else row.attempts
        self.db.execute(
            "INSERT OR REPLACE INTO cells (hash, experiment, params, config, repetition, status, error,"
            " goodput_bps, metrics, started, finished, seconds, estimate, attempts, node, cpu_s)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (row.hash, row.experiment, _dump(row.params), _dump(row.config), row.repetition, row.status,
             row.error, row.goodput_bps, _dump(row.metrics), row.started, row.finished, row.seconds,
             row.estimate, attempts, row.node, row.cpu_s))
        self.db.commit()

    def cells(self, status: str | None = None) -> list[CellRow]:
        q, args = "SELECT * FROM cells", ()
        if status:
            q, args = q + " WHERE status = ?", (status,)
        cur = self.db.execute(q + " ORDER BY experiment, hash", args)
        return [_row(cur, r, self.path) for r in cur.fetchall()]

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
            where = f"{self.path}: run {doc.get('id')}"
            doc["host"] = _load(doc.get("host"), where, "host") or {}
            doc["reference"] = _load(doc.get("reference"), where, "reference") or None
            if not isinstance(doc["host"], dict) or not isinstance(doc["reference"], (dict, type(None))):
                raise SatbedError(f"{where}: damaged (host or reference is not a mapping)")
            for k in ("started", "finished"):
                _timestamp(doc.get(k), where, k)
            out.append(doc)
        return out


def _dump(doc) -> str:
    return json.dumps(doc, sort_keys=True, default=str)


def _load(text, where: str, column: str):
    if not text:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        raise SatbedError(f"{where}: damaged ({column} is not JSON)") from None


def _timestamp(v, where: str, column: str) -> None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= LATEST_EPOCH_S):
        raise SatbedError(f"{where}: damaged ({column} {v!r} is not a time)")


def _row(cur: sqlite3.Cursor, r: tuple, path: str = "results.sqlite") -> CellRow:
    """A cell's row, checked: anything else (a damaged or foreign store) is one line naming the store and the cell."""
    doc = dict(zip([d[0] for d in cur.description], r))
    where = f"{path}: cell {str(doc.get('hash'))[:40]!r}"
    for k in ("params", "config", "metrics"):
        doc[k] = _load(doc.get(k), where, k) or {}
        if not isinstance(doc[k], dict):
            raise SatbedError(f"{where}: damaged ({k} is not a mapping)")
    if doc.get("status") not in STATUSES:
        raise SatbedError(f"{where}: damaged (status {doc.get('status')!r})")
    for k in ("started", "finished"):
        _timestamp(doc.get(k), where, k)
    for k in ("seconds", "estimate", "goodput_bps", "cpu_s"):
        v = doc.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0):
            raise SatbedError(f"{where}: damaged ({k} {v!r})")
    if not isinstance(doc.get("node"), (str, type(None))):
        raise SatbedError(f"{where}: damaged (node {doc.get('node')!r})")
    params = doc["params"]
    if params and not (isinstance(params.get("client", ""), str) and isinstance(params.get("pep", ""), str)):
        raise SatbedError(f"{where}: damaged (params)")
    for k in ("size", "rtt", "ber"):
        v = params.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or v < 0 or (k == "size" and v <= 0)):
            raise SatbedError(f"{where}: damaged (params.{k} {v!r})")
    return CellRow(**doc)
