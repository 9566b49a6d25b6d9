"""Study pages: `satbed report DIR` on a scenario's matrix draws that study's
own figure types from our runs, beside the generic charts.

  TCP spoofing (scenarios/spoofing.yaml): throughput vs transfer size (regular /
      spoofed x sender / receiver view), percent difference vs size, dropped
      data packets of the main flow vs size, gain vs competing flows.
  split gateways (scenarios/split-gateways.yaml): the four set-ups side by side for
      each metric (satellite-link throughput, RTT at the server, download
      time, server busy time) and the satellite link's throughput over time.

Everything comes from what the cells stored (result.json in results.sqlite,
the emulator's time series in the cell directory); nothing is rerun. Each
page states its configuration and where our set-up departs from the study's.
"""

from __future__ import annotations

import csv
import html
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from satbed.results.store import MEASURED, CellRow

PACKET = 1448           # payload bytes per full segment (1500-byte packets with timestamps)


def study_of(rows: list[CellRow]) -> str | None:
    """The scenario name of a matrix's cells, if they are one scenario's."""
    names = {os.path.splitext(os.path.basename(r.params.get("scenario") or ""))[0] for r in rows}
    return names.pop() if len(names) == 1 else None


def pages(out: str, rows: list[CellRow]) -> list[str]:
    """HTML sections for the study the matrix reproduces ([] if none)."""
    study = study_of(rows)
    if study == "spoofing":
        return spoofing_page(out, rows)
    if study == "split-gateways":
        return split_gateways_page(out, rows)
    if study == "multiflow-ber":
        return multiflow_page(out, rows)
    return []


def _mean_ci(values: list[float]) -> tuple[float | None, float | None]:
    from satbed.report.charts import mean_ci
    if not values:
        return None, None
    return mean_ci(values)


def _vantage_of(r: CellRow, node: str) -> dict:
    """The analysis of the capture taken at node's interface."""
    m = r.metrics
    for v, c in (m.get("captures") or {}).items():
        if isinstance(c, dict) and c.get("node") == node:
            return (m.get("analysis") or {}).get(v) or {}
    return {}


def _summary(r: CellRow, node: str) -> dict:
    return ((_vantage_of(r, node).get("main") or {}).get("summary")) or {}


def _ends(r: CellRow) -> tuple[str, str]:
    """(sender, receiver) hosts of the main flow."""
    near, far = r.config.get("endpoints") or ["", ""]
    return (far, near) if r.config.get("direction", "download") == "download" else (near, far)


def _figure(name: str, out: str, fig, caption: str) -> str:
    from satbed.report.charts import png
    import base64
    data = png(fig)
    os.makedirs(os.path.join(out, "charts"), exist_ok=True)
    with open(os.path.join(out, "charts", f"{name}.png"), "wb") as f:
        f.write(data)
    return (f"<div class='chart' id='{name}'><img alt='{name}' src='data:image/png;base64,"
            f"{base64.b64encode(data).decode()}'><p class='caption'>{html.escape(caption)}</p></div>")


def _log_x(ax) -> None:
    """Log x axis, unless nothing is plotted yet (a partial matrix): an
    empty axis cannot be log-scaled."""
    # axhline's x data is [0, 1] (axes units): not a positive data line.
    if any(len(line.get_xdata()) and min(line.get_xdata()) > 0 for line in ax.get_lines()):
        ax.set_xscale("log")


def _fmt(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


# --------------------------------------------------------------------------
# The TCP spoofing study: spoofing with cross traffic

FLOWS = "workload.traffic.groups.0.concurrent"
SAT_NODE = "sat"        # the satellite emulator of topologies/spoofing.yaml


@dataclass
class SpoofPoint:
    sender_bps: list[float]
    receiver_bps: list[float]
    drops: list[float]
    path_drop_rate: list[float]
    buffer_peak: list[float] = field(default_factory=list)    # bytes the spoofer held at most


def _main_drops(r: CellRow, sender: str) -> float | None:
    """Data packets of the main flow lost on the path: its sender's
    retransmissions (seen at the sender) plus, when spoofed, the spoofer's
    retransmissions on the satellite leg (seen on the emulator port facing
    the spoofer). With SACK, a retransmission stands for one loss."""
    s = _summary(r, sender)
    if not s:
        return None
    drops = float(s.get("rexmt_pkts") or 0)
    if r.params.get("pep", "none") != "none":
        an = r.metrics.get("analysis") or {}
        # The satellite emulator's port facing the spoofer: of its two
        # captures, the one where the receiver's ACKs take the satellite RTT.
        for v, c in (r.metrics.get("captures") or {}).items():
            if not isinstance(c, dict) or c.get("node") != SAT_NODE:
                continue
            summ = ((an.get(v) or {}).get("main") or {}).get("summary") or {}
            if (summ.get("rtt_avg_ms") or 0) > 200:
                drops += float(summ.get("rexmt_pkts") or 0)
                break
    return drops


def _path_drop_rate(r: CellRow) -> float | None:
    """Share of packets the bottleneck router port dropped (all flows)."""
    ports = ((r.metrics.get("counters") or {}).get("ports")) or {}
    best = None
    for p in ports.values():
        d, s = p.get("dropped") or 0, p.get("sent_packets") or 0
        if d + s and (best is None or d > best[0]):
            best = (d, d / (d + s))
    return best[1] if best else None


def _spoofer_buffer(out: str, r: CellRow) -> list[tuple[float, float]]:
    """(seconds since its first sample, bytes) the spoofer held, all its
    connections together: pepd's buffer.jsonl (trace_interval) samples each
    connection on its own clock, so each connection counts with its latest
    sample at every step (and nothing once its samples end)."""
    import bisect
    import glob
    import json
    step = 0.1
    by_id: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    for path in glob.glob(os.path.join(out, "cells", r.hash, "pep", "*", "buffer.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                    by_id[(path, int(rec["id"]))].append((float(rec["t"]), float(rec.get("occupancy_bytes") or 0)))
                except (ValueError, KeyError, TypeError):
                    continue
    if not by_id:
        return []
    for samples in by_id.values():
        samples.sort()
    t0 = min(v[0][0] for v in by_id.values())
    t1 = max(v[-1][0] for v in by_id.values())
    series = []
    for k in range(int((t1 - t0) / step) + 1):
        t = t0 + k * step
        held = 0.0
        for samples in by_id.values():
            i = bisect.bisect_right(samples, (t + 1e-9, float("inf"))) - 1
            if i >= 0 and t - samples[-1][0] <= step:
                held += samples[i][1]
        series.append((round(k * step, 3), held))
    return series


def _spoof_points(rows: list[CellRow], out: str | None = None) -> dict[tuple[int, int, bool], SpoofPoint]:
    pts: dict[tuple[int, int, bool], SpoofPoint] = {}
    for r in rows:
        if r.status not in MEASURED:
            continue
        sender, receiver = _ends(r)
        # One clock for both views, as the study's simulator had: from h1's
        # first SYN (the transfer's start, whoever answers it) to the last ACK
        # on h5's port (sender) and on h1's (receiver). The sender's own
        # capture alone would start at the spoofer's onward SYN, after the
        # end-to-end setup had already crossed the satellite.
        e2e = r.metrics.get("end_to_end_throughput") or {}
        snd = e2e.get("sender_bps") or _summary(r, sender).get("sender_view_bps")
        rcv = e2e.get("receiver_bps") or _summary(r, receiver).get("receiver_view_bps")
        key = (int(r.params["size"]), int(r.params.get(FLOWS) or 0), r.params.get("pep", "none") != "none")
        p = pts.setdefault(key, SpoofPoint([], [], [], []))
        if snd:
            p.sender_bps.append(snd)
        if rcv:
            p.receiver_bps.append(rcv)
        d = _main_drops(r, sender)
        if d is not None:
            p.drops.append(d)
        dr = _path_drop_rate(r)
        if dr is not None:
            p.path_drop_rate.append(dr)
        if out is not None and key[2]:
            held = _spoofer_buffer(out, r)
            if held:
                p.buffer_peak.append(max(b for _, b in held))
    return pts


def _pct(spoofed: float | None, regular: float | None) -> float | None:
    if spoofed is None or not regular:
        return None
    return (spoofed - regular) / regular * 100


def spoofing_tables(rows: list[CellRow], out: str | None = None) -> dict:
    """The numbers the spoofing study's figures plot, for the page and for tests:
    {(size, flows): {view: {"regular", "spoofed", "ci_regular", "ci_spoofed", "pct"}}, ...};
    with out (the matrix directory), the spoofer's peak buffer ("buffer_peak": mean, ci, n)."""
    pts = _spoof_points(rows, out)
    table: dict = {}
    for size, flows in sorted({(k[0], k[1]) for k in pts}):
        reg, spo = pts.get((size, flows, False)), pts.get((size, flows, True))
        entry: dict = {}
        for view in ("sender_bps", "receiver_bps", "drops"):
            rm, rc = _mean_ci(getattr(reg, view)) if reg else (None, None)
            sm, sc = _mean_ci(getattr(spo, view)) if spo else (None, None)
            entry[view] = {"regular": rm, "spoofed": sm, "ci_regular": rc, "ci_spoofed": sc,
                           "n_regular": len(getattr(reg, view)) if reg else 0,
                           "n_spoofed": len(getattr(spo, view)) if spo else 0,
                           "pct": _pct(sm, rm) if view != "drops" else None}
        rates = (reg.path_drop_rate if reg else []) + (spo.path_drop_rate if spo else [])
        entry["path_drop_rate"] = statistics.mean(rates) if rates else None
        peaks = spo.buffer_peak if spo else []
        entry["buffer_peak"] = (*_mean_ci(peaks), len(peaks))
        table[(size, flows)] = entry
    return table


def spoofing_page(out: str, rows: list[CellRow]) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tab = spoofing_tables(rows, out)
    if not tab:
        return ["<h2>TCP spoofing study (Ishac and Allman)</h2><p>No measured cells yet.</p>"]
    sizes = sorted({k[0] for k in tab})
    flows = sorted({k[1] for k in tab})
    pkts = [max(1, round(s / PACKET)) for s in sizes]
    parts = ["<h2>TCP spoofing study (Ishac and Allman): spoofing with cross traffic, the study's figures from our runs</h2>",
             _spoof_config(out, rows)]

    # Figure 5: throughput vs size, four curves, one panel per competing-flow count.
    fig, axes = plt.subplots(1, len(flows), figsize=(5 * len(flows), 4), squeeze=False)
    for ax, n in zip(axes[0], flows):
        for view, style in (("sender_bps", "-"), ("receiver_bps", "--")):
            for who, colour in (("regular", "#1f77b4"), ("spoofed", "#d62728")):
                ys = [tab.get((s, n), {}).get(view, {}).get(who) for s in sizes]
                cis = [tab.get((s, n), {}).get(view, {}).get(f"ci_{who}") or 0 for s in sizes]
                xs = [p for p, y in zip(pkts, ys) if y is not None]
                ax.errorbar(xs, [y / 1e3 for y in ys if y is not None],
                            yerr=[c / 1e3 for c, y in zip(cis, ys) if y is not None], fmt=style, color=colour,
                            marker="o", ms=3, capsize=2,
                            label=f"{'Spoofing' if who == 'spoofed' else 'Regular'}-"
                                  f"{'Sender' if view == 'sender_bps' else 'Receiver'}")
        _log_x(ax)
        ax.set_title(f"{n} competing flow(s)")
        ax.set_xlabel("transfer size (packets)")
        ax.set_ylabel("throughput (kbit/s)")
        ax.grid(alpha=.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    parts.append(_figure("spoofing_throughput_vs_size", out, fig,
                         "Throughput vs transfer size (study Figure 5): mean and 95% interval over repetitions; "
                         "from h1's first SYN, sender view until the last ACK reaches h5, receiver view until h1 "
                         "sends its last ACK (one clock: the captures on h1's and h5's ports)."))

    # Figure 6: percent difference vs size (sender and receiver), per flow count.
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, n in enumerate(flows):
        for view, style in (("sender_bps", "-"), ("receiver_bps", "--")):
            ys = [tab.get((s, n), {}).get(view, {}).get("pct") for s in sizes]
            xs = [p for p, y in zip(pkts, ys) if y is not None]
            ax.plot(xs, [y for y in ys if y is not None], style, marker="o", ms=3, color=f"C{i}",
                    label=f"{'Sender' if view == 'sender_bps' else 'Receiver'} side, {n} flow(s)")
    ax.axhline(0, color="#888", lw=.8)
    _log_x(ax)
    ax.set_xlabel("transfer size (packets)")
    ax.set_ylabel("percent difference, spoofed vs end to end (%)")
    ax.grid(alpha=.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    parts.append(_figure("spoofing_percent_difference", out, fig,
                         "Percent difference of throughput, (spoofed - end to end) / end to end (study Figure 6); "
                         "positive: the spoofer helped."))

    # Figure 8: dropped data packets of the main flow vs size.
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, n in enumerate(flows):
        for who, style in (("regular", "--"), ("spoofed", "-")):
            ys = [tab.get((s, n), {}).get("drops", {}).get(who) for s in sizes]
            xs = [p for p, y in zip(pkts, ys) if y is not None]
            ax.plot(xs, [y for y in ys if y is not None], style, marker="o", ms=3, color=f"C{i}",
                    label=f"{'Spoofing' if who == 'spoofed' else 'Regular'}, {n} flow(s)")
    _log_x(ax)
    ax.set_xlabel("transfer size (packets)")
    ax.set_ylabel("dropped data packets (main flow)")
    ax.grid(alpha=.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    parts.append(_figure("spoofing_drops_vs_size", out, fig,
                         "Dropped data packets of the main flow vs size (study Figure 8): the sender's "
                         "retransmissions, plus the spoofer's on the satellite leg when spoofed."))

    # Figures 9/10: gain vs competing flows, per size.
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, view, title in ((axes[0], "sender_bps", "sender side (Figure 10)"),
                            (axes[1], "receiver_bps", "receiver side (Figure 9)")):
        for i, s in enumerate(sizes):
            ys = [tab.get((s, n), {}).get(view, {}).get("pct") for n in flows]
            xs = [n for n, y in zip(flows, ys) if y is not None]
            ax.plot(xs, [y for y in ys if y is not None], marker="o", ms=3, color=f"C{i}",
                    label=f"{max(1, round(s / PACKET))} packets")
        ax.axhline(0, color="#888", lw=.8)
        ax.set_xlabel("competing flows")
        ax.set_ylabel("percent difference (%)")
        ax.set_title(title)
        ax.grid(alpha=.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    parts.append(_figure("spoofing_gain_vs_flows", out, fig,
                         "Gain of spoofing vs the number of competing flows, per transfer size "
                         "(study Figures 9 and 10)."))

    held = _buffer_figure(out, rows, flows, plt)
    if held:
        parts.append(held)

    from satbed.report.charts import _table
    body = []
    for (s, n), e in sorted(tab.items()):
        sv, rv, dv = e["sender_bps"], e["receiver_bps"], e["drops"]
        body.append([str(max(1, round(s / PACKET))), str(n),
                     _fmt(e["path_drop_rate"] * 100 if e["path_drop_rate"] is not None else None, 1),
                     _kb(sv["regular"], sv["ci_regular"]), _kb(sv["spoofed"], sv["ci_spoofed"]), _fmt(sv["pct"], 0),
                     _kb(rv["regular"], rv["ci_regular"]), _kb(rv["spoofed"], rv["ci_spoofed"]), _fmt(rv["pct"], 0),
                     _fmt(dv["regular"]), _fmt(dv["spoofed"]), _kb8(*e["buffer_peak"][:2]),
                     f"{sv['n_regular']}/{sv['n_spoofed']}"])
    parts.append("<h3>The numbers (means; ± 95% interval)</h3>" + _table(
        ["packets", "flows", "r1 drop %", "sender regular kbit/s", "sender spoofed kbit/s", "sender gain %",
         "receiver regular kbit/s", "receiver spoofed kbit/s", "receiver gain %", "drops regular",
         "drops spoofed", "spoofer peak KB", "runs e2e/spoofed"], body))
    return parts


def _kb8(mean: float | None, ci: float | None) -> str:
    """Bytes as KB (the spoofer's buffer)."""
    if mean is None:
        return "–"
    return f"{mean / 1e3:.1f}" + (f" ± {ci / 1e3:.1f}" if ci else "")


def _buffer_figure(out: str, rows: list[CellRow], flows: list[int], plt) -> str:
    """Data accumulating at the spoofer over time (the study's cache
    occupancy): pepd's buffered bytes, sampled, for the largest transfer of
    each competing-flow count (its first repetition)."""
    spoofed = [r for r in rows if r.status in MEASURED and r.params.get("pep", "none") != "none"]
    if not spoofed:
        return ""
    largest = max(int(r.params["size"]) for r in spoofed)
    fig, ax = plt.subplots(figsize=(8, 4))
    drawn = 0
    for i, n in enumerate(flows):
        pick = sorted((r for r in spoofed if int(r.params["size"]) == largest
                       and int(r.params.get(FLOWS) or 0) == n), key=lambda r: r.repetition)
        series = _spoofer_buffer(out, pick[0]) if pick else []
        if series:
            ax.plot([t for t, _ in series], [b / 1e3 for _, b in series], color=f"C{i}", lw=1,
                    label=f"{n} competing flow(s)")
            drawn += 1
    if not drawn:
        plt.close(fig)
        return ""
    ax.set_xlabel("time since the spoofer's first sample of the transfer (s)")
    ax.set_ylabel("bytes held by the spoofer (KB)")
    ax.grid(alpha=.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _figure("spoofing_spoofer_buffer", out, fig,
                   f"Data accumulating at the spoofer over time: pepd's buffered bytes (LAN receive queue, "
                   f"relay pipe and WAN send queue of its connections; trace_interval samples), "
                   f"{max(1, round(largest / PACKET))}-packet transfers, first repetition. The table's "
                   f"'spoofer peak KB' is the most it held per transfer.")


def _kb(mean: float | None, ci: float | None) -> str:
    if mean is None:
        return "–"
    return f"{mean / 1e3:.1f}" + (f" ± {ci / 1e3:.1f}" if ci else "")


def _kernels(out: str, rows: list[CellRow]) -> str:
    import json
    found = set()
    for r in rows[:20]:
        try:
            with open(os.path.join(out, "cells", r.hash, "environment.json")) as f:
                env = json.load(f)
        except (OSError, ValueError):
            continue
        k = env.get("kernel")
        found.add(k if isinstance(k, str) else json.dumps(k)[:80])
    return ", ".join(sorted(found)) or "see the cells' environment.json"


def _spoof_config(out: str, rows: list[CellRow]) -> str:
    r = rows[0]
    flows = sorted({int(x.params.get(FLOWS) or 0) for x in rows})
    sizes = sorted({max(1, round(int(x.params["size"]) / PACKET)) for x in rows})
    reps = max(x.repetition for x in rows) + 1
    return (
        "<p><b>Configuration.</b> h5 &rarr; h1 FTP download (vsftpd, NcFTP; SHA-256 checked) across "
        "r1 &mdash; Internet link &mdash; r2 &mdash; spoofer h2 &mdash; T1 satellite link (250 ms each way) "
        "&mdash; h1; competing FTP-like flows h3 &rarr; h4 over the Internet link (constant count, "
        "Poisson starts, replaced as they end), the main flow 5 s after them; Reno with SACK and delayed "
        "ACKs on h1 and h5; 1500-byte packets. Spoofer: pepd with <code>handshake=end-to-end</code> "
        "(setup end to end, data and teardown spoofed). Internet link and queue: "
        f"<code>{html.escape(str((r.config.get('links') or {}).get('inet', '')))[:300]}</code>. "
        f"Kernel: {html.escape(_kernels(out, rows))}.</p>"
        "<p><b>Where this departs from the study.</b> Real Linux stacks, not ns-2 2.1b8; the study's "
        "Internet link rate, delay and queue sizes were lost from its text (ours: 10 Mbit/s, 40 ms each "
        "way, r1's 40-packet drop-tail queue); our competing flows are Linux TCP with short RTTs, more "
        f"aggressive than the study's, so {min(flows)}..{max(flows)} flows here span roughly the loss the "
        "study reached with 0..200 (the table gives r1's drop rate per point); the spoofer's cache is its "
        "socket buffers, not infinite; FTP's control connection precedes the measured data connection; "
        f"{reps} repetitions per point, not 30, and {len(sizes)} sizes ({min(sizes)}..{max(sizes)} packets), "
        "not the study's fine grid. Drops are the main flow's retransmissions (SACK), not simulator drop "
        "events. A sweep's cells of one flow count and spoofer setting may share one testbed (a batch): "
        "the competing traffic then runs on between transfers, and each transfer after the first meets "
        "it in its steady state rather than 5 s after its start.</p>")


# --------------------------------------------------------------------------
# The split-connection gateway study

VARIANTS_001 = ("terrestrial", "satellite", "large-windows", "gateways")


def _emulator_series(out: str, r: CellRow) -> list[tuple[float, float]]:
    """(t, bit/s) on the satellite link in the data's direction, per sample."""
    # The server is on side a of the satellite emulator (topologies/split-gateways.yaml);
    # a download enters port a.
    direction = "a_to_b" if r.config.get("direction", "download") == "download" else "b_to_a"
    series, last_t = [], 0.0
    for s in _emulator_samples(os.path.join(out, "cells", r.hash), direction):
        if s.t_s > last_t:
            series.append((s.t_s, s.bytes_out * 8 / (s.t_s - last_t)))
        last_t = s.t_s
    return series


def _busy_s(r: CellRow, server: str) -> float | None:
    main = _vantage_of(r, server).get("main") or {}
    d = main.get(main.get("data_direction") or "", {}) if main else {}
    v = d.get("data_xmit_time_s")
    return float(v) if v else None


def split_tables(out: str, rows: list[CellRow]) -> dict:
    """{variant: {metric: (mean, ci, n)}} for the split-gateway study's page (and tests)."""
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.status not in MEASURED:
            continue
        v = r.params.get("variant") or r.params.get("pep", "")
        sender, receiver = _ends(r)
        # Throughput on the satellite link: what it carried from its first
        # to its last busy sample (the FTP control exchange before and after
        # is a few hundred bytes).
        series = _emulator_series(out, r)
        active = [(t, b) for t, b in series if b > 0]
        if len(active) > 1:
            prev = {t: series[i - 1][0] if i else 0.0 for i, (t, _) in enumerate(series)}
            carried = sum(b * (t - prev[t]) for t, b in active)
            acc[v]["sat_kbps"].append(carried / (active[-1][0] - prev[active[0][0]]) / 1e3)
        rtt = _summary(r, sender).get("rtt_avg_ms")
        if rtt is not None:
            acc[v]["server_rtt_ms"].append(float(rtt))
        if r.metrics.get("seconds"):
            acc[v]["download_s"].append(float(r.metrics["seconds"]))
        busy = _busy_s(r, sender)
        if busy is not None:
            acc[v]["server_busy_s"].append(busy)
        if r.goodput_bps:
            acc[v]["goodput_kbps"].append(r.goodput_bps / 1e3)
    return {v: {k: (*_mean_ci(vals), len(vals)) for k, vals in m.items()} for v, m in acc.items()}


def split_gateways_page(out: str, rows: list[CellRow]) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tab = split_tables(out, rows)
    if not tab:
        return ["<h2>Split-connection gateway study</h2><p>No measured cells yet.</p>"]
    order = [v for v in VARIANTS_001 if v in tab] + sorted(set(tab) - set(VARIANTS_001))
    parts = ["<h2>Split-connection gateway study: the study's figures from our runs</h2>", _split_config(out, rows)]
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
    parts.append(_figure("split_gateways_variants", out, fig,
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
    parts.append(_figure("split_gateways_throughput_over_time", out, fig,
                         "Throughput on the satellite link over time, server to client (the emulator's "
                         "100 ms counters, 1 s means; repetition 0 of each set-up)."))

    from satbed.report.charts import _table
    body = []
    for v in order:
        m = tab[v]
        cell = lambda k, d=1: _fmt(m.get(k, (None,))[0], d) + (
            f" ± {m[k][1]:.{d}f}" if k in m and m[k][1] else "")
        body.append([v, cell("sat_kbps", 0), cell("goodput_kbps", 0), cell("server_rtt_ms"), cell("download_s"),
                     cell("server_busy_s"), str(max((x[2] for x in m.values()), default=0))])
    parts.append("<h3>The numbers</h3>" + _table(
        ["set-up", "satellite link kbit/s", "goodput kbit/s", "server RTT ms", "download s", "server busy s",
         "runs"], body))
    return parts


def _split_config(out: str, rows: list[CellRow]) -> str:
    size = rows[0].params.get("size", 0)
    return (
        f"<p>Kernel: {html.escape(_kernels(out, rows))}.</p>"
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


# The ACTS multi-flow study (scenarios/multiflow-ber.yaml).

T1_BPS = 1_536_000      # the study's T1 payload rate, as the routers shape it
INTERVAL_S = 5.0        # the study's 5-minute intervals, compressed 60 times
WARMUP_S = 10.0         # the load builds up from no flows: intervals before are left out


@dataclass
class EmuSample:
    t_s: float
    bytes_in: float     # delta since the previous sample of this direction
    bytes_out: float
    frames_out: float
    drop_ber: float
    drop_queue: float
    ber: float


def _emulator_samples(cell: str, direction: str) -> list[EmuSample]:
    """One direction of an emulator's 100 ms time series, counters turned into
    per-sample deltas (the file's counters are cumulative since start)."""
    path = os.path.join(cell, "emulator", "emulator_timeseries.csv")
    if not os.path.exists(path):
        found = sorted(p for p in _glob(os.path.join(cell, "emulator", "*", "emulator_timeseries.csv")))
        if not found:
            return []
        path = found[0]
    out: list[EmuSample] = []
    prev: dict[str, float] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("direction") != direction:
                continue
            keys = ("bytes_in", "bytes_out", "frames_out", "drop_ber", "drop_queue")
            now = {k: float(row.get(k) or 0) for k in keys}
            out.append(EmuSample(float(row["t_s"]), *(now[k] - prev.get(k, 0.0) for k in keys),
                                 float(row.get("ber") or 0)))
            prev = now
    return out


def _glob(pattern: str) -> list[str]:
    import glob
    return glob.glob(pattern)


def _decade(ber: float) -> str:
    """The study's BER classes (1e-9 is its error-free case); "clean" is BER 0,
    the recovery after the pass."""
    import math
    if ber <= 0:
        return "clean"
    return f"1e{math.floor(math.log10(ber) + 1e-9)}"


DECADES = ["1e-9", "1e-8", "1e-7", "1e-6", "1e-5", "1e-4", "1e-3", "clean"]


FULL_FRAME = 1514       # bytes on the wire of a full-size segment


def _transmitted(b: list[EmuSample]) -> float:
    """Bytes the link sent: what entered it less what its own queue dropped
    (a PEP's WAN leg can offer more than the T1; those frames never went
    out). The series counts queue drops in frames; a sender that fills a
    queue fills it with full-size segments, so each counts FULL_FRAME bytes.
    Corrupted frames were sent, as the study's router counters saw them."""
    sent = sum(s.bytes_in for s in b) - sum(s.drop_queue for s in b) * FULL_FRAME
    return max(sent, sum(s.bytes_out for s in b))


def _intervals(samples: list[EmuSample]) -> list[tuple[str, float, float]]:
    """(BER class, link utilisation, delivered share) per interval: bytes the
    link transmitted and delivered over the T1 rate. An interval's class is
    its highest BER (a step inside it counts), its length the time between
    its last sample and the previous interval's."""
    buckets: dict[int, list[EmuSample]] = defaultdict(list)
    for s in samples:
        buckets[int(s.t_s // INTERVAL_S)].append(s)
    out, last_t = [], 0.0           # satemu's counters start at zero with its clock
    for k in sorted(buckets)[:-1]:  # the last interval is cut short by the run's end
        b = buckets[k]
        span = b[-1].t_s - last_t
        last_t = b[-1].t_s
        if span <= 0 or k * INTERVAL_S < WARMUP_S:
            continue
        out.append((_decade(max(s.ber for s in b)), _transmitted(b) * 8 / span / T1_BPS,
                    sum(s.bytes_out for s in b) * 8 / span / T1_BPS))
    return out


def _emulator_start_unix(cell: str) -> float | None:
    """satemu's start as Unix time (its final report), to place flow records
    and router samples on its time series."""
    import datetime as _dt
    import json
    for path in [os.path.join(cell, "emulator", "emulator.json"),
                 *_glob(os.path.join(cell, "emulator", "*", "emulator.json"))]:
        try:
            with open(path, encoding="utf-8") as f:
                started = json.load(f).get("started_at")
            return _dt.datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp()
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return None


def _ber_at(samples: list[EmuSample], t_s: float) -> float:
    import bisect
    times = [s.t_s for s in samples]
    i = bisect.bisect_right(times, t_s) - 1
    return samples[max(0, min(i, len(samples) - 1))].ber if samples else 0.0


def _uplink_flows(cell: str, samples: list[EmuSample], t0: float) -> list[tuple[str, float]]:
    """(BER class at the flow's middle, goodput bit/s) of every completed flow
    whose data crossed the noisy uplink (OU's uploads), from the sender's records."""
    import json
    out = []
    for path in _glob(os.path.join(cell, "traffic", "client-*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("record") == "summary" or not rec.get("completed") or not rec.get("sender"):
                    continue
                mid = (float(rec["start"]) + float(rec["end"])) / 2 - t0
                out.append((_decade(_ber_at(samples, mid)), float(rec.get("goodput_bps") or 0)))
    return out


def _generator_summary(cell: str) -> dict:
    """Flows, peak concurrent flows and the generator's CPU share (both ends)."""
    import json
    flows, peak, cpu = 0, 0, 0.0
    for path in _glob(os.path.join(cell, "traffic", "*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if '"summary"' not in line:
                    continue
                try:
                    s = json.loads(line)
                except ValueError:
                    continue
                if s.get("side") == "client":
                    flows += int(s.get("flows") or 0)
                    peak = max(peak, int(s.get("max_active") or 0))
                cpu += float(s.get("cpu_share") or 0)
    return {"flows": flows, "peak_active": peak, "cpu_share": cpu}


def _emulator_timing(cell: str) -> dict:
    """The emulator's worst departure lateness (either direction) and the
    host's CPU steal during the measurement, from result.json."""
    import json
    try:
        with open(os.path.join(cell, "result.json"), encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, ValueError):
        return {}
    dirs = (((result.get("emulator") or {}).get("stats") or {}).get("totals") or {}).get("directions") or {}
    out: dict = {}
    for key in ("tx_late_p99_us", "tx_late_max_us"):
        vals = [float(d[key]) for d in dirs.values() if isinstance(d, dict) and key in d]
        if vals:
            out[key] = max(vals)
    steal = (result.get("host_cpu") or {}).get("steal_fraction")
    if steal is not None:
        out["steal_fraction"] = float(steal)
    return out


def _router_drops(cell: str, node: str, port: str, t0: float) -> list[tuple[float, float]]:
    """(satemu time, drops in that sample) at a router port's queue."""
    import json
    out, last = [], None
    path = os.path.join(cell, "counters", "interfaces.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("node") != node or row.get("port") != port:
                continue
            d = float(row.get("dropped") or 0)
            out.append((float(row["unix"]) - t0, d - last if last is not None else 0.0))
            last = d
    return out


def multiflow_tables(out: str, rows: list[CellRow]) -> dict:
    """Per configuration (queue, load, PEP): utilisation intervals and flow
    goodputs by BER class, the generator's figures."""
    tab: dict[tuple, dict] = {}
    for r in rows:
        if r.status not in MEASURED:
            continue
        cell = os.path.join(out, "cells", r.hash)
        samples = _emulator_samples(cell, "a_to_b")
        t0 = _emulator_start_unix(cell)
        if not samples or t0 is None:
            continue
        key = (_param(r, "queue"), _param(r, "rate"), str(r.params.get("pep", "none")))
        entry = tab.setdefault(key, {"util": defaultdict(list), "delivered": defaultdict(list),
                                     "flows": defaultdict(list), "gen": [], "cells": []})
        for dec, offered, delivered in _intervals(samples):
            entry["util"][dec].append(offered)
            entry["delivered"][dec].append(delivered)
        for dec, bps in _uplink_flows(cell, samples, t0):
            entry["flows"][dec].append(bps)
        entry["gen"].append(_generator_summary(cell))
        entry.setdefault("timing", []).append(_emulator_timing(cell))
        entry["cells"].append((cell, t0, samples))
    return tab


def _param(r: CellRow, short: str):
    """An axis value by the end of its dotted name (queue, rate)."""
    for k, v in r.params.items():
        if "." in k and k.split(".")[-1] == short:
            return v
    return None


def _cdf(ax, values: list[float], **kw) -> None:
    xs = sorted(values)
    ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", **kw)


def _grid(plt, n: int):
    """Panels four to a row."""
    cols = min(4, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes


def multiflow_page(out: str, rows: list[CellRow]) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from satbed.report.charts import _table

    tab = multiflow_tables(out, rows)
    if not tab:
        return ["<h2>ACTS multi-flow study: TCP under a drifting BER</h2><p>No measured cells yet.</p>"]
    keys = sorted(tab, key=lambda k: (str(k[0]), str(k[1]), k[2] != "none", k[2]))
    parts = ["<h2>ACTS multi-flow study: hundreds of TCP flows under a drifting BER, the study's figures from our runs</h2>",
             _multiflow_config(out, rows)]

    # Figures 3/4: CDF of per-interval link utilisation, one curve per BER class.
    fig, axes = _grid(plt, len(keys))
    for ax, k in zip(axes.flat, keys):
        for i, dec in enumerate(DECADES):
            vals = tab[k]["util"].get(dec)
            if vals:
                _cdf(ax, [100 * v for v in vals], color=f"C{i}", label=f"{dec} ({len(vals)})")
        ax.axhline(.5, color="#888", lw=.6)
        ax.set_title(f"queue {k[0]}, load {k[1]}/s, {k[2]}", fontsize=9)
        ax.set_xlabel("link utilisation per 5 s (%)")
        ax.set_ylabel("cumulative fraction")
        ax.set_xlim(0, 105)
        ax.grid(alpha=.3)
        ax.legend(fontsize=6, title="BER (intervals)", title_fontsize=6)
    fig.tight_layout()
    parts.append(_figure("acts_utilisation_cdf", out, fig,
                         "Link utilisation per interval by BER (study Figures 3 and 4): the OU -> GRC direction, "
                         "bytes the satellite link sent (delivered or corrupted) per 5 s over the T1 rate; "
                         "the hairline is the median."))

    # Figures 6/7: per-connection throughput CDFs by BER class.
    fig, axes = _grid(plt, len(keys))
    for ax, k in zip(axes.flat, keys):
        for i, dec in enumerate(DECADES):
            vals = tab[k]["flows"].get(dec)
            if vals:
                _cdf(ax, [v / 1e3 for v in vals], color=f"C{i}", label=f"{dec} ({len(vals)})")
        ax.set_xscale("log")
        ax.set_title(f"queue {k[0]}, load {k[1]}/s, {k[2]}", fontsize=9)
        ax.set_xlabel("connection throughput (kbit/s)")
        ax.set_ylabel("cumulative fraction")
        ax.grid(alpha=.3)
        ax.legend(fontsize=6, title="BER (flows)", title_fontsize=6)
    fig.tight_layout()
    parts.append(_figure("acts_flow_throughput_cdf", out, fig,
                         "Per-connection throughput by the BER at the connection's midpoint (study Figures 6 "
                         "and 7): completed uploads from OU, goodput from the sender's own records."))

    # Figures 2/5: bytes, BER and router drops over time, one run per configuration.
    fig, axes = plt.subplots(len(keys), 1, figsize=(10, 2.6 * len(keys)), squeeze=False, sharex=True)
    for ax, k in zip(axes[:, 0], keys):
        cell, t0, samples = tab[k]["cells"][0]
        per_s: dict[int, list[EmuSample]] = defaultdict(list)
        for s in samples:
            per_s[int(s.t_s)].append(s)
        xs = sorted(per_s)
        ax.plot(xs, [_transmitted(per_s[x]) * 8 / 1e3 for x in xs], lw=1, color="C0",
                label="kbit/s sent on the link")
        ax.set_ylabel("kbit/s")
        drops = ax.twinx()
        drops.plot(xs, [sum(s.drop_ber for s in per_s[x]) for x in xs], lw=.8, color="C3",
                   label="corruption drops/s")
        rq: dict[int, float] = defaultdict(float)
        for t, d in _router_drops(cell, "rOU", "sat", t0):
            rq[int(t)] += d
        drops.plot(xs, [rq.get(x, 0.0) for x in xs], lw=.8, color="C2", label="router queue drops/s")
        drops.set_ylabel("drops/s")
        ber = ax.twinx()
        ber.spines["right"].set_position(("axes", 1.08))
        ber.semilogy([s.t_s for s in samples if s.ber > 0], [s.ber for s in samples if s.ber > 0],
                     color="#888", lw=.8, ls=":")
        ber.set_ylabel("BER", color="#888")
        ax.set_title(f"queue {k[0]}, load {k[1]}/s, {k[2]}", fontsize=9)
        lines = ax.get_legend_handles_labels()[0] + drops.get_legend_handles_labels()[0]
        ax.legend(lines, [ln.get_label() for ln in lines], fontsize=6, loc="upper left")
    axes[-1, 0].set_xlabel("time since the emulator started (s)")
    fig.tight_layout()
    parts.append(_figure("acts_over_time", out, fig,
                         "Transmitted bytes, BER and drops over time (study Figures 2 and 5): OU -> GRC, "
                         "corruption drops on the link (emulator) and congestion drops at OU's router queue."))

    def median(vals: list[float] | None) -> float | None:
        return statistics.median(vals) if vals else None

    body = []
    for k in keys:
        e = tab[k]
        clean = median(e["util"].get("1e-9"))
        worst = next((d for d in reversed(DECADES[:-1]) if e["util"].get(d)), None)
        row = [str(k[0]), str(k[1]), k[2]]
        row += [_fmt(100 * m, 0) if (m := median(e["util"].get(d))) is not None else "" for d in DECADES]
        at5 = median(e["util"].get("1e-5"))
        row.append(_fmt(100 * (clean - at5) / clean, 0) if clean and at5 is not None else "")
        row.append(_fmt(100 * (clean - median(e["util"][worst])) / clean, 0) + f" ({worst})"
                   if clean and worst else "")
        fl = [median(e["flows"].get(d)) for d in ("1e-9", "1e-5", "1e-4")]
        row += [_fmt(v / 1e3, 1) if v is not None else "" for v in fl]
        gen = e["gen"]
        row += [str(max(g["peak_active"] for g in gen)), str(sum(g["flows"] for g in gen)),
                _fmt(max(g["cpu_share"] for g in gen), 2)]
        timing = e.get("timing") or []
        for key, scale, nd in (("tx_late_p99_us", 1e-3, 1), ("tx_late_max_us", 1e-3, 0), ("steal_fraction", 100, 0)):
            vals = [t[key] for t in timing if key in t]
            row.append(_fmt(max(vals) * scale, nd) if vals else "")
        body.append(row)
    parts.append("<h3>The numbers</h3><p>Median link utilisation (%) per BER class (clean: the recovery "
                 "after the pass), its degradation (%) from the error-free class 1e-9 to 1e-5 and to the "
                 "noisiest class, median connection throughput "
                 "(kbit/s), peak concurrent flows, flows started, the generator's CPU (cores, both "
                 "ends), and whether the emulator kept time: its departure lateness p99 and maximum "
                 "(ms, worst direction and cell; a T1 frame lasts 7.8 ms) beside the host's CPU steal "
                 "during the run (%: time a virtual machine's hypervisor gave to others, which delays "
                 "every wake-up).</p>" + _table(
                     ["queue", "load /s", "PEP", *DECADES, "degr. 1e-5", "degr. worst",
                      "flow 1e-9", "flow 1e-5", "flow 1e-4", "peak flows", "flows", "gen CPU",
                      "late p99 ms", "late max ms", "steal %"], body))
    return parts


def _multiflow_config(out: str, rows: list[CellRow]) -> str:
    return (
        f"<p>Kernel: {html.escape(_kernels(out, rows))}.</p>"
        "<p><b>Configuration.</b> OU host &mdash; router (HTB at the T1's 1.536 Mbit/s, drop-tail queue of "
        "the axis' length) &mdash; satellite link (560 ms RTT; the OU &rarr; GRC direction's BER follows "
        "scenarios/multiflow-ber.csv: clean, then 1e-9 to 1e-3 a fifth of a decade every 5 s, clean again) "
        "&mdash; router &mdash; GRC host; the satellite link also carries at most a T1 (a PEP's own sending "
        "leaves behind the router's shaper); PEP none or pepd at both ends of the satellite link. trafficgen "
        "Poisson arrivals at the load knob's rate, half uploads from OU, SURGE web-object sizes. Time is "
        "compressed 60 times: the study's 3-hour runs and 5-minute intervals are 220 s and 5 s here; the "
        "first 10 s, while the load builds up, are left out.</p>"
        "<p><b>Where this departs from the study.</b> Linux TCP (CUBIC, SACK) instead of NetBSD 1.3; "
        "Linux HTB and pfifo instead of Cisco 2500 queues; a smooth BER ramp instead of the orbit's "
        "(no FEC episodes); the SURGE size model instead of TrafGen's unpublished profile; no tcpslice "
        "(every interval is kept); TCP's RTT is not compressed with the time, so an interval holds 9 RTTs, "
        "not 540.</p>")
