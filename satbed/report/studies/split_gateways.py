"""The split gateways study (scenarios/split-gateways.yaml): the four set-ups
side by side for each metric (satellite-link throughput, RTT at the server,
download time, server busy time) and the satellite link's throughput over
time."""

from __future__ import annotations

import html
import os
import statistics
from collections import defaultdict

from analysis.figures import pyplot
from satbed.results.store import MEASURED, CellRow

from ..common import html_table
from .base import (Study, emulator_samples, ends, figure, fmt, from_scenario, kernels, mean_ci_or_none,
                   stored_per_cell, summary_at, vantage_of)
from .headlines import Headline
from .headlines import section as headline_section

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
    fig, axes = pyplot().subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.8))
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

    fig, ax = pyplot().subplots(figsize=(9, 3.8))
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


# The study page (`satbed study-page`): every variant of the scenario, read
# from results.sqlite alone. Today's set-ups are the four variants the
# study named; the study's conditions are the same four with "-study-q10"
# (the study's simulated hosts, a 10-packet queue at the T1 port); two more
# variants take the conditions apart.
T1_KBPS = 1544.0
SAT_NODE = "sat"            # the satellite emulator of topologies/split-gateways.yaml
# Each set-up's variant under the study's conditions.
# The study's gateway is the router that owns the T1 queue: its TCP never
# overruns its own port; pepd's leg paced at the T1 rate stands for it.
STUDY_VARIANTS = {"terrestrial": "terrestrial-study-q10", "satellite": "satellite-study-q10",
                  "large-windows": "large-windows-study-q10", "gateways": "gateways-study-q10-paced"}
# The untuned hosts at the study's own rate (about 32 KB in flight, what its 500 kbit/s at a round trip
# slightly above 500 ms gives): the no-gateway and gateway set-ups under the study's conditions, with
# each send buffer (KB) tried on the server (profiles/tcp/default-64k-reno-snd{KB}k.yaml).
SEND_BUFFERS_KB = (32, 56)


def _at_send_buffer(kb: int) -> dict[str, str]:
    return {"satellite": f"satellite-study-q10-snd{kb}k", "gateways": f"gateways-study-q10-paced-snd{kb}k"}


# The send buffers' ratio: the last buffer's, the one sized to hold 32 KB of data in flight.
AT_STUDY_RATE = _at_send_buffer(SEND_BUFFERS_KB[-1])
# The same set-ups with the window held where the study's hosts had it, at the receiver: the client's
# NcFTP asks for a smaller receive buffer (workload.main.rcvbuf, ncftpget -B; Linux holds twice it).
# Row 6's explanation leads with their ratio: a receiver-limited flow is clocked by its ACKs, so the
# window alone sets its rate.
AT_RECEIVER = {"satellite": "satellite-study-q10-rcv52k", "gateways": "gateways-study-q10-paced-rcv52k"}
EXPERIMENTS = (("satellite", "64 KB, Linux (CUBIC, SACK)", 100), ("large-windows", "195 KB, Linux", 100),
               ("gateways", "64 KB, Linux; pepd, CUBIC", 100),
               ("large-windows-q10", "195 KB, Linux", 10),
               ("large-windows-study-q40", "195 KB advertised, Reno without SACK", 40),
               ("terrestrial-study-q10", "64 KB, Reno without SACK", 10),
               ("satellite-study-q10", "64 KB, Reno without SACK", 10),
               ("large-windows-study-q10", "195 KB advertised, Reno without SACK", 10),
               ("gateways-study-q10", "64 KB, Reno without SACK; pepd, Reno with SACK", 10),
               ("gateways-study-q10-paced", "64 KB, Reno without SACK; pepd, paced at the T1 rate", 10),
               *((v, f"64 KB, Reno without SACK, the server's send buffer {kb} KB" + pep, 10)
                 for kb in SEND_BUFFERS_KB
                 for v, pep in ((_at_send_buffer(kb)["satellite"], ""),
                                (_at_send_buffer(kb)["gateways"], "; pepd, paced at the T1 rate"))),
               *((v, "Reno without SACK, the client's receive buffer 53,600 B (NcFTP asks for 26,800), the "
                  "server's 64 KB" + pep, 10)
                 for v, pep in ((AT_RECEIVER["satellite"], ""),
                                (AT_RECEIVER["gateways"], "; pepd, paced at the T1 rate"))))
STUDY_KBPS = 500.0
# Near the study's rate: within a tenth of it; few losses: a handful of segments in the whole download.
NEAR_STUDY = 0.1
FEW_REXMT = 5
# How long the 10-packet T1 queue of the study's conditions takes to drain (1,500-byte packets).
QUEUE_DRAIN_MS = 10 * 1500 * 8 / T1_KBPS


def _sat_main(r: CellRow) -> tuple[dict, bool]:
    """The main connection at a capture on the satellite emulator (for the
    gateways, the connection between them); where no TCP crosses it (pepd's
    rate-based leg), at the client, which the data reaches at the same rate."""
    _, receiver = ends(r)
    for node in (SAT_NODE, receiver):
        for v, c in (r.metrics.get("captures") or {}).items():
            if isinstance(c, dict) and c.get("node") == node:
                main = ((r.metrics.get("analysis") or {}).get(v) or {}).get("main") or {}
                if main.get("summary"):
                    return main, node == SAT_NODE
    return {}, False


def _cell_figures(r: CellRow) -> dict[str, float]:
    sender, _ = ends(r)
    out: dict[str, float] = {}
    main, on_link = _sat_main(r)
    summ = main.get("summary") or {}
    if summ.get("throughput_bps"):
        out["link_kbps"] = summ["throughput_bps"] / 1e3
    if on_link and summ.get("receiver_win_max"):
        out["win_max"] = float(summ["receiver_win_max"])
    if on_link and "rexmt_pkts" in summ:
        out["rexmt"] = float(summ["rexmt_pkts"])
    # How late the satellite emulator sent, at worst: a late emulator delivers in bunches.
    directions = ((((r.metrics.get("emulator") or {}).get("stats") or {}).get("totals") or {}).get("directions")
                  or {})
    late = [d["tx_late_max_us"] for d in directions.values() if isinstance(d, dict) and "tx_late_max_us" in d]
    if late:
        out["late_ms"] = max(late) / 1e3
    if r.metrics.get("seconds"):
        out["download_s"] = float(r.metrics["seconds"])
    rtt = summary_at(r, sender).get("rtt_avg_ms")
    if rtt is not None:
        out["server_rtt_ms"] = float(rtt)
    busy = _busy_s(r, sender)
    if busy is not None:
        out["server_busy_s"] = busy
    return out


def _mean(rows: list[CellRow], variant: str, key: str) -> float | None:
    values = [f[key] for r in rows if r.status in MEASURED and r.params.get("variant") == variant
              and key in (f := _cell_figures(r))]
    return statistics.fmean(values) if values else None


def _at(setup: str, key: str, scale: float = 1.0):
    """A figure of a set-up, by condition: today's variant, or the study's."""
    def make(condition: str):
        variant = setup if condition == "today" else STUDY_VARIANTS[setup]
        return lambda rows: None if (v := _mean(rows, variant, key)) is None else v / scale
    return make


def _ratio(a: str, b: str, key: str):
    """a's figure over b's, by condition."""
    def make(condition: str):
        fa, fb = _at(a, key)(condition), _at(b, key)(condition)
        return lambda rows: None if (x := fa(rows)) is None or not (y := fb(rows)) else x / y
    return make


def _send_buffers_tried(rows: list[CellRow]) -> list[tuple[int, float, float | None]]:
    """(send buffer KB, link kbit/s, retransmitted segments) of each buffer
    tried without gateways that has cells."""
    tried = []
    for kb in SEND_BUFFERS_KB:
        variant = _at_send_buffer(kb)["satellite"]
        if (kbps := _mean(rows, variant, "link_kbps")) is not None:
            tried.append((kb, kbps, _mean(rows, variant, "rexmt")))
    return tried


def _window_alone(kbps: float, rexmt: float | None) -> bool:
    """The study's rate set by the window, not by losses."""
    return abs(kbps - STUDY_KBPS) <= NEAR_STUDY * STUDY_KBPS and rexmt is not None and rexmt <= FEW_REXMT


def _window_rate_kbps(rows: list[CellRow], variant: str) -> float | None:
    """What one advertised window per round trip at the server moves: the
    rate a receiver-limited flow has where nothing else holds it."""
    win, rtt = _mean(rows, variant, "win_max"), _mean(rows, variant, "server_rtt_ms")
    return None if win is None or not rtt else win * 8 / rtt


def _at_500(rows: list[CellRow], gateways: str) -> str:
    """What hosts moving exactly the study's 500 kbit/s would take, against the same gateways."""
    gateways_s = _mean(rows, gateways, "download_s")
    size = next((r.params.get("size") for r in rows if r.params.get("variant") == gateways), None)
    return (f" Hosts at exactly 500 kbit/s would take {size * 8 / 500e3 / gateways_s:.2f}x the gateways' time."
            if size and gateways_s else "")


def _lead(ratio: float) -> str:
    """The gateways' lead, judged against the paper's."""
    return (f"{ratio:.2f}x faster, which agrees with the paper's 3-4x (2.5x or more)" if _lead_holds(ratio)
            else f"{ratio:.2f}x faster, short of the paper's 3-4x (2.5x or more)")


def _held_at_receiver(rows: list[CellRow]) -> str | None:
    """The receiver's window experiment (AT_RECEIVER), from its cells; None without them."""
    sat, gw = AT_RECEIVER["satellite"], AT_RECEIVER["gateways"]
    kbps, ratio = _mean(rows, sat, "link_kbps"), _ratio_of(rows, sat, gw, "download_s")
    win, by_window = _mean(rows, sat, "win_max"), _window_rate_kbps(rows, sat)
    if kbps is None or ratio is None or win is None or by_window is None:
        return None
    rexmt, late = _mean(rows, sat, "rexmt"), _mean(rows, sat, "late_ms")
    asked = next((r.config.get("client_rcvbuf") for r in rows if r.params.get("variant") == sat), None)
    near = abs(kbps - STUDY_KBPS) <= NEAR_STUDY * STUDY_KBPS
    # The window sets the rate when the cell moves nearly what one window per round trip gives.
    window_sets = kbps >= (1 - NEAR_STUDY) * by_window
    # A receiver-limited flow is clocked by its ACKs; a late emulator bunches them, and what one ACK
    # releases at once can outgrow the queue. Later than the 10-packet queue takes to drain at the T1
    # rate is late enough.
    if rexmt is None or rexmt <= FEW_REXMT:
        losses = ""
    elif late is not None and late > QUEUE_DRAIN_MS:
        losses = (f" Its {rexmt:.0f} segments retransmitted are the machine's, not the window's: the emulator ran up "
                  f"to {late:.0f} ms late on the loaded machine (the 10-packet queue drains in {QUEUE_DRAIN_MS:.0f} "
                  "ms), so the client received data in bunches, one ACK covered many segments, and the server "
                  "sent as many at once into the queue.")
    else:
        losses = f" It retransmitted {rexmt:.0f} segments."
    return (f" Held at the receiver, as the study's hosts were (`{sat}`: the client's NcFTP asks for "
            + (f"{asked:,} bytes of receive buffer, which Linux doubles" if asked else "a smaller receive buffer")
            + f"), the client advertises at most {win:,.0f} B and the hosts move {kbps:.0f} kbit/s"
            + (", within a tenth of the study's rate" if near else ", not within a tenth of the study's rate")
            + f"; one such window per round trip at the server is {by_window:.0f} kbit/s, so "
            + ("the window sets the rate." if window_sets else "the window alone does not set it.")
            + losses
            + f" Against these hosts the gateways (`{gw}`) download {_lead(ratio)}"
            + (": hosts held to the study's window give the paper's lead, and Linux's larger window (39 KB) "
               "is what shrinks it in the columns here." if _lead_holds(ratio) and near and window_sets else ".")
            + _at_500(rows, gw))


def _gateways_lead_why(rows: list[CellRow]) -> str:
    """Row 6's explanation, written from the cells of the receiver's window
    (AT_RECEIVER), and of the send buffers tried before it (SEND_BUFFERS_KB)
    with the ratio under the last (AT_STUDY_RATE)."""
    text = ("The gateways reach the T1 rate in both conditions, but satbed's untuned hosts move about a fifth "
            "more than the study's 500 kbit/s: Linux advertises 39 KB of the 64 KB buffer, where the study's "
            "rate at its round trip is one window of about 32 KB.")
    held = _held_at_receiver(rows)
    tried = _send_buffers_tried(rows)
    sat = _mean(rows, AT_STUDY_RATE["satellite"], "link_kbps")
    ratio = _ratio_of(rows, AT_STUDY_RATE["satellite"], AT_STUDY_RATE["gateways"], "download_s")
    if not tried or sat is None or ratio is None:
        return text + (held or f" The hosts at the study's rate (`{AT_RECEIVER['satellite']}`) have no cells yet.")
    listed = "; ".join(f"{kb} KB: {kbps:.0f} kbit/s, " + (f"{rexmt:.0f} segments retransmitted" if rexmt is not None
                                                           else "retransmissions not captured")
                       for kb, kbps, rexmt in tried)
    base = _mean(rows, STUDY_VARIANTS["satellite"], "rexmt")
    found = [kb for kb, kbps, rexmt in tried if _window_alone(kbps, rexmt)]
    kb = SEND_BUFFERS_KB[-1]
    return (text + (held or f" The window held at the receiver (`{AT_RECEIVER['satellite']}`) has no cells yet.")
            + (" Earlier tries" if held else " Tries") + " held the sender instead, with a send buffer on the "
            "server (`profiles/tcp/default-64k-reno-snd*k.yaml`); without gateways the buffers tried gave "
            f"{listed} (the study: about 500 kbit/s"
            + (f"; the hosts without a send buffer, `{STUDY_VARIANTS['satellite']}`, retransmitted {base:.0f})."
               if base is not None else ").")
            + (f" {', '.join(f'{k} KB' for k in found)} held the hosts within a tenth of the study's rate with "
               f"at most {FEW_REXMT} segments retransmitted."
               if found else
               f" No send buffer held the hosts within a tenth of the study's rate with at most {FEW_REXMT} "
               "segments retransmitted: losses at the short queue, not the window alone, share in setting their "
               "rate, so they do not isolate the paper's explanation (the hosts' windows).")
            + f" With {kb} KB (`{AT_STUDY_RATE['satellite']}`, `{AT_STUDY_RATE['gateways']}`) the hosts without "
            f"gateways move {sat:.0f} kbit/s and the gateways download {_lead(ratio)}."
            + ("" if held else _at_500(rows, AT_STUDY_RATE["gateways"])))


def _ratio_of(rows: list[CellRow], a: str, b: str, key: str) -> float | None:
    """Variant a's figure over variant b's."""
    x, y = _mean(rows, a, key), _mean(rows, b, key)
    return None if x is None or not y else x / y


def _lead_holds(x: float) -> bool:
    """Row 6 agrees: at least 2.5x (the paper: 3-4x)."""
    return x >= 2.5


def _headlines() -> tuple[Headline, ...]:
    def h(says, paper, make, shown, holds, why):
        return Headline(says, paper, make("today"), make("study"), shown, holds, why)
    kbps = lambda v: f"{v:.0f} kbit/s"
    times = lambda v: f"{v:.2f}x"
    return (
        h("Terrestrial (no satellite delay): the link runs close to the T1's capacity",
          "close to the T1 rate", _at("terrestrial", "link_kbps"), kbps, lambda x: x >= 0.85 * T1_KBPS,
          "A 64 KB window covers a T1 without delay, whatever the queue."),
        h("Satellite, untuned 64 KB hosts: the link carries about a third of the T1", "about 500 kbit/s",
          _at("satellite", "link_kbps"), kbps, lambda x: 350 <= x <= 700,
          "Window-limited, one advertised window per round trip (the experiment table: no retransmission, "
          "the window Linux advertises from a 64 KB buffer). The study's 500 kbit/s at a round trip "
          "slightly above 500 ms is what about 32 KB moves; a whole 64 KB would move 1 Mbit/s."),
        h("Large windows end to end (195 KB, window scale 3): better, but well short of the T1",
          "800-900 kbit/s", _at("large-windows", "link_kbps"), kbps, lambda x: 700 <= x <= 1000,
          "Reproduced, and the cause ruled in by the experiment below: a short drop-tail queue at the T1 "
          "port. A 195 KB window is twice the bandwidth-delay product, so with a 10-packet queue every "
          "window overflows it: `large-windows-q10` (today's hosts) and `large-windows-study-q10` (the "
          "study's) both fall to about the paper's range, `large-windows-study-q40` part of the way. With "
          "satbed's 100-packet queue Linux's 120 KB window never loses a packet and fills the T1. The "
          "hosts (Reno without SACK, the whole 195 KB advertised) matter little beside the queue. The "
          "paper gives no queue size."),
        h("Split gateways: the link runs close to the T1's capacity", "close to the T1 rate",
          _at("gateways", "link_kbps"), kbps, lambda x: x >= 0.85 * T1_KBPS,
          "Today pepd's CUBIC leg between the gateways fills the T1 through the 100-packet queue. The "
          "study's gateway is the router whose T1 port holds the queue; the hypothesis is that its TCP's "
          "segments wait in its own interface rather than being dropped there. pepd beside the router is "
          "one more sender into the emulator's queue: with TCP between the gateways (`gateways-study-q10`) its window overflows the "
          "10-packet queue as the hosts' large windows do, and most of the gateways' lead is gone; paced "
          "at the T1 rate (`gateways-study-q10-paced`, pepd's rate-based leg, the stand-in for a sender "
          "that owns its port) the gateways fill the T1 again."),
        h("Split gateways download 2-3 times faster than large windows end to end (download time, large "
          "windows over gateways)", "2-3x; its own Figure 4 rates (about 1,500 against 800-900 kbit/s) "
          "give 1.7-1.9x", _ratio("large-windows", "gateways", "download_s"), times, lambda x: x >= 1.6,
          "Follows from rows 3 and 4, checked against the ratio the paper's own rates give. Today large "
          "windows fill the T1, so the gateways cannot be faster; under the study's conditions the short "
          "queue holds the large windows back and not the gateways."),
        h("Split gateways download 3-4 times faster than without them (download time, satellite over "
          "gateways)", "3-4x", _ratio("satellite", "gateways", "download_s"), times, _lead_holds,
          _gateways_lead_why),
        h("With gateways the server measures a short RTT (terrestrial about 150 ms, satellite above 500)",
          "75 ms", _at("gateways", "server_rtt_ms"), lambda v: f"{v:.0f} ms", lambda x: x <= 150,
          "The server's connection ends at its gateway, one LAN hop away; the study's LAN and processing "
          "delays, which its text does not give, are not modelled."),
        h("With gateways the server is busy about as long as over a terrestrial link (busy time, gateways "
          "over terrestrial)", "similar", _ratio("gateways", "terrestrial", "server_busy_s"), times,
          lambda x: x <= 1.3,
          "The server's data is acknowledged by its gateway at LAN distance; the gateway holds what the "
          "link has not yet carried."),
    )


def _experiments(rows: list[CellRow]) -> list[str]:
    out = ["| variant | hosts | T1 queue (packets) | link kbit/s | download s | server RTT ms | "
           "retransmitted on the satellite | largest window advertised to the satellite leg |",
           "|---|---|---|---|---|---|---|---|"]
    for variant, hosts, queue in EXPERIMENTS:
        f = {k: _mean(rows, variant, k) for k in ("link_kbps", "download_s", "server_rtt_ms", "rexmt", "win_max")}
        if f["download_s"] is None:
            continue
        window = "–" if f["win_max"] is None else f"{f['win_max']:,.0f} B"
        out.append(f"| `{variant}` | {hosts} | {queue} | {fmt(f['link_kbps'], 0)} | {fmt(f['download_s'], 0)} | "
                   f"{fmt(f['server_rtt_ms'], 0)} | {fmt(f['rexmt'], 0)} | {window} |")
    return out


def results(dirs: list[str], rows: list[CellRow], figures: str) -> list[str]:
    """The page's generated part below its run table (`satbed study-page`).
    Everything comes from results.sqlite; the cells' revisions are kept
    beside it (split-gateways.json) so that the run can be stored without its cells."""
    stored_per_cell(dirs, rows, "split-gateways", lambda cell, r: {})
    size = rows[0].params.get("size", 0) if rows else 0
    conditions = ("`today`: the scenario's four set-ups as they are (Linux hosts, a 100-packet queue at the T1 "
                  "port). `the study's conditions`: the same four set-ups with the study's simulated hosts (Reno "
                  "without SACK; the large windows advertised whole), a 10-packet drop-tail queue at the T1 port, and "
                  "gateways that never overrun their own port (variants `*-study-q10`, `gateways-study-q10-paced`). "
                  f"One FTP download of {size / 2**20:g} MB per cell (the study: 50 MB); link throughput is the "
                  "main connection's, captured on the satellite emulator's server side.")
    return [
        *headline_section(_headlines(), rows, conditions),
        "### The experiments: what holds the large windows back, the hosts at the study's rate", "",
        "Each variant once. Link kbit/s: the main connection's throughput captured on the satellite "
        "link (for the paced gateways, whose leg is not TCP, at the client). The "
        + " and ".join(f"`-snd{kb}k`" for kb in SEND_BUFFERS_KB) + " variants are row 6's earlier tries: the "
        "study's conditions with a send buffer of " + " or ".join(f"{kb} KB" for kb in SEND_BUFFERS_KB)
        + " on the server; the `-rcv52k` ones row 6's answer: the same with the client's receive buffer "
        "held to about 32 KB of window.", "",
        *_experiments(rows), "",
    ]


STUDY = Study(NAME, from_scenario("split-gateways"), page, "split-gateways", results)
