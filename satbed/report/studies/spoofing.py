"""The TCP spoofing study (scenarios/spoofing.yaml): throughput vs transfer
size (regular / spoofed x sender / receiver view), percent difference vs
size, dropped data packets of the main flow vs size, gain vs competing
flows, and the data the spoofer held over time."""

from __future__ import annotations

import bisect
import glob
import html
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from analysis.figures import pyplot
from satbed.core.files import jsonl_records
from satbed.results.store import MEASURED, CellRow

from ..common import html_table
from .base import (Study, ends, figure, fmt, from_scenario, kernels, log_x, mean_ci_or_none, stored_per_cell,
                   summary_at)
from .headlines import Headline
from .headlines import section as headline_section

NAME = "TCP spoofing"
PACKET = 1448           # payload bytes per full segment (1500-byte packets with timestamps)

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
    s = summary_at(r, sender)
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
    step = 0.1
    by_id: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    for path in glob.glob(os.path.join(out, "cells", r.hash, "pep", "*", "buffer.jsonl")):
        for rec in jsonl_records(path):
            try:
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
        sender, receiver = ends(r)
        # One clock for both views, as the study's simulator had: from h1's
        # first SYN (the transfer's start, whoever answers it) to the last ACK
        # on h5's port (sender) and on h1's (receiver). The sender's own
        # capture alone would start at the spoofer's onward SYN, after the
        # end-to-end setup had already crossed the satellite.
        e2e = r.metrics.get("end_to_end_throughput") or {}
        snd = e2e.get("sender_bps") or summary_at(r, sender).get("sender_view_bps")
        rcv = e2e.get("receiver_bps") or summary_at(r, receiver).get("receiver_view_bps")
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
    """The numbers the TCP spoofing figures plot, for the page and for tests:
    {(size, flows): {view: {"regular", "spoofed", "ci_regular", "ci_spoofed", "pct"}}, ...};
    with out (the matrix directory), the spoofer's peak buffer ("buffer_peak": mean, ci, n)."""
    pts = _spoof_points(rows, out)
    table: dict = {}
    for size, flows in sorted({(k[0], k[1]) for k in pts}):
        reg, spo = pts.get((size, flows, False)), pts.get((size, flows, True))
        entry: dict = {}
        for view in ("sender_bps", "receiver_bps", "drops"):
            rm, rc = mean_ci_or_none(getattr(reg, view)) if reg else (None, None)
            sm, sc = mean_ci_or_none(getattr(spo, view)) if spo else (None, None)
            entry[view] = {"regular": rm, "spoofed": sm, "ci_regular": rc, "ci_spoofed": sc,
                           "n_regular": len(getattr(reg, view)) if reg else 0,
                           "n_spoofed": len(getattr(spo, view)) if spo else 0,
                           "pct": _pct(sm, rm) if view != "drops" else None}
        rates = (reg.path_drop_rate if reg else []) + (spo.path_drop_rate if spo else [])
        entry["path_drop_rate"] = statistics.mean(rates) if rates else None
        peaks = spo.buffer_peak if spo else []
        entry["buffer_peak"] = (*mean_ci_or_none(peaks), len(peaks))
        table[(size, flows)] = entry
    return table


def page(out: str, rows: list[CellRow]) -> list[str]:
    # The study's figures are drawn for one condition: a matrix with several
    # (experiments/spoofing-claims.yaml) is drawn for today's, and its study
    # page (`satbed study-page`) sets the conditions side by side.
    conditions = {condition_of(r) for r in rows}
    if len(conditions) > 1:
        rows = [r for r in rows if condition_of(r) == "today"]
    tab = spoofing_tables(rows, out)
    if not tab:
        return [f"<h2>{NAME}</h2><p>No measured cells yet.</p>"]
    sizes = sorted({k[0] for k in tab})
    flows = sorted({k[1] for k in tab})
    pkts = [max(1, round(s / PACKET)) for s in sizes]
    parts = [f"<h2>{NAME} with cross traffic (the study's figures, our runs)</h2>",
             _spoof_config(out, rows)]
    if len(conditions) > 1:
        parts.append(f"<p>This matrix runs {len(conditions)} conditions ({', '.join(sorted(conditions))}); the "
                     "figures are today's. `satbed study-page` sets them side by side.</p>")

    # Figure 5: throughput vs size, four curves, one panel per competing-flow count.
    fig, axes = pyplot().subplots(1, len(flows), figsize=(5 * len(flows), 4), squeeze=False)
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
        log_x(ax)
        ax.set_title(f"{n} competing flow(s)")
        ax.set_xlabel("transfer size (packets)")
        ax.set_ylabel("throughput (kbit/s)")
        ax.grid(alpha=.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    parts.append(figure("spoofing_throughput_vs_size", out, fig,
                         "Throughput vs transfer size (study Figure 5): mean and 95% interval over repetitions; "
                         "from h1's first SYN, sender view until the last ACK reaches h5, receiver view until h1 "
                         "sends its last ACK (one clock: the captures on h1's and h5's ports)."))

    # Figure 6: percent difference vs size (sender and receiver), per flow count.
    fig, ax = pyplot().subplots(figsize=(7, 4))
    for i, n in enumerate(flows):
        for view, style in (("sender_bps", "-"), ("receiver_bps", "--")):
            ys = [tab.get((s, n), {}).get(view, {}).get("pct") for s in sizes]
            xs = [p for p, y in zip(pkts, ys) if y is not None]
            ax.plot(xs, [y for y in ys if y is not None], style, marker="o", ms=3, color=f"C{i}",
                    label=f"{'Sender' if view == 'sender_bps' else 'Receiver'} side, {n} flow(s)")
    ax.axhline(0, color="#888", lw=.8)
    log_x(ax)
    ax.set_xlabel("transfer size (packets)")
    ax.set_ylabel("percent difference, spoofed vs end to end (%)")
    ax.grid(alpha=.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    parts.append(figure("spoofing_percent_difference", out, fig,
                         "Percent difference of throughput, (spoofed - end to end) / end to end (study Figure 6); "
                         "positive: the spoofer helped."))

    # Figure 8: dropped data packets of the main flow vs size.
    fig, ax = pyplot().subplots(figsize=(7, 4))
    for i, n in enumerate(flows):
        for who, style in (("regular", "--"), ("spoofed", "-")):
            ys = [tab.get((s, n), {}).get("drops", {}).get(who) for s in sizes]
            xs = [p for p, y in zip(pkts, ys) if y is not None]
            ax.plot(xs, [y for y in ys if y is not None], style, marker="o", ms=3, color=f"C{i}",
                    label=f"{'Spoofing' if who == 'spoofed' else 'Regular'}, {n} flow(s)")
    log_x(ax)
    ax.set_xlabel("transfer size (packets)")
    ax.set_ylabel("dropped data packets (main flow)")
    ax.grid(alpha=.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    parts.append(figure("spoofing_drops_vs_size", out, fig,
                         "Dropped data packets of the main flow vs size (study Figure 8): the sender's "
                         "retransmissions, plus the spoofer's on the satellite leg when spoofed."))

    # Figures 9/10: gain vs competing flows, per size.
    fig, axes = pyplot().subplots(1, 2, figsize=(11, 4))
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
    parts.append(figure("spoofing_gain_vs_flows", out, fig,
                         "Gain of spoofing vs the number of competing flows, per transfer size "
                         "(study Figures 9 and 10)."))

    held = _buffer_figure(out, rows, flows)
    if held:
        parts.append(held)

    body = []
    for (s, n), e in sorted(tab.items()):
        sv, rv, dv = e["sender_bps"], e["receiver_bps"], e["drops"]
        body.append([str(max(1, round(s / PACKET))), str(n),
                     fmt(e["path_drop_rate"] * 100 if e["path_drop_rate"] is not None else None, 1),
                     _kb(sv["regular"], sv["ci_regular"]), _kb(sv["spoofed"], sv["ci_spoofed"]), fmt(sv["pct"], 0),
                     _kb(rv["regular"], rv["ci_regular"]), _kb(rv["spoofed"], rv["ci_spoofed"]), fmt(rv["pct"], 0),
                     fmt(dv["regular"]), fmt(dv["spoofed"]), _kb(*e["buffer_peak"][:2]),
                     f"{sv['n_regular']}/{sv['n_spoofed']}"])
    parts.append("<h3>The numbers (means; ± 95% interval)</h3>" + html_table(
        ["packets", "flows", "r1 drop %", "sender regular kbit/s", "sender spoofed kbit/s", "sender gain %",
         "receiver regular kbit/s", "receiver spoofed kbit/s", "receiver gain %", "drops regular",
         "drops spoofed", "spoofer peak KB", "runs e2e/spoofed"], body))
    return parts


def _buffer_figure(out: str, rows: list[CellRow], flows: list[int]) -> str:
    """Data accumulating at the spoofer over time (the study's cache
    occupancy): pepd's buffered bytes, sampled, for the largest transfer of
    each competing-flow count (its first repetition)."""
    spoofed = [r for r in rows if r.status in MEASURED and r.params.get("pep", "none") != "none"]
    if not spoofed:
        return ""
    largest = max(int(r.params["size"]) for r in spoofed)
    fig, ax = pyplot().subplots(figsize=(8, 4))
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
        pyplot().close(fig)
        return ""
    ax.set_xlabel("time since the spoofer's first sample of the transfer (s)")
    ax.set_ylabel("bytes held by the spoofer (KB)")
    ax.grid(alpha=.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return figure("spoofing_spoofer_buffer", out, fig,
                   f"Data accumulating at the spoofer over time: pepd's buffered bytes (LAN receive queue, "
                   f"relay pipe and WAN send queue of its connections; trace_interval samples), "
                   f"{max(1, round(largest / PACKET))}-packet transfers, first repetition. The table's "
                   f"'spoofer peak KB' is the most it held per transfer.")


def _kb(mean: float | None, ci: float | None) -> str:
    """A mean and its 95% interval in thousands: bit/s as kbit/s, the spoofer's bytes as KB."""
    if mean is None:
        return "–"
    return f"{mean / 1e3:.1f}" + (f" ± {ci / 1e3:.1f}" if ci else "")


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
        f"Kernel: {html.escape(kernels(out, rows))}.</p>"
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



# The study page (`satbed study-page`): experiments/spoofing-claims.yaml's
# cells under four conditions, told apart by what they set (a cell is stored
# once whatever its variant is named): today's scenario; the study's, where
# the sender opens the connection; the sender opening with ns-2's
# one-segment initial window on the end hosts; and the sender opening across
# an Internet link no faster than the satellite. Each end to end and spoofed.
CONDITIONS = ("today", "study", "ns2-iw1", "slow-internet")


def condition_of(r: CellRow) -> str:
    p = r.params
    if p.get("links.inet.rate"):
        return "slow-internet"
    if p.get("profiles.h5") == "ns2-reno-sack-iw1":
        return "ns2-iw1"
    return "study" if p.get("direction") == "upload" else "today"


SMALL, LARGE = 10, 300      # packets: the paper's "ten packets or fewer", and the largest size of the run


def _condition(rows: list[CellRow], condition: str) -> dict:
    return spoofing_tables([r for r in rows if condition_of(r) == condition])


def _gain(condition: str, view: str, packets: int, flows: int):
    def value(rows: list[CellRow]) -> float | None:
        return (_condition(rows, condition).get((packets * PACKET, flows)) or {}).get(view, {}).get("pct")
    return value


def _extreme(condition: str, view: str, sizes: tuple[int, ...], flows: tuple[int, ...], pick=max):
    def value(rows: list[CellRow]) -> float | None:
        found = [g for p in sizes for n in flows if (g := _gain(condition, view, p, n)(rows)) is not None]
        return pick(found) if found else None
    return value


def _growth(condition: str, view: str, packets: int, flows: int):
    """The gain at `flows` competing flows less the gain without competition, in points."""
    def value(rows: list[CellRow]) -> float | None:
        hi, lo = _gain(condition, view, packets, flows)(rows), _gain(condition, view, packets, 0)(rows)
        return None if hi is None or lo is None else hi - lo
    return value


def _views_apart(condition: str, packets: int, flows: int):
    def value(rows: list[CellRow]) -> float | None:
        s = _gain(condition, "sender_bps", packets, flows)(rows)
        r = _gain(condition, "receiver_bps", packets, flows)(rows)
        return None if s is None or r is None else abs(s - r)
    return value


def _pct_shown(v: float) -> str:
    return f"{v:+.0f} %"


def _cite(value, shown=_pct_shown):
    """A value of the cells as the why of a row cites it."""
    def text(rows: list[CellRow]) -> str:
        v = value(rows)
        return "no cell" if v is None else shown(v)
    return text


def _headlines() -> tuple[Headline, ...]:
    """The sender's rows compare under the study's TCP whole (the sender opens,
    ns-2's one-segment initial window): the sender's view ends at the spoofer,
    whose own initial window does not reach it. The receiver's rows compare
    with the sender opening alone: there the spoofer's legs, which keep
    Linux's ten segments, would outrun end-to-end hosts held to one."""
    points = lambda v: f"{v:+.0f} points"
    apart = lambda v: f"{v:.0f} points apart"
    one_packet_opens = _cite(_gain("study", "sender_bps", 1, 0))
    large_opens = _cite(_extreme("study", "sender_bps", (30, LARGE), (0, 5), min))
    slow_apart = _cite(_views_apart("slow-internet", LARGE, 5), apart)
    slow_apart_alone = _cite(_views_apart("slow-internet", LARGE, 0), apart)
    return (
        Headline(f"From the receiver's view spoofing gains little for small transfers (largest receiver gain, "
                 f"1 and {SMALL} packets, no competing flow)", "at most about 20 % for 10 packets or fewer",
                 _extreme("today", "receiver_bps", (1, SMALL), (0,)),
                 _extreme("study", "receiver_bps", (1, SMALL), (0,)), _pct_shown, lambda x: x <= 25,
                 "The user waits for the data to cross the satellite whoever acknowledges it; a spoofer saves "
                 "the receiver only the slow-start round trips it shortens, and a small transfer has few."),
        Headline(f"From the sender's view the same small transfers gain much more (sender gain, {SMALL} "
                 "packets, no competing flow)", "much larger than the receiver's",
                 _gain("today", "sender_bps", SMALL, 0), _gain("ns2-iw1", "sender_bps", SMALL, 0),
                 _pct_shown, lambda x: x >= 50,
                 "The spoofer acknowledges the data a terrestrial round trip after it was sent."),
        Headline("The sender's gain is smallest for the smallest transfers: below 150 % for a single packet "
                 "(sender gain, 1 packet, no competing flow)", "at least 150 % only from 15 packets on",
                 _gain("today", "sender_bps", 1, 0), _gain("ns2-iw1", "sender_bps", 1, 0),
                 _pct_shown, lambda x: x < 150,
                 lambda rows: "Reproduced; the cause is who opens the connection. Set-up stays end to end. "
                 "Today the user h1 opens it: the clock starts at h1's SYN, and spoofed, the server h5 meets "
                 "only the terrestrial end of the handshake and has its segment acknowledged at once, where end "
                 "to end it waits for the SYN-ACK, the ACK and the data to cross the satellite. In the study "
                 "the sender opened the connection, as ns-2's FTP agent does, and waited a whole satellite "
                 "round trip for the SYN-ACK, spoofed or not: a fixed cost that shrinks the gain of a "
                 f"one-packet transfer. The sender opening alone, with Linux's initial window, gives "
                 f"{one_packet_opens(rows)}."),
        Headline("From 15 packets on the sender gains at least 150 %, whatever the competition (smallest "
                 f"sender gain, 30 and {LARGE} packets, 0 and 5 competing flows)", "at least 150 %",
                 _extreme("today", "sender_bps", (30, LARGE), (0, 5), min),
                 _extreme("ns2-iw1", "sender_bps", (30, LARGE), (0, 5), min), _pct_shown, lambda x: x >= 150,
                 lambda rows: "Slow start's round trips are terrestrial for the sender, satellite ones end to "
                 "end; the gain is the round trips a transfer needs. With ns-2's one-segment initial window a "
                 "30-packet transfer needs five; with Linux's ten it needs two, so the sender opening alone "
                 f"gains less ({large_opens(rows)}): the initial window is part of the study's result."),
        Headline(f"The receiver's gain grows with competition (receiver gain at {LARGE} packets, 5 competing "
                 "flows less none)", "grows with the number of competing flows",
                 _growth("today", "receiver_bps", LARGE, 5), _growth("study", "receiver_bps", LARGE, 5),
                 points, lambda x: x >= 20,
                 "A loss on the Internet link is repaired in a terrestrial round trip by the spoofer's upstream "
                 "connection instead of a satellite one end to end."),
        Headline(f"For large transfers both views gain about the same (sender gain less receiver gain, {LARGE} "
                 "packets, 5 competing flows)", "approximately the same",
                 _views_apart("today", LARGE, 5), _views_apart("study", LARGE, 5), apart, lambda x: x <= 50,
                 lambda rows: "The views part by what the spoofer still holds when the sender is done, which "
                 "the satellite drains at the T1's rate; that piles up only where the Internet link is faster "
                 "than the satellite (10 Mbit/s here; the study's rate was lost from its text). The "
                 "experiment: with the Internet link at the T1's rate (`slow-internet`) the views are "
                 f"{slow_apart(rows)} with 5 competing flows (the end-to-end transfers there stop at the time "
                 f"limit, see below) and {slow_apart_alone(rows)} without competition: satbed's 10 Mbit/s "
                 "Internet link is the difference; the study's own rate is unknown."),
    )


def _limited(rows: list[CellRow]) -> str:
    """Which cells stopped at their time limit: their throughput is what moved until then."""
    limited = [r for r in rows if r.status == "limited"]
    if not limited:
        return "Every transfer completed."
    where = sorted({(condition_of(r), max(1, round(int(r.params["size"]) / PACKET)), int(r.params.get(FLOWS) or 0),
                     "spoofed" if r.params.get("pep", "none") != "none" else "end to end") for r in limited})
    return (f"{len(limited)} transfers stopped at the time limit, their throughput what moved until then: "
            + "; ".join(f"{c}, {p} packets, {n} flows, {w}" for c, p, n, w in where) + ".")


def _numbers(rows: list[CellRow]) -> list[str]:
    out = ["| condition | packets | competing flows | sender e2e kbit/s | sender spoofed kbit/s | sender gain | "
           "receiver e2e kbit/s | receiver spoofed kbit/s | receiver gain | runs e2e / spoofed |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for condition in CONDITIONS:
        for (size, flows), e in sorted(_condition(rows, condition).items()):
            sv, rv = e["sender_bps"], e["receiver_bps"]
            out.append(f"| {condition} | {max(1, round(size / PACKET))} | {flows} | "
                       f"{_kb(sv['regular'], sv['ci_regular'])} | {_kb(sv['spoofed'], sv['ci_spoofed'])} | "
                       f"{fmt(sv['pct'], 0)} % | {_kb(rv['regular'], rv['ci_regular'])} | "
                       f"{_kb(rv['spoofed'], rv['ci_spoofed'])} | {fmt(rv['pct'], 0)} % | "
                       f"{sv['n_regular']} / {sv['n_spoofed']} |")
    return out


def results(dirs: list[str], rows: list[CellRow], figures: str) -> list[str]:
    """The page's generated part below its run table (`satbed study-page`).
    Everything comes from results.sqlite; the cells' revisions are kept
    beside it (tcp-spoofing.json) so that the run can be stored without its cells."""
    stored_per_cell(dirs, rows, "tcp-spoofing", lambda cell, r: {})
    conditions = ("`today`: the scenario as it is (the user h1 opens the connection and pulls the file). `the "
                  "study's conditions`: the data sender h5 opens it and pushes the file, as the study's ns-2 FTP "
                  "agent did; for the sender's view (rows 2-4) the end hosts also start with ns-2's one-segment "
                  "initial window (`ns2-iw1`, `profiles/tcp/ns2-reno-sack-iw1.yaml`). The receiver's rows leave "
                  "Linux's ten segments (`study` in the numbers below), because the spoofer's own legs keep ten and "
                  "would outrun end-to-end hosts held to one for a reason that is not spoofing. `slow-internet` is "
                  "the sender opening across an Internet link at the T1's rate instead of 10 Mbit/s (row 6). Gains "
                  "are (spoofed - end to end) / end to end, of the mean throughput over the repetitions; both views' "
                  "clocks start at the opener's SYN.")
    return [
        *headline_section(_headlines(), rows, conditions),
        "### The numbers", "",
        "Mean ± 95 % interval over the repetitions (t distribution). "
        + _limited(rows), "",
        *_numbers(rows), "",
    ]


STUDY = Study(NAME, from_scenario("spoofing"), page, "tcp-spoofing", results)
