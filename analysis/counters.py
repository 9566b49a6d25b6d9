"""Router and interface counters read back from a run's stored series
(RUN/counters/interfaces.jsonl, written by satbed/backends/counters.py while
the run sampled them): cut into intervals, drawn, and the run report's section.
Only the stored file is read, so `satbed report` redraws them anywhere."""

from __future__ import annotations

import html
import os

from satbed.backends.counters import SERIES, by_port, read_series, summarize

from .figures import data_uri, png, pyplot


def intervals(rows: list[dict], port: str, interval_s: float) -> list[dict]:
    """One port's series cut into intervals of interval_s (from its first
    sample): per interval its start, egress bits/s, queue drops and packets
    sent, from the cumulative counters at the samples nearest each boundary
    (the link-utilisation-per-interval view of the ACTS multi-flow study)."""
    rs = by_port(rows).get(port, [])
    if len(rs) < 2 or not interval_s > 0:
        return []
    t0 = rs[0]["t_s"]
    out, start = [], rs[0]
    edge = t0 + interval_s
    for r in rs[1:]:
        if r["t_s"] + 1e-9 >= edge:
            dt = r["t_s"] - start["t_s"]
            out.append({"t_s": round(start["t_s"] - t0, 3), "seconds": round(dt, 3),
                        "tx_bps": (r["tx_bytes"] - start["tx_bytes"]) * 8 / dt if dt > 0 else 0.0,
                        "dropped": r["dropped"] - start["dropped"],
                        "sent_packets": r["sent_packets"] - start["sent_packets"]})
            start = r
            while edge <= r["t_s"] + 1e-9:
                edge += interval_s
    return out


def plot(rows: list[dict], title: str = "Router interface counters") -> bytes:
    """PNG: per port, egress rate, queue drops per second and backlog over
    time (rates from the cumulative counters between samples)."""
    fig, (ax_rate, ax_drop, ax_q) = pyplot().subplots(3, 1, figsize=(7.5, 7.2), dpi=110, sharex=True)
    ports = by_port(rows)
    for key, rs in sorted(ports.items()):
        ts = [r["t_s"] for r in rs]
        mid, rate, drops = [], [], []
        for a, b in zip(rs, rs[1:]):
            dt = b["t_s"] - a["t_s"]
            if dt <= 0:
                continue
            mid.append(b["t_s"])
            rate.append(max(0, b["tx_bytes"] - a["tx_bytes"]) * 8 / dt / 1e6)
            drops.append(max(0, b["dropped"] - a["dropped"]) / dt)
        line, = ax_rate.plot(mid, rate, linewidth=1.2, label=key)
        ax_drop.plot(mid, drops, linewidth=1.2, color=line.get_color())
        ax_q.step(ts, [r["backlog_packets"] for r in rs], where="post", linewidth=1.2, color=line.get_color())
    if not ports:
        ax_rate.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax_rate.transAxes)
    ax_rate.set_ylabel("egress (Mbit/s)")
    ax_drop.set_ylabel("queue drops / s")
    ax_q.set_ylabel("backlog (packets)")
    ax_q.set_xlabel("time since sampling began (s)")
    for ax in (ax_rate, ax_drop, ax_q):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    if ports:
        ax_rate.legend(fontsize=8, loc="best")
    ax_rate.set_title(title, fontsize=11)
    fig.tight_layout()
    return png(fig)


def report_section(run_dir: str) -> str:
    """The run report's HTML section for RUN/counters/, or "" when the run
    has none. Drawn from the stored series only."""
    path = os.path.join(run_dir, SERIES)
    if not os.path.exists(path):
        return ""
    try:
        rows = read_series(path)
        image = plot(rows)
    except Exception as e:  # a broken series must not lose the report
        return f'<h2>Router interface counters</h2><p class="error">{html.escape(str(e))}</p>'
    head = ("<tr><th>port</th><th>device</th><th>qdisc</th><th>sent packets</th><th>dropped</th>"
            "<th>backlog max (packets)</th><th>backlog mean (packets)</th><th>egress bytes</th></tr>")
    body = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(v['dev'])}</td><td>{html.escape(str(v['kind']))}</td>"
        f"<td class=num>{v['sent_packets']:,}</td><td class=num>{v['dropped']:,}</td>"
        f"<td class=num>{v['backlog_packets_max']}</td><td class=num>{v['backlog_packets_mean']}</td>"
        f"<td class=num>{v['tx_bytes']:,}</td></tr>"
        for k, v in sorted(summarize(rows).items()))
    return ("<h2>Router interface counters</h2>\n"
            f"<p>From <code>{html.escape(SERIES)}</code>: the root qdisc and device counters of each "
            "sampled port; changes over the series.</p>\n"
            f"<table>{head}{body}</table>\n"
            f'<figure><img alt="counters" src="{data_uri(image)}"><figcaption>Egress rate, '
            "queue drops per second and backlog per port.</figcaption></figure>\n")
