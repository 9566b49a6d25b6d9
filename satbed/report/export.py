"""DIR/results.csv: one row per cell of a matrix, for a spreadsheet."""

from __future__ import annotations

import csv
import os
import time

from satbed.results.store import CellRow

from .summary import CAPTURE_METRICS, capture_metrics

CSV_PARAMS = ("client", "pep", "pep_options", "rtt", "ber", "loss", "size", "direction", "rate", "ceil", "queue",
              "emulator", "captures", "topology", "seed")


def write_csv(path: str, rows: list[CellRow]) -> None:
    fields = ["hash", "experiment", "status", *CSV_PARAMS, "repetition", "goodput_bps", "rtt_ms_avg", "loss",
              "integrity", "first_byte_s", "goodput_after_first_byte_bps", "cpu_client_s", "cpu_server_s",
              *(k for k, _ in CAPTURE_METRICS), "seconds", "started",
              "error"]
    tmp = path + ".tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in sorted(rows, key=lambda r: (r.experiment, r.params.get("client", ""), r.params.get("pep", ""),
                                             r.params.get("rtt", 0), r.params.get("ber", 0), r.repetition)):
            doc = {"hash": r.hash, "experiment": r.experiment, "status": r.status, "repetition": r.repetition,
                   "goodput_bps": r.goodput_bps, "seconds": _round(r.seconds), "error": r.error or "",
                   "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r.started)) if r.started else ""}
            for k in CSV_PARAMS:
                doc[k] = r.params.get(k)
            for k in ("rtt_ms_avg", "loss", "integrity", "first_byte_s", "goodput_after_first_byte_bps",
                      "cpu_client_s", "cpu_server_s"):
                doc[k] = r.metrics.get(k)
            doc.update(capture_metrics(r.metrics))
            w.writerow(doc)
    os.replace(tmp, path)


def _round(v: float | None) -> float | None:
    return round(v, 3) if v is not None else None
