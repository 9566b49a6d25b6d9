"""The split gateways study (scenarios/split-gateways.yaml): the four set-ups
side by side for each metric (satellite-link throughput, RTT at the server,
download time, server busy time) and the satellite link's throughput over
time."""

from __future__ import annotations

import html
import os
import statistics
from collections import defaultdict

from analysis.figures import plt
from satbed.results.store import MEASURED, CellRow

from ..common import html_table
from .base import Study, emulator_samples, ends, figure, fmt, from_scenario, kernels, mean_ci_or_none, vantage_of, \
    summary_at

NAME = "Split gateways"

VARIANTS = ("terrestrial", "satellite", "large-windows", "gateways")


def _emulator_series(out: str, r: CellRow) -> list[tuple[float, float]]:
    """(t, bit/s) on the satellite link in the data's direction, per sample."""
    # The server is on side a of the satellite emulator (topologies/split-gateways.yaml);
    # a download enters port a.
    direction = "a_to_b" if r.config.get("direction", "download") == "download" else "b_to_a"
    series, last_t = [], 0.0
    for s in emulator_samples(os.path.join(out, "cells", r.hash), direction):
        if s.t_s > last_t:
            series.append((s.t_s, s.bytes_out * 8 / (s.t_s - last_t)))
        last_t = s.t_s
    return series


def _busy_s(r: CellRow, server: str) -> float | None:
    main = vantage_of(r, server).get("main") or {}
    d = main.get(main.get("data_direction") or "", {}) if main else {}
    v = d.get("data_xmit_time_s")
    return float(v) if v else None


def split_tables(out: str, rows: list[CellRow]) -> dict:
    """{variant: {metric: (mean, ci, n)}} for the split gateways page (and tests)."""
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.status not in MEASURED:
            continue
        v = r.params.get("variant") or r.params.get("pep", "")
        sender, receiver = ends(r)
        # Throughput on the satellite link: what it carried from its first
        # to its last busy sample (the FTP control exchange before and after
        # is a few hundred bytes).
        series = _emulator_series(out, r)
        active = [(t, b) for t, b in series if b > 0]
        if len(active) > 1:
            prev = {t: series[i - 1][0] if i else 0.0 for i, (t, _) in enumerate(series)}
            carried = sum(b * (t - prev[t]) for t, b in active)
            acc[v]["sat_kbps"].append(carried / (active[-1][0] - prev[active[0][0]]) / 1e3)
        rtt = summary_at(r, sender).get("rtt_avg_ms")
        if rtt is not None:
            acc[v]["server_rtt_ms"].append(float(rtt))
        if r.metrics.get("seconds"):
            acc[v]["download_s"].append(float(r.metrics["seconds"]))
        busy = _busy_s(r, sender)
        if busy is not None:
            acc[v]["server_busy_s"].append(busy)
        if r.goodput_bps:
            acc[v]["goodput_kbps"].append(r.goodput_bps / 1e3)
    return {v: {k: (*mean_ci_or_none(vals), len(vals)) for k, vals in m.items()} for v, m in acc.items()}


def page(out: str, rows: list[CellRow]) -> list[str]:

    tab = split_tables(out, rows)
    if not tab:
        return [f"<h2>{NAME}</h2><p>No measured cells yet.</p>"]
    order = [v for v in VARIANTS if v in tab] + sorted(set(tab) - set(VARIANTS))
    parts = [f"<h2>{NAME}: split-connection gateways over a T1 (the study's figures, our runs)</h2>", _split_config(out, rows)]
    metrics = (("sat_kbps", "satellite-link throughput (kbit/s)", "Figure 4"),
               ("server_busy_s", "server busy time (s)", "Figure 5"),
               ("server_rtt_ms", "RTT measured at the server (ms)", "Figure 6"),
               ("download_s", "download time at the client (s)", "Figure 7"))
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.8))
    for ax, (key, label, fig_no) in zip(axes, metrics):
        means = [tab[v].get(key, (None, None, 0))[0] or 0 for v in order]
        cis = [tab[v].get(key, (None, None, 0))[1] or 0 for v in order]
        ax.bar(range(len(order)), means, yerr=cis, color=[f"C{i}" for i in range(len(order))], capsize=3)
        ax.set_xticks(range(len(order)), order, rotation=20, fontsize=8)
        ax.set_title(f"{label}\n(study {fig_no})", fontsize=9)
        ax.grid(alpha=.3, axis="y")
    fig.tight_layout()
    parts.append(figure("split_gateways_variants", out, fig,
                         "The four set-ups side by side: mean over repetitions (95% interval where there are "
                         "several)."))

    fig, ax = plt.subplots(figsize=(9, 3.8))
    for i, v in enumerate(order):
        r = next((r for r in rows if (r.params.get("variant") or r.params.get("pep")) == v and r.status in MEASURED),
                 None)
        if r is None:
            continue
        s = _emulator_series(out, r)
        if not s:
            continue
        # One-second means: the 100 ms samples of a T1 are a few frames each.
        buckets: dict[int, list[float]] = defaultdict(list)
        for t, b in s:
            buckets[int(t)].append(b)
        xs = sorted(buckets)
        ax.plot(xs, [statistics.mean(buckets[x]) / 1e3 for x in xs], color=f"C{i}", label=v, lw=1)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("kbit/s on the satellite link")
    ax.grid(alpha=.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    parts.append(figure("split_gateways_throughput_over_time", out, fig,
                         "Throughput on the satellite link over time, server to client (the emulator's "
                         "100 ms counters, 1 s means; repetition 0 of each set-up)."))

    body = []
    for v in order:
        m = tab[v]
        cell = lambda k, d=1: fmt(m.get(k, (None,))[0], d) + (
            f" ± {m[k][1]:.{d}f}" if k in m and m[k][1] else "")
        body.append([v, cell("sat_kbps", 0), cell("goodput_kbps", 0), cell("server_rtt_ms"), cell("download_s"),
                     cell("server_busy_s"), str(max((x[2] for x in m.values()), default=0))])
    parts.append("<h3>The numbers</h3>" + html_table(
        ["set-up", "satellite link kbit/s", "goodput kbit/s", "server RTT ms", "download s", "server busy s",
         "runs"], body))
    return parts


def _split_config(out: str, rows: list[CellRow]) -> str:
    size = rows[0].params.get("size", 0)
    return (
        f"<p>Kernel: {html.escape(kernels(out, rows))}.</p>"
        "<p><b>Configuration.</b> server LAN &mdash; gateway &mdash; T1 link (1.544 Mbit/s; 250 ms each way "
        f"except terrestrial) &mdash; gateway &mdash; client LAN; one FTP download of {size / 2**20:g} MB "
        "(vsftpd, NcFTP; SHA-256 checked). Hosts: 64 KB fixed buffers, no window scaling "
        "(profiles/tcp/default-64k.yaml), except large-windows: 195 KB, window scale 3 "
        "(large-windows-195k). Gateways: pepd on a transparent node at each gateway's satellite port, "
        "195 KB WAN buffers (<code>wan_buf=195000</code>). Satellite-link throughput: what the emulator "
        "carried server to client from its first to its last busy 100 ms sample; server RTT: every ACK's RTT seen on the server's own interface; busy time: "
        "first to last data segment the server sent (tcptrace data transmit time).</p>"
        "<p><b>Where this departs from the study.</b> Linux TCP (CUBIC, SACK, delayed ACKs) instead of "
        "OPNET 5.1's model; the study's LAN and processing delays (its terrestrial RTT of about 150 ms) are "
        "not given, so our LANs add none and the terrestrial RTT is the T1's queueing alone; the T1's "
        "queue (100 packets, drop-tail) is ours; the gateways' split is a transparent pepd beside a router, "
        "not a TCP module inside it; the study reported utilisation curves, we report their means and the "
        "time series.</p>")


STUDY = Study(NAME, from_scenario("split-gateways"), page)
