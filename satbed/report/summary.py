"""The matrix's numbers per configuration (repetitions pooled): the summary
table of the report page and what a person reads in the terminal when a
matrix ends, with the failures' reasons."""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict

from satbed.model.experiment import without_options_for_no_pep
from satbed.results.store import MEASURED, UNAVAILABLE, CellRow

from .common import PROTOCOL_ORDER, fmt_ber, human_size, mean_ci, measured, param_key, pep_label


# Capture metrics the matrix report carries per configuration: (key, column).
CAPTURE_METRICS = (
    ("sender_view_bps", "sender view Mbit/s"),
    ("receiver_view_bps", "receiver view Mbit/s"),
    ("sat_rtt_ms_avg", "RTT avg ms (satellite hop)"),
    ("sat_rexmt_pkts", "retransmitted pkts (satellite hop)"),
    ("sat_sack_blocks", "SACK blocks (satellite hop)"),
)


def cpu_per_gb(metrics: dict) -> float | None:
    """CPU seconds of both ends (client command and servers) per 10^9 bytes
    delivered; None where the cell did not record them."""
    c, s, b = metrics.get("cpu_client_s"), metrics.get("cpu_server_s"), metrics.get("bytes")
    if not all(isinstance(v, (int, float)) for v in (c, s, b)) or not b:
        return None
    return (c + s) / b * 1e9


def _mean_cpu_per_gb(rs: list[CellRow]) -> float | None:
    vals = [v for r in rs if r.status in MEASURED and (v := cpu_per_gb(r.metrics)) is not None]
    return statistics.fmean(vals) if vals else None


def capture_metrics(metrics: dict) -> dict:
    """A cell's figures from its captures (result.json "analysis" and
    "end_to_end_throughput"): the spoofing study's end-to-end sender and
    receiver views, and RTT (from every ACK), retransmissions and SACK blocks
    where the data enters the satellite link: the WAN capture next to the
    sender (the one whose handshake puts the sender closest).  Empty when the
    cell was not analysed."""
    out: dict = {}
    e2e = metrics.get("end_to_end_throughput") or {}
    if e2e:
        out["sender_view_bps"] = e2e.get("sender_bps")
        out["receiver_view_bps"] = e2e.get("receiver_bps")
    analysis = metrics.get("analysis") or {}
    wans = []
    for v in ("wan_a", "wan_b"):
        main = (analysis.get(v) or {}).get("main") if isinstance(analysis.get(v), dict) else None
        st = (main or {}).get("spoofing_throughput") or {}
        if main and st.get("rtt_vantage_sender_ms") is not None:
            wans.append((st["rtt_vantage_sender_ms"], main["summary"]))
    if wans:
        sm = min(wans, key=lambda w: w[0])[1]
        out["sat_rtt_ms_avg"] = sm.get("rtt_avg_ms")
        out["sat_rexmt_pkts"] = sm.get("rexmt_pkts")
        out["sat_sack_blocks"] = sm.get("sack_blocks_seen")
    return {k: v for k, v in out.items() if isinstance(v, (int, float))}


def _mean_capture(rs: list[CellRow], key: str) -> float | None:
    vals = [capture_metrics(r.metrics).get(key) for r in rs if r.status in MEASURED]
    vals = [v for v in vals if v is not None]
    return statistics.fmean(vals) if vals else None


def summary_table(rows: list[CellRow], reference: dict | None = None) -> list[dict]:
    """One row per parameter combination (repetitions pooled). With a
    reference (parameter: value, e.g. client: saratoga), each row also gives
    its goodput as a percentage of the reference row that shares all its
    other parameters: the experiment's own yardstick, measured in the same run."""
    groups: dict[str, list[CellRow]] = defaultdict(list)
    for r in rows:
        groups[param_key(r.params)].append(r)
    out = []
    for key, rs in groups.items():
        p = rs[0].params
        vals = _goodputs(rs)
        m, c = mean_ci(vals) if vals else (None, None)
        after = _mean_metric(rs, "goodput_after_first_byte_bps")
        ref: dict = {}
        if reference:
            ref_rows = groups.get(param_key(without_options_for_no_pep({**p, **reference})), [])
            ref_vals = _goodputs(ref_rows)
            ref_mean = statistics.fmean(ref_vals) if ref_vals else None
            ref_after = _mean_metric(ref_rows, "goodput_after_first_byte_bps")
            ref = {"ref_pct": 100 * m / ref_mean if m and ref_mean else None,
                   "ref_after_first_byte_pct": 100 * after / ref_after if after and ref_after else None}
        # What else tells the row apart: its variant and scenario paths
        # (the TCP spoofing study's competing-flow count, the split gateways' set-up).
        setting = " ".join(([str(p["variant"])] if p.get("variant") else []) +
                           [f"{k}={v}" for k, v in sorted(p.items()) if "." in k])
        out.append({"setting": setting,
                    "client": p["client"], "pep": pep_label(p), "rtt": p["rtt"], "ber": p["ber"], "size": p["size"],
                    "direction": p["direction"], "cells": len(rs), "ok": sum(r.status in MEASURED for r in rs),
                    "limited": sum(r.status == "limited" for r in rs),
                    "failed": sum(r.status not in MEASURED and r.status != UNAVAILABLE for r in rs),
                    "unavailable": sum(r.status == UNAVAILABLE for r in rs),
                    "mean_bps": m, "ci95_bps": c, "first_byte_s": _mean_metric(rs, "first_byte_s"),
                    "after_first_byte_bps": after, **ref, "rtt_ms_avg": _mean_metric(rs, "rtt_ms_avg"),
                    "cpu_s_per_gb": _mean_cpu_per_gb(rs),
                    **{k: _mean_capture(rs, k) for k, _ in CAPTURE_METRICS},
                    "seconds": statistics.fmean([r.seconds for r in rs if r.seconds]) if any(
                        r.seconds for r in rs) else None})
    out.sort(key=lambda d: (PROTOCOL_ORDER.index(d["client"]) if d["client"] in PROTOCOL_ORDER else 99,
                            d["client"], d["pep"], d["rtt"], d["ber"], d["size"], d["direction"], d["setting"]))
    return out


def _goodputs(rs: list[CellRow]) -> list[float]:
    """The goodputs the cells measured (limited ones over their time limit)."""
    return [r.goodput_bps for r in measured(rs)]


def failure_reasons(rows: list[CellRow]) -> list[tuple[str, int]]:
    """The reasons cells failed, most common first: errors differ only by
    their cell's paths and numbers, so those are masked before counting.
    Unavailable cells did not fail: unavailable_reasons gives theirs."""
    reasons = Counter(_reason(r) for r in rows if r.status not in MEASURED and r.status != UNAVAILABLE)
    return reasons.most_common()


def unavailable_reasons(rows: list[CellRow]) -> list[tuple[str, int]]:
    """Why cells were not run here, most common first: their PEP adapter's
    one line (the same for all of a PEP's cells)."""
    return Counter((r.error or "PEP not available").strip() for r in rows
                   if r.status == UNAVAILABLE).most_common()


def _reason(r: CellRow) -> str:
    text = (r.error or r.status).strip().splitlines()[0] if (r.error or r.status).strip() else r.status
    text = re.sub(r"\s*\(run directory: [^)]*\)", "", text)
    text = re.sub(r"(/[^\s:'\"]*)?/cells/[0-9a-f]{6,}", "CELL", text)
    text = re.sub(r"\b[0-9a-f]{16,}\b", "…", text)
    return f"{r.status}: {text}" if not text.startswith(r.status) else text


def terminal_summary(rows: list[CellRow], width: int = 240, reference: dict | None = None) -> str:
    """What a person reads in the terminal when a matrix ends: per
    configuration ok/limited/failed and goodput (over the whole command, then
    after the first received byte, and the seconds before it), as a share of
    the experiment's reference row where it names one; then the failure reasons."""
    table = summary_table(rows, reference)
    named = ",".join(str(v) for v in reference.values()) if reference else ""
    label = named if len(named) <= 12 else "ref"
    ref = f"% of {label}" if reference else ""
    pep_w = max([16, *(len(d["pep"]) + 2 for d in table)])
    lines = [f"{'client':<11}{'pep':<{pep_w}}{'rtt ms':>7}{'ber':>7}{'size':>10}  {'ok':>3}{'lim':>4}{'fail':>5}"
             f"{'goodput Mbit/s':>16}" + (f"{ref:>16}" if ref else "") + f"{'1st byte s':>11}"
             f"{'after it Mbit/s':>16}" + (f"{ref:>16}" if ref else "")]
    for d in table:
        good = f"{d['mean_bps'] / 1e6:.3f}" if d["mean_bps"] is not None else "–"
        if d["ci95_bps"] and d["ok"] > 1:
            good += f" ±{d['ci95_bps'] / 1e6:.3f}"
        first = f"{d['first_byte_s']:.2f}" if d["first_byte_s"] is not None else "–"
        after = f"{d['after_first_byte_bps'] / 1e6:.3f}" if d["after_first_byte_bps"] is not None else "–"
        lines.append(f"{d['client'][:10]:<11}{d['pep']:<{pep_w}}{d['rtt']:>7g}{fmt_ber(d['ber']):>7}"
                     f"{human_size(d['size']):>10}  {d['ok'] - d['limited']:>3}{d['limited']:>4}{d['failed']:>5}"
                     f"{good:>16}" + (f"{_pct(d.get('ref_pct')):>16}" if ref else "") + f"{first:>11}{after:>16}"
                     + (f"{_pct(d.get('ref_after_first_byte_pct')):>16}" if ref else "")
                     + (f"  {d['setting']}" if d["setting"] else "")
                     + (f"  ({d['unavailable']} unavailable here)" if d["unavailable"] else ""))
    if reference:
        lines.append(f"% of {label}: of the row with "
                     + ", ".join(f"{k}={v}" for k, v in reference.items()) + " and the same other parameters")
    status = Counter(r.status for r in rows)
    lines.append(f"{len(rows)} cells: " + ", ".join(f"{n} {s}" for s, n in sorted(status.items())))
    reasons = failure_reasons(rows)
    if reasons:
        lines.append("failures, most common first:")
        for text, n in reasons[:5]:
            lines.append(f"  {n:>3} x {text[:width]}")
        if len(reasons) > 5:
            lines.append(f"  ... {len(reasons) - 5} other reasons (results.csv, report.html)")
    missing = unavailable_reasons(rows)
    if missing:
        # Not failures: the next run, once the PEP is installed, runs them.
        lines.append("unavailable here (not run; a later run runs them once the PEP is installed):")
        for text, n in missing:
            # Whole: the adapter's line says what to install, and there are few.
            lines.append(f"  {n:>3} x {text}")
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return f"{v:.1f} %" if v is not None else "–"


def _mean_metric(rs: list[CellRow], key: str) -> float | None:
    vals = [r.metrics.get(key) for r in rs if r.status in MEASURED and isinstance(r.metrics.get(key), (int, float))]
    return statistics.fmean(vals) if vals else None
