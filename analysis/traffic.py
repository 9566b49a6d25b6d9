"""Background traffic's records (RUN/traffic/*.jsonl, written by trafficgen) read back:
load_flows() joins a client's record with the server's record of the same flow (the
sender's retransmission count lives on the sending side); analyze(), plot() and
report_section() read only those files, so `satbed report` redraws them anywhere."""

from __future__ import annotations

import bisect
import html
import math
import os
from typing import Callable

from satbed.backends.traffic import load_flows, summary
from satbed.model.workload import TRAFFIC_DIR

from .figures import data_uri, png, pyplot


def goodput_cdf(flows: list[dict], status: str = "completed",
                select: Callable[[dict], bool] | None = None) -> dict[str, list[tuple[float, float]]]:
    """Per-flow goodput CDF per direction: [(goodput_bps, P(X <= x))], of the
    flows with that status that `select` keeps (e.g. those that ran while
    the link's BER was in one decade)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for direction in ("download", "upload"):
        vals = sorted(r["goodput_bps"] for r in flows if r["status"] == status and r["direction"] == direction
                      and (select is None or select(r)))
        if vals:
            out[direction] = [(v, (i + 1) / len(vals)) for i, v in enumerate(vals)]
    return out


def active_flows(flows: list[dict], step_s: float = 0.1, t0: float | None = None) -> list[tuple[float, int]]:
    """The number of open flows over time, sampled every step_s from t0
    (default: the first flow's start): [(seconds since t0, open flows)]."""
    if not flows:
        return []
    t0 = min(r["start"] for r in flows) if t0 is None else t0
    starts = sorted(r["start"] for r in flows)
    ends = sorted(r["end"] for r in flows)
    t_end = max(ends)
    out = []
    n = int(math.floor((t_end - t0) / step_s)) + 1
    for i in range(n):
        t = t0 + i * step_s
        # Open at t: started at or before t, not yet ended.
        out.append((round(i * step_s, 6), bisect.bisect_right(starts, t) - bisect.bisect_right(ends, t)))
    return out


def arrival_rate(flows: list[dict], tag: str | None = None) -> float | None:
    """Finite-flow arrivals per second over the span of their starts."""
    starts = sorted(r["start"] for r in flows if r["kind"] == "finite" and (tag is None or r.get("tag") == tag))
    if len(starts) < 2:
        return None
    return (len(starts) - 1) / (starts[-1] - starts[0])


def analyze(run_dir: str) -> dict:
    """Figures' numbers: goodput CDF per direction, open flows over time."""
    flows = load_flows(run_dir)
    return {"flows": len(flows), "goodput_cdf": goodput_cdf(flows), "active_flows": active_flows(flows),
            "arrival_rate_per_s": arrival_rate(flows)}


def plot(run_dir: str) -> bytes:
    """PNG: completed flows' goodput CDF (per direction) and open flows over time."""
    flows = load_flows(run_dir)
    fig, (ax_cdf, ax_n) = pyplot().subplots(2, 1, figsize=(7.5, 6.4), dpi=110)
    cdf = goodput_cdf(flows)
    for direction, pts in cdf.items():
        ax_cdf.step([v / 1e6 for v, _ in pts], [p for _, p in pts], where="post", linewidth=1.4,
                    label=f"{direction} ({len(pts)} flows)")
    if cdf:
        ax_cdf.set_xscale("log")
        ax_cdf.legend(fontsize=8, loc="best")
    else:
        ax_cdf.text(0.5, 0.5, "no completed flows", ha="center", va="center", transform=ax_cdf.transAxes)
    ax_cdf.set_xlabel("per-flow goodput (Mbit/s)")
    ax_cdf.set_ylabel("fraction of flows")
    ax_cdf.set_ylim(0, 1)
    ax_cdf.set_title("Background traffic: completed flows' goodput", fontsize=11)
    ax_cdf.grid(True, alpha=0.3, which="both")
    series = active_flows(flows)
    if series:
        ax_n.step([t for t, _ in series], [n for _, n in series], where="post", linewidth=1.2, color="#1f77b4")
    ax_n.set_xlabel("time since the first flow (s)")
    ax_n.set_ylabel("open flows")
    ax_n.set_ylim(bottom=0)
    ax_n.grid(True, alpha=0.3)
    ax_n.set_title("Open flows over time", fontsize=11)
    fig.tight_layout()
    return png(fig)


def report_section(run_dir: str) -> str:
    """The run report's HTML section for RUN/traffic/, or "" without one."""
    if not os.path.isdir(os.path.join(run_dir, TRAFFIC_DIR)):
        return ""
    try:
        s = summary(run_dir)
        image = plot(run_dir)
    except Exception as e:  # a broken record file must not lose the report
        return f'<h2>Background traffic</h2><p class="error">{html.escape(str(e))}</p>'
    g = s["completed_goodput_bps"] or {}
    status = ", ".join(f"{k} {v}" for k, v in sorted(s["by_status"].items()))
    cpu = ", ".join(f"{k} {v:.3f}" for k, v in s["cpu_share"].items() if v is not None)
    rows = [("flows", f"{s['flows']:,} ({status})"), ("bytes delivered", f"{s['bytes']:,}"),
            ("completed flows' goodput p10 / p50 / p90",
             " / ".join(f"{g[k] / 1e6:.3f}" for k in ("p10", "p50", "p90")) + " Mbit/s" if g else "none"),
            ("retransmitted segments (sender side)", f"{s['retransmissions']:,}"),
            ("generator CPU (cores)", cpu or "NA")]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return ("<h2>Background traffic</h2>\n"
            f"<p>trafficgen records in <code>{TRAFFIC_DIR}/</code>, one per flow.</p>\n"
            f"<table>{body}</table>\n"
            f'<figure><img alt="traffic" src="{data_uri(image)}"><figcaption>Goodput CDF of '
            "completed finite flows per direction, and the number of open flows over time.</figcaption>"
            "</figure>\n")
