"""The matrix report, regenerated from stored data only (DIR/results.sqlite
and the cell directories), never by rerunning:

  DIR/report.html   self-contained: the study's three charts, tables, the
                    time-sequence graph gallery of the cells, environment
  DIR/results.csv   one row per cell
  DIR/charts/*.png  the charts as files

Chart 1: goodput vs BER at RTT 0; Chart 2: vs BER at 600 ms; Chart 3: vs RTT
at BER 1e-5. One colour per protocol; solid with a PEP, dashed without;
mean and 95% confidence interval over repetitions. A partial matrix draws
what it has: a missing RTT or BER is replaced by the nearest one present and
the chart says so."""

from __future__ import annotations

import base64
import csv
import glob
import html
import io
import json
import math
import os
import re
import statistics
import sys
import time
from collections import Counter, defaultdict

from satbed.core.errors import SatbedError
from satbed.core.files import write_text
from satbed.execution.matrix import without_options_for_no_pep
from satbed.results.store import MEASURED, CellRow, Store

# Two-sided 95% Student t quantiles by degrees of freedom; 1.96 beyond.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
       10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}
# Stable colours: a protocol keeps its colour across charts and reports.
PROTOCOL_ORDER = ("ftp", "scp", "sftp", "rsync", "saratoga", "nuttcp-tcp", "nuttcp-udp", "wget", "iperf3",
                  "ping")
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
MARKERS = ("o", "s", "^", "D", "v", "P")
# Axes a chart holds at one value per series (the most common one) besides its own two.
OTHER_AXES = ("size", "direction", "rate", "ceil", "queue", "emulator", "captures", "topology", "pep_options",
              "link", "seed", "analyze")
MAX_EMBEDDED_GRAPHS = 48        # more are linked, so the report stays loadable


def t95(n: int) -> float:
    df = n - 1
    if df < 1:
        return float("nan")
    best = [k for k in T95 if k <= df]
    return T95[max(best)] if df <= 30 else 1.96


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% interval (0 for one sample)."""
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, 0.0
    return m, t95(len(values)) * statistics.stdev(values) / math.sqrt(len(values))


def colour(client: str) -> str:
    if client in PROTOCOL_ORDER:
        return COLOURS[PROTOCOL_ORDER.index(client) % len(COLOURS)]
    return COLOURS[sum(client.encode()) % len(COLOURS)]


def fmt_ber(b: float) -> str:
    if b == 0:
        return "0"
    exp = math.floor(math.log10(b))
    mant = b / 10 ** exp
    return f"1e{exp}" if abs(mant - 1) < 1e-9 else f"{mant:g}e{exp}"


def _key(v) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def pep_label(p: dict) -> str:
    """The PEP a cell ran, with its options: pepd's TCP WAN leg and its
    wan=rate leg are different rows of the study's charts, not one series
    held at its most common options."""
    opts = str(p.get("pep_options") or "").strip()
    return f"{p['pep']} {opts}" if opts and p["pep"] != "none" else p["pep"]


def _line(pep: str) -> str:
    """A series' line style: dashed without a PEP, dash-dot for a PEP
    with options (pepd wan=rate beside pepd), solid otherwise."""
    return "--" if pep == "none" else "-." if " " in pep else "-"


def measured(rows: list[CellRow]) -> list[CellRow]:
    return [r for r in rows if r.status in MEASURED and r.goodput_bps]


def pick(values: list[float], target: float, log: bool = False) -> float | None:
    """The value present nearest the target (BER compared on a log scale, 0 as 1e-12)."""
    if not values:
        return None
    if log:
        return min(values, key=lambda v: (abs(math.log10(v or 1e-12) - math.log10(target or 1e-12)), v))
    return min(values, key=lambda v: (abs(v - target), v))


def series(rows: list[CellRow], x: str, fixed: str, value: float) -> dict[tuple[str, str], dict]:
    """(client, pep) -> {"points": {x value: [goodput...]}, "failed": [x values
    where no repetition measured], "limited": [x values where a repetition was
    stopped by the time limit]} for the cells at fixed == value, each series
    held at its most common value of every other axis."""
    at = [r for r in rows if r.params.get(fixed) == value and "client" in r.params]
    by_series: dict[tuple[str, str], list[CellRow]] = defaultdict(list)
    for r in at:
        by_series[(r.params["client"], pep_label(r.params))].append(r)
    out = {}
    for key, rs in by_series.items():
        held = {a: Counter(_key(r.params.get(a)) for r in rs).most_common(1)[0][0] for a in OTHER_AXES}
        points: dict[float, list[float]] = defaultdict(list)
        tried: set[float] = set()
        limited: set[float] = set()
        for r in rs:
            if all(_key(r.params.get(a)) == held[a] for a in OTHER_AXES):
                tried.add(r.params[x])
                if r.status in MEASURED and r.goodput_bps:
                    points[r.params[x]].append(r.goodput_bps)
                    if r.status == "limited":
                        limited.add(r.params[x])
        out[key] = {"points": dict(points), "failed": sorted(tried - set(points)), "limited": sorted(limited),
                    "held": {a: json.loads(v) for a, v in held.items()}}
    return out


CHARTS = (
    # name, title, x axis, fixed axis, wanted value
    ("chart1", "Chart 1: goodput vs BER at RTT {v:g} ms", "ber", "rtt", 0.0),
    ("chart2", "Chart 2: goodput vs BER at RTT {v:g} ms", "ber", "rtt", 600.0),
    ("chart3", "Chart 3: goodput vs RTT at BER {b}", "rtt", "ber", 1e-5),
)


CHARTS_WANT = {name: want for name, _, _, _, want in CHARTS}


def draw_chart(rows: list[CellRow], name: str, title: str, x: str, fixed: str, want: float) -> dict:
    """One chart as PNG bytes plus a caption and the plotted numbers."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = measured(rows)
    present = sorted({r.params[fixed] for r in ok})
    value = pick(present, want, log=fixed == "ber")
    fig, ax = plt.subplots(figsize=(7.5, 4.6), dpi=110)
    caption, plotted = "", []
    if value is None:
        ax.text(0.5, 0.5, "no throughput measurements in this matrix", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        shown = want
        caption = "No cell measured goodput (ping cells measure RTT only)."
    else:
        shown = value
        if value != want:
            caption = (f"The matrix has no {fixed} = {fmt_ber(want) if fixed == 'ber' else f'{want:g} ms'}; "
                       f"drawn at the nearest present value. ")
        # Failed cells (a stalled transfer at high BER) stay visible as crosses at 0.
        ser = series([r for r in rows if r.status in ("ok", "limited", "failed", "timeout")], x, fixed, value)
        xs_all = sorted({xv for s in ser.values() for xv in [*s["points"], *s["failed"]]})
        # BER on evenly spaced categories (0 has no place on a log axis); RTT linear.
        pos = {v: i for i, v in enumerate(xs_all)} if x == "ber" else {v: v for v in xs_all}
        peps = sorted({p for _, p in ser if p != "none"})
        any_failed = any_limited = False
        order = sorted(ser, key=lambda k: (PROTOCOL_ORDER.index(k[0]) if k[0] in PROTOCOL_ORDER else 99, k))
        for client, pep in order:
            pts = ser[(client, pep)]["points"]
            xs = sorted(pts)
            stats = [mean_ci(pts[v]) for v in xs]
            label = f"{client} ({'no PEP' if pep == 'none' else pep})"
            ax.errorbar([pos[v] for v in xs], [m / 1e6 for m, _ in stats], yerr=[c / 1e6 for _, c in stats],
                        color=colour(client), linestyle=_line(pep),
                        marker=MARKERS[(peps.index(pep) + 1) % len(MARKERS)] if pep != "none" else MARKERS[0],
                        markersize=5, capsize=3, linewidth=1.6, label=label)
            lim = ser[(client, pep)]["limited"]
            if lim:
                any_limited = True
                ax.plot([pos[v] for v in lim], [mean_ci(pts[v])[0] / 1e6 for v in lim], linestyle="none",
                        marker="o", markersize=8, markerfacecolor="white", markeredgewidth=1.6,
                        color=colour(client), zorder=3)
            for v, (m, c) in zip(xs, stats):
                plotted.append({"client": client, "pep": pep, x: v, "n": len(pts[v]), "mean_bps": m,
                                "ci95_bps": c, "time_limited": v in lim})
            bad = ser[(client, pep)]["failed"]
            if bad:
                any_failed = True
                # The series' line runs on to its failures, so a protocol that collapses shows it.
                joined = sorted([(v, m) for v, (m, _) in zip(xs, stats)] + [(v, 0.0) for v in bad])
                ax.plot([pos[v] for v, _ in joined], [m / 1e6 for _, m in joined], color=colour(client),
                        linestyle=_line(pep), linewidth=1.6)
                ax.plot([pos[v] for v in bad], [0] * len(bad), linestyle="none", marker="x", markersize=9,
                        markeredgewidth=2, color=colour(client), clip_on=False)
        if x == "ber":
            ax.set_xticks(range(len(xs_all)))
            ax.set_xticklabels([fmt_ber(v) for v in xs_all])
            ax.set_xlabel("bit-error rate")
            if len(xs_all) == 1:
                ax.set_xlim(-0.5, 0.5)
        else:
            ax.set_xticks(xs_all)
            ax.set_xlabel("round-trip time (ms)")
            if len(xs_all) == 1:
                ax.set_xlim(xs_all[0] - 50, xs_all[0] + 50)
        ax.set_ylabel("goodput (Mbit/s)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if order:
            ax.legend(fontsize=8, ncol=2, loc="best")
        caption += ("Solid: with PEP; dash-dot: with PEP options (e.g. pepd wan=rate); dashed: without. Points: mean over repetitions; bars: 95% interval. "
                    "Each series is held at its most common size, direction and link settings.")
        if any_limited:
            caption += (" A hollow circle: the transfer was still running at the cell's time limit; its "
                        "goodput is what it delivered within the limit.")
        if any_failed:
            caption += (" A cross at 0: every repetition failed (typically a transfer that stalled "
                        "within the client's time limit, i.e. below size / limit); see the cells table.")
    ax.set_title(title.format(v=shown, b=fmt_ber(shown)), fontsize=11)
    fig.tight_layout()
    return {"name": name, "png": png(fig), "caption": caption, "points": plotted, "fixed": fixed,
            "value": value, "x": x}


def png(fig) -> bytes:
    """A matplotlib figure as PNG bytes, and the figure closed."""
    import matplotlib.pyplot as plt
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


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
        groups[_key(r.params)].append(r)
    out = []
    for key, rs in groups.items():
        p = rs[0].params
        vals = _goodputs(rs)
        m, c = mean_ci(vals) if vals else (None, None)
        after = _mean_metric(rs, "goodput_after_first_byte_bps")
        ref: dict = {}
        if reference:
            ref_rows = groups.get(_key(without_options_for_no_pep({**p, **reference})), [])
            ref_vals = _goodputs(ref_rows)
            ref_mean = statistics.fmean(ref_vals) if ref_vals else None
            ref_after = _mean_metric(ref_rows, "goodput_after_first_byte_bps")
            ref = {"ref_pct": 100 * m / ref_mean if m and ref_mean else None,
                   "ref_after_first_byte_pct": 100 * after / ref_after if after and ref_after else None}
        # What else tells the row apart: its variant and scenario paths
        # (the spoofing study's competing-flow count, the split-gateway study's set-up).
        setting = " ".join(([str(p["variant"])] if p.get("variant") else []) +
                           [f"{k}={v}" for k, v in sorted(p.items()) if "." in k])
        out.append({"setting": setting,
                    "client": p["client"], "pep": pep_label(p), "rtt": p["rtt"], "ber": p["ber"], "size": p["size"],
                    "direction": p["direction"], "cells": len(rs), "ok": sum(r.status in MEASURED for r in rs),
                    "limited": sum(r.status == "limited" for r in rs),
                    "failed": sum(r.status not in MEASURED for r in rs),
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
    their cell's paths and numbers, so those are masked before counting."""
    reasons = Counter(_reason(r) for r in rows if r.status not in MEASURED)
    return reasons.most_common()


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
                     f"{_human_size(d['size']):>10}  {d['ok'] - d['limited']:>3}{d['limited']:>4}{d['failed']:>5}"
                     f"{good:>16}" + (f"{_pct(d.get('ref_pct')):>16}" if ref else "") + f"{first:>11}{after:>16}"
                     + (f"{_pct(d.get('ref_after_first_byte_pct')):>16}" if ref else "")
                     + (f"  {d['setting']}" if d["setting"] else ""))
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
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return f"{v:.1f} %" if v is not None else "–"


def _mean_metric(rs: list[CellRow], key: str) -> float | None:
    vals = [r.metrics.get(key) for r in rs if r.status in MEASURED and isinstance(r.metrics.get(key), (int, float))]
    return statistics.fmean(vals) if vals else None


CSV_PARAMS = ("client", "pep", "pep_options", "rtt", "ber", "size", "direction", "rate", "ceil", "queue",
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


def _png_data(path: str) -> str:
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


# Cells whose graphs a report draws when missing (~12 s per vantage per 100 MB):
# FTP and SCP under each of the Global Hawk matrix's three PEP rows (none,
# pepd's TCP WAN leg, pepd wan=rate).
GALLERY_DRAWN = 6


def gallery(out: str, rows: list[CellRow], stream=sys.stderr) -> list[dict]:
    """Time-sequence graphs and reports of the cells, the study's own view
    (highest RTT and BER, FTP/SCP, each PEP) first. Matrix cells store
    metrics, tcptrace output and captures but no graphs; the first
    GALLERY_DRAWN TCP cells of that view are drawn here, once, and every other
    cell is drawn by `satbed report DIR/cells/HASH`."""
    items = []
    for r in rows:
        cell_dir = os.path.join(out, "cells", r.hash)
        analysed = any(isinstance(v, dict) and "main" in v for v in (r.metrics.get("analysis") or {}).values())
        drawn = os.path.exists(os.path.join(cell_dir, "report.html")) or \
            glob.glob(os.path.join(cell_dir, "analysis", "**", "*.png"), recursive=True)
        if not analysed and not drawn:
            continue
        p = r.params
        # PEP before client: the first few drawn alternate FTP and SCP, as the
        # study shows them, instead of one protocol under every PEP.
        items.append({"row": r, "dir": cell_dir,
                      "rank": (-(p["rtt"]), -(p["ber"]), 0 if p["client"] in ("ftp", "scp") else 1,
                               r.repetition, pep_label(p), p["client"])})
    items.sort(key=lambda d: d["rank"])
    for it in items[:GALLERY_DRAWN]:
        if not os.path.exists(os.path.join(it["dir"], "report.html")):
            stream.write(f"satbed report: drawing the graphs of cell {it['row'].hash} "
                         f"({it['row'].params['client']}/{pep_label(it['row'].params)})\n")
            stream.flush()
            try:
                from analysis.report import write_report
                write_report(it["dir"])
            except Exception as e:  # one cell's drawing problem must not lose the matrix report
                stream.write(f"satbed report: cell {it['row'].hash}: graphs not drawn: {e}\n")
    shown = []
    for it in items:
        pngs = sorted(glob.glob(os.path.join(it["dir"], "analysis", "**", "*.png"), recursive=True))
        report = os.path.join(it["dir"], "report.html")
        if pngs or os.path.exists(report):
            shown.append({**it, "pngs": pngs, "report": report if os.path.exists(report) else None})
    return shown


def environment(out: str, rows: list[CellRow], runs: list[dict]) -> dict:
    env: dict = {}
    for r in rows:
        path = os.path.join(out, "cells", r.hash, "environment.json")
        if os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    env = json.load(f)
                break
            except (OSError, ValueError):
                continue
    return {"cell environment (first cell)": env, "matrix runs": runs}


def _fmt_bps(v: float | None) -> str:
    return f"{v / 1e6:.3f}" if v is not None else "–"


def _table(headers: list[str], body: list[list[str]], raw: bool = False) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    rows = "".join("<tr>" + "".join(f"<td>{c if raw else html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in body)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
.chart{margin:1.5em 0}.chart img{max-width:100%;border:1px solid #ddd}
.caption{font-size:13px;color:#555}.failed{color:#b00}
.gallery{display:flex;flex-wrap:wrap;gap:12px}.gallery figure{margin:0;width:370px}
.gallery img{width:100%;border:1px solid #ddd}.gallery figcaption{font-size:12px}
pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:12px}
"""


def gallery_html(out: str, items: list[dict]) -> list[str]:
    """Per cell: the zoomed time-sequence graphs (the study's view) embedded,
    every other graph and the cell's own report linked. Beyond
    MAX_EMBEDDED_GRAPHS images, everything is linked."""
    parts = ["<h2>Time-sequence graphs</h2>"]
    if not items:
        return parts + ["<p>No cell has analysis graphs (captures off, ping cells, or no tcptrace).</p>"]
    parts.append("<p>Zoomed time-sequence graphs per vantage point (lan_a: Client A's port; wan: the "
                 "satellite side; lan_b: Client B's port); the other graphs and each cell's report are linked. "
                 "Any other cell's graphs: <code>satbed report DIR/cells/HASH</code>.</p>")
    embedded = 0
    for it in items:
        r, p = it["row"], it["row"].params
        cell = os.path.join(out, "cells", r.hash)
        label = f"{p['client']} / {pep_label(p)}, RTT {p['rtt']:g} ms, BER {fmt_ber(p['ber'])}, repetition {r.repetition}"
        links = [f"<a href='cells/{r.hash}/report.html'>cell report</a>"] if it["report"] else []
        shown = [g for g in it["pngs"] if os.path.basename(g).startswith("tsg_window")] or it["pngs"][:1]
        figures = []
        for png in it["pngs"]:
            rel = os.path.relpath(png, out)
            name = os.path.relpath(png, cell)
            if png in shown and embedded < MAX_EMBEDDED_GRAPHS:
                figures.append(f"<figure><img alt='{html.escape(rel)}' src='data:image/png;base64,"
                               f"{_png_data(png)}'><figcaption>{html.escape(name)}</figcaption></figure>")
                embedded += 1
            else:
                links.append(f"<a href='{html.escape(rel)}'>{html.escape(name)}</a>")
        parts.append(f"<h3>{html.escape(label)}</h3><div class='gallery'>{''.join(figures)}</div>"
                     f"<p class='caption'>{' · '.join(links)}</p>")
    return parts


def build(out: str) -> str:
    """Write DIR/report.html, DIR/results.csv and DIR/charts/*.png; returns the report path."""
    db = os.path.join(out, "results.sqlite")
    if not os.path.exists(db):
        raise SatbedError(f"{out}: no results.sqlite (run `satbed matrix FILE --out {out}` first)")
    with Store(db) as store:
        rows = store.cells()
        runs = store.runs()
    write_csv(os.path.join(out, "results.csv"), rows)
    os.makedirs(os.path.join(out, "charts"), exist_ok=True)
    from satbed.report import studies
    study = studies.pages(out, rows)
    charts = []
    # A study's own page replaces the Global Hawk charts (their axes, BER
    # and RTT, are not what those studies vary). A matrix with variants (e.g. the Global Hawk hosts axis: today's and
    # the study's) draws the three charts once per variant: pooling them
    # would average different hosts into one point.
    variants = sorted({r.params.get("variant") or "" for r in rows})
    for variant in variants if not study else []:
        vrows = [r for r in rows if (r.params.get("variant") or "") == variant]
        for base, title, x, fixed, want in CHARTS:
            name = f"{base}_{variant}" if variant else base
            if variant:
                title = f"{title} ({variant})"
            c = draw_chart(vrows, name, title, x, fixed, want)
            c["base"], c["variant"] = base, variant
            with open(os.path.join(out, "charts", f"{name}.png"), "wb") as f:
                f.write(c["png"])
            charts.append(c)

    experiments = sorted({r.experiment for r in rows})
    status = Counter(r.status for r in rows)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>satbed matrix: "
             f"{html.escape(', '.join(experiments))}</title><style>{CSS}</style></head><body>",
             f"<h1>satbed matrix report: {html.escape(', '.join(experiments) or 'empty')}</h1>",
             f"<p>{len(rows)} cells: " + ", ".join(f"{n} {s}" for s, n in sorted(status.items())) +
             f". Generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} from "
             f"<code>results.sqlite</code> and the cell directories. "
             f"<a href='results.csv'>results.csv</a></p>"]
    reasons = failure_reasons(rows)
    if reasons:
        # Beside the charts, not only in the cells table: a cross at 0 needs its why.
        parts.append("<h2>Failures</h2><p class='failed'>" +
                     f"{sum(n for _, n in reasons)} cells did not measure; their reasons, most common first:</p>" +
                     _table(["cells", "reason"], [[str(n), text] for text, n in reasons]))
    parts.extend(study)
    if charts:
        parts.append("<h2>Charts</h2>")
    for c in charts:
        # The same variant's other chart at the same fixed value (each variant has its own three).
        twin = next((o for o in charts if o is not c and o["variant"] == c["variant"] and o["x"] == c["x"]
                     and o["fixed"] == c["fixed"] and o["value"] is not None and o["value"] == c["value"]), None)
        if twin is not None and c["name"] < twin["name"] and c["value"] != CHARTS_WANT[c["base"]]:
            # Drawn at the nearest present value, it would be the other chart again.
            parts.append(f"<div class='chart' id='{c['name']}'><p class='caption'>Chart {c['base'][-1]}: "
                         f"the matrix has no {c['fixed']} = {CHARTS_WANT[c['base']]:g}; the nearest present "
                         f"value is {twin['name']}'s, so it is not drawn twice.</p></div>")
            try:
                os.remove(os.path.join(out, "charts", f"{c['name']}.png"))
            except FileNotFoundError:
                pass
            continue
        parts.append(f"<div class='chart' id='{c['name']}'><img alt='{c['name']}' "
                     f"src='data:image/png;base64,{base64.b64encode(c['png']).decode()}'>"
                     f"<p class='caption'>{html.escape(c['caption'])}</p></div>")

    parts.append("<h2>Summary (repetitions pooled)</h2>")
    # The newest run's reference row: what the matrix summary compared with.
    reference = next((r["reference"] for r in reversed(runs) if r.get("reference")), None)
    table = summary_table(rows, reference)
    # Only the columns some configuration has: a ping column in a matrix
    # without ping cells, or capture columns without captures, stay out.
    named = ", ".join(f"{k}={v}" for k, v in reference.items()) if reference else ""
    extra = [(k, label) for k, label in (("ref_pct", f"% of {named}"),
                                         ("first_byte_s", "s before the first byte"),
                                         ("after_first_byte_bps", "goodput after it Mbit/s"),
                                         ("ref_after_first_byte_pct", f"after it, % of {named}"),
                                         ("rtt_ms_avg", "ping RTT ms"), ("cpu_s_per_gb", "CPU s per GB (both ends)"),
                                         *CAPTURE_METRICS)
             if any(d.get(k) is not None for d in table)]

    def cell(k: str, v: float | None) -> str:
        if v is None:
            return "–"
        if k.endswith("_bps"):
            return _fmt_bps(v)
        if k == "cpu_s_per_gb":
            return f"{v:.1f}"
        if k == "first_byte_s":
            return f"{v:.2f}"
        if k.endswith("_pct"):
            return f"{v:.1f} %"
        return f"{v:.1f}" if k.endswith("_ms_avg") else f"{v:,.0f}"
    settings = any(d["setting"] for d in table)
    body = [[*([d["setting"]] if settings else []),
             d["client"], d["pep"], f"{d['rtt']:g}", fmt_ber(d["ber"]), _human_size(d["size"]), d["direction"],
             f"{d['ok']}/{d['cells']}" + (f" ({d['limited']} limited)" if d["limited"] else ""),
             _fmt_bps(d["mean_bps"]),
             _fmt_bps(d["ci95_bps"]) if d["ci95_bps"] is not None and d["ok"] > 1 else "–",
             *(cell(k, d.get(k)) for k, _ in extra),
             f"{d['seconds']:.1f}" if d["seconds"] else "–"] for d in table]
    parts.append(_table([*(["setting"] if settings else []),
                         "client", "PEP", "RTT ms", "BER", "size", "direction", "ok", "goodput Mbit/s",
                         "± 95% Mbit/s", *(label for _, label in extra), "cell s"], body))
    if any(k == "first_byte_s" for k, _ in extra):
        parts.append("<p class='caption'>Seconds before the first byte: from the transfer command's start "
                     "until the received copy first held a byte (the application's own set-up: ssh's key "
                     "exchange and login, FTP's commands); the goodput after it runs from there to the "
                     "command's end.</p>")
    if any(k in dict(CAPTURE_METRICS) or k == "cpu_s_per_gb" for k, _ in extra):
        parts.append("<p class='caption'>From the cells' captures: sender and receiver views end to "
                     "end as the TCP spoofing study defines them (bytes acknowledged from the "
                     "initiator's SYN to the last ACK the sender received / the receiver sent); RTT "
                     "from every ACK, retransmissions and SACK blocks at the emulator port the "
                     "data enters the satellite link by.</p>")

    parts.append("<h2>Cells</h2>")
    body = []
    for r in sorted(rows, key=lambda r: (r.params["client"], pep_label(r.params), r.params["rtt"], r.params["ber"],
                                         r.repetition)):
        link = f"cells/{r.hash}/"
        rep = os.path.join(out, "cells", r.hash, "report.html")
        name = f"<a href='{link}report.html'>{r.hash}</a>" if os.path.exists(rep) else \
            f"<a href='{link}'>{r.hash}</a>"
        st = html.escape(r.status) if r.status in MEASURED else f"<span class='failed'>{html.escape(r.status)}</span>"
        p = r.params
        body.append([name, html.escape(p["client"]), html.escape(pep_label(p)), f"{p['rtt']:g}", fmt_ber(p["ber"]),
                     _human_size(p["size"]), str(r.repetition), st, _fmt_bps(r.goodput_bps),
                     f"{r.seconds:.1f}" if r.seconds else "–", html.escape((r.error or "")[:200])])
    parts.append(_table(["cell", "client", "PEP", "RTT ms", "BER", "size", "rep", "status", "goodput Mbit/s",
                         "seconds", "error"], body, raw=True))

    parts.extend(gallery_html(out, gallery(out, rows)))

    parts.append("<h2>Environment</h2><pre>" +
                 html.escape(json.dumps(environment(out, rows, runs), indent=2, sort_keys=True, default=str)) +
                 "</pre></body></html>")
    path = os.path.join(out, "report.html")
    write_text(path, "\n".join(parts))
    return path


def _human_size(n: int) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div:
            return f"{n / div:g}{unit}"
    return str(n)
