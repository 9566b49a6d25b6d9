"""A run's metrics as every reader sees them: RUN/result.json (what the
run measured, written once by the runner) with RUN/analysis.json (what the
capture analysis found, written by analysis/run.py) laid over it.

analysis.json:

    {"format": 1,
     "vantages": {vantage: tcptrace metrics, graphs, or {"error": ...}},
     "tcp_handshake_ms": .., "tcp_handshake_vantage": ..,   # when a LAN capture saw it
     "end_to_end_throughput": {...}}                         # when both LAN captures did

Runs stored before analysis.json existed kept these figures inside
result.json (the vantages under "analysis"); they are read from there. In
the merged metrics the vantages stay under "analysis", the name results.sqlite
has always stored them by."""

from __future__ import annotations

import json
import os
from typing import Any

ANALYSIS_FILE = "analysis.json"
ANALYSIS_FORMAT = 1
# The analysis' figures besides the vantages, by the names the metrics carry.
ANALYSIS_KEYS = ("tcp_handshake_ms", "tcp_handshake_vantage", "end_to_end_throughput")


def _object(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def read_analysis(run_dir: str) -> dict[str, Any] | None:
    """The run's analysis as metrics ({"analysis": vantages, and ANALYSIS_KEYS
    present}), from analysis.json, else from an older run's result.json; None
    when the run was not analysed."""
    doc = _object(os.path.join(run_dir, ANALYSIS_FILE))
    if doc is not None and isinstance(doc.get("vantages"), dict):
        return {"analysis": doc["vantages"], **{k: doc[k] for k in ANALYSIS_KEYS if k in doc}}
    old = _object(os.path.join(run_dir, "result.json")) or {}
    if isinstance(old.get("analysis"), dict):
        return {"analysis": old["analysis"], **{k: old[k] for k in ANALYSIS_KEYS if k in old}}
    return None


def analysis_document(vantages: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """What analysis.json holds (extra: ANALYSIS_KEYS only)."""
    return {"format": ANALYSIS_FORMAT, "vantages": vantages, **{k: extra[k] for k in ANALYSIS_KEYS if k in extra}}


def run_metrics(run_dir: str) -> dict[str, Any]:
    """result.json with the analysis laid over it ({} without result.json):
    what results.sqlite stores as a cell's metrics."""
    metrics = _object(os.path.join(run_dir, "result.json")) or {}
    analysis = read_analysis(run_dir)
    if analysis is not None:
        for k in ("analysis", *ANALYSIS_KEYS):
            metrics.pop(k, None)
        metrics.update(analysis)
    return metrics
