"""A transfer's share of what a batch's shared daemons recorded: the PEPs'
counters and buffer trace, the emulator's counters and time series, the
background flows that overlapped it."""

from __future__ import annotations

import csv
import json
import os

from satbed.backends import emulation, traffic
from satbed.execution.session import Session
from satbed.model import workload

# Cumulative counters of satemu's time series (emulator/bridge/timeseries.go);
# a transfer's slice restarts them from zero at its start.
EMU_COUNTERS = ("frames_in", "bytes_in", "frames_out", "bytes_out", "drop_queue", "drop_ber", "drop_loss",
                "drop_gilbert_elliott", "drop_outage", "tx_errors", "rx_kernel_drops")


def counters_before(session: Session) -> dict:
    """The shared daemons' counters as a transfer starts: each PEP's stats,
    each satemu's (with its clock)."""
    out: dict = {"pep": {p.node.name: p.stats() for p in session.pep_list}, "emulator": {}}
    for name, emu in session.emus.items():
        if isinstance(emu, emulation.Satemu):
            out["emulator"][name] = emu.request({"op": "stats"}).get("stats") or {}
    return out


# satemu's cumulative counters, per direction: a transfer's share is their
# difference. Everything else (queue and link values in force, high-water
# marks, lateness quantiles) cannot be differenced and stays as at the
# transfer's end.
SATEMU_COUNTERS = frozenset({"frames_in", "bytes_in", "frames_out", "bytes_out", "drops", "tx_errors",
                             "in_flight_overflow", "rx_truncated", "rx_kernel_drops"})


def _delta(end, start):
    """end - start for every number of a nested document of counters."""
    if isinstance(end, dict):
        start = start if isinstance(start, dict) else {}
        return {k: _delta(v, start.get(k)) for k, v in end.items()}
    numeric = isinstance(end, (int, float)) and not isinstance(end, bool)
    return end - start if numeric and isinstance(start, (int, float)) and not isinstance(start, bool) else end


def satemu_share(now: dict, was: dict) -> dict:
    """A transfer's share of a shared satemu's stats, in the shape of an
    unbatched run's emulator.json `totals`: counters differenced, the rest
    as at the end (the lateness quantiles then cover the batch so far)."""
    dirs = {}
    for name, d in (now.get("directions") or {}).items():
        before = ((was.get("directions") or {}).get(name)) or {}
        dirs[name] = {k: _delta(v, before.get(k)) if k in SATEMU_COUNTERS else v for k, v in d.items()}
    return {"t_s": now.get("t_s"), "since_t_s": was.get("t_s"), "directions": dirs,
            "scope": "counters: this transfer; queue, link values, high-water marks and lateness: the batch so far"}


def transfer_slices(session: Session, run_dir: str, before: dict, t0: float, t1: float, result: dict) -> None:
    """A transfer's share of what the shared daemons recorded: the PEPs'
    counters and buffer trace, the emulator's counters and time series, the
    background flows that overlapped it."""
    if session.pep_list:
        nodes = {}
        for p in session.pep_list:
            now = p.stats()
            was = (before.get("pep") or {}).get(p.node.name) or {}
            split = now.get("connections_split")
            if isinstance(split, int) and isinstance(was.get("connections_split"), int):
                split -= was["connections_split"]
            nodes[p.node.name] = {**now, "pep": p.name, "side": p.role, "connections_split": split}
            _slice_jsonl(os.path.join(p.state_dir, "buffer.jsonl"),
                         os.path.join(run_dir, "pep", p.node.name, "buffer.jsonl"), t0, t1, ("t",))
        result["pep"] = {"name": session.cfg.pep if len({p.name for p in session.pep_list}) == 1 else "mixed",
                         "nodes": nodes, "batch": True,
                         "connections_split": sum(n["connections_split"] for n in nodes.values()
                                                  if isinstance(n.get("connections_split"), int))}
    stopped = {}
    for name, emu in session.emus.items():
        entry: dict = {"backend": emu.backend, "config": emu.cfg.to_dict(), "batch": True}
        if isinstance(emu, emulation.Satemu):
            was = (before.get("emulator") or {}).get(name) or {}
            now = emu.request({"op": "stats"}).get("stats") or {}
            io = (emu.request({"op": "get"}).get("config") or {}).get("io")
            entry["stats"] = {"totals": satemu_share(now, was), "io": io}     # as in emulator.json
            rel = os.path.relpath(emu.stats_dir, session.dir)
            dst = os.path.join(run_dir, rel, "emulator_timeseries.csv")
            _slice_timeseries(os.path.join(emu.stats_dir, "emulator_timeseries.csv"), dst,
                              float(was.get("t_s") or 0), float(now.get("t_s") or 0))
            entry["timeseries"] = os.path.relpath(dst, run_dir)
        stopped[name] = entry
    if stopped:
        primary = session.plan.primary or next(iter(stopped))
        result["emulator"] = stopped[primary]
        if len(stopped) > 1:
            result["emulators"] = stopped
    bg = session.background
    if bg is not None:
        for path in sorted(os.listdir(bg.dir)) if os.path.isdir(bg.dir) else []:
            if path.endswith(".jsonl"):
                _slice_jsonl(os.path.join(bg.dir, path), os.path.join(run_dir, workload.TRAFFIC_DIR, path),
                             t0, t1, ("start", "end"), overlap=True)
        result["traffic"] = {"dir": workload.TRAFFIC_DIR, "spec": bg.spec.to_dict(), "started": bg.started_at,
                             "window": [t0, t1], "batch": True,
                             # Flows still running at the transfer's end are recorded only as they end.
                             "summary": traffic.summary(run_dir)}


def _slice_jsonl(src: str, dst: str, t0: float, t1: float, keys: tuple[str, ...], overlap: bool = False) -> None:
    """The records of a JSON-lines file inside [t0, t1] (by keys[0]), or with
    overlap, whose [keys[0], keys[1]] span meets it."""
    if not os.path.exists(src):
        return
    kept = []
    with open(src, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
                a = float(rec[keys[0]])
                b = float(rec[keys[1]]) if overlap else a
            except (ValueError, KeyError, TypeError):
                continue
            if a <= t1 and b >= t0:
                kept.append(line if line.endswith("\n") else line + "\n")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(kept)


def _slice_timeseries(src: str, dst: str, t0: float, t1: float) -> None:
    """satemu's rows in (t0, t1], time and counters restarted at the last row
    before it, so the slice reads as a series of its own."""
    if not os.path.exists(src):
        return
    with open(src, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
        header = list(rows[0].keys()) if rows else []
    base: dict[str, dict] = {}
    kept = []
    for row in rows:
        try:
            t = float(row["t_s"])
        except (KeyError, ValueError):
            continue
        if t <= t0:
            base[row.get("direction", "")] = row
        elif t <= t1:
            kept.append(row)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        for row in kept:
            b = base.get(row.get("direction", ""))
            out = dict(row)
            t_base = float(b["t_s"]) if b else t0
            out["t_s"] = f"{float(row['t_s']) - t_base:.3f}"
            for k in EMU_COUNTERS:
                if b and k in out and out[k] and b.get(k):
                    out[k] = str(int(float(out[k]) - float(b[k])))
            w.writerow(out)

