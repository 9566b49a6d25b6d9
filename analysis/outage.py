"""Outage-and-recovery metrics of a run of scenarios/outage.yaml (the
ACK-reservation study of Zhu, Roy and Kim) and the study page over a matrix of them.

Per run (run_metrics):
- the outage schedule on the wall clock: the satellite emulator's
  period/down/offset from config.json, counted from the schedules' start
  (result.json schedule_clock_wall_s);
- the source's sending rate from the LAN capture at the source (lan_a):
  every data segment of the main flow, retransmissions included (without
  a PEP the source's first work after an outage is resending what the
  outage lost, which is the link in use; a split PEP's source never
  resends), in 100 ms bins;
- recovery time after each outage: from link-up to the first instant from
  which the source sends at least RECOVERED of the link's payload rate
  over the next WINDOW_S (the study's "TCP source woken up");
- throughput as a fraction of the link's payload rate over the whole
  cycles the transfer covers, from the first outage's start, counted from
  the data reaching the receiver (lan_b) (physical limit 1 - down/period);
- the source's cwnd trace (cwnd.jsonl, ss -ti) and pepd's buffer occupancy
  (pep/<node>/buffer.jsonl) and outage detections (outages.jsonl), with
  the detection latency after the link went down.

`satbed report MATRIX_DIR` adds outage.html (study_page) when the matrix
has runs of this scenario."""

from __future__ import annotations

import html
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from satbed.core.files import jsonl_records

from .figures import data_uri, png, pyplot
from .pcap import PcapError, read_tcp

BIN_S = 0.1
WINDOW_S = 0.5
WINDOW_LONG_S = 1.0     # the stricter reading: a source pausing 0.2 s in every 0.8 s passes 0.5 s windows early
RECOVERED = 0.9
SEGMENT = 1448          # payload bytes per 1500-byte packet (TCP timestamps)
FRAME = 1500


@dataclass
class Schedule:
    clock: float         # wall time the outage schedule started
    period_s: float
    down_s: float
    offset_s: float
    rate_bps: float      # satellite link rate, data direction

    def outages(self, until: float) -> list[tuple[float, float]]:
        """(down, up) wall times of every outage that begins before until."""
        out = []
        k = 0
        while True:
            down = self.clock + self.offset_s + k * self.period_s
            if down >= until or self.period_s <= 0:
                return out
            out.append((down, down + self.down_s))
            k += 1

    @property
    def payload_rate(self) -> float:
        """Payload bytes per second the link carries while up."""
        return self.rate_bps / 8 * SEGMENT / FRAME

    @property
    def limit(self) -> float:
        return 1 - self.down_s / self.period_s if self.period_s else 1.0


@dataclass
class RunMetrics:
    run: str
    label: str
    pep: str
    options: str
    buffer_packets: int | None
    ack_reserve: float | None
    recovery_s: list[float | None] = field(default_factory=list)
    recovery_long_s: list[float | None] = field(default_factory=list)  # over WINDOW_LONG_S
    throughput_fraction: float | None = None
    cycles: int = 0
    goodput_fraction: float | None = None
    detect_latency_s: list[float] = field(default_factory=list)     # detection - link down
    wan_recovered_after_s: list[float] = field(default_factory=list)  # WAN progress again - link up
    buffer_high_packets: float | None = None
    integrity: str = ""
    loadavg: list[float] | None = None
    error: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _load(path: Path) -> Any:
    with open(path) as f:
        return json.load(f)


def _jsonl(path: Path) -> list[dict]:
    return list(jsonl_records(path)) if path.is_file() else []


def _integrity(result: dict) -> str:
    """The SHA-256 verdict: a transfer stopped at the time limit is
    verified on the prefix that arrived."""
    full = str(result.get("integrity", ""))
    if full == "incomplete" and result.get("prefix_integrity"):
        return f"prefix {result['prefix_integrity']}"
    return full


def schedule(run: Path, config: dict, result: dict) -> Schedule | None:
    clock = result.get("schedule_clock_wall_s")
    if clock is None:
        return None
    links = config.get("links") or {}
    # The satellite link's schedule: a variant may give the terrestrial link the same one.
    for name, link in sorted(links.items(), key=lambda kv: kv[0] != "sat"):
        d = link.get("a_to_b") or {}
        o = d.get("outage")
        if o:
            return Schedule(float(clock), float(o["period_s"]), float(o["down_s"]), float(o.get("offset_s", 0)),
                            float(d.get("rate_bps") or 0))
    return None


def data_flow(path: Path, sender_ip: str, new_only: bool = True) -> list[tuple[float, int]]:
    """(time, payload bytes) of the largest TCP flow sent by sender_ip: new
    data only (beyond the highest sequence so far), or every segment."""
    summary = read_tcp(path)
    flows: dict[tuple, list] = {}
    for p in summary.packets:
        if p.src == sender_ip and p.payload > 0:
            flows.setdefault((p.src, p.sport, p.dst, p.dport), []).append(p)
    if not flows:
        return []
    pkts = max(flows.values(), key=lambda ps: sum(p.payload for p in ps))
    if not new_only:
        return [(p.ts, p.payload) for p in pkts]
    out = []
    top: int | None = None
    base = pkts[0].seq
    for p in pkts:
        end = (p.seq - base) % (1 << 32) + p.payload
        if top is None or end > top:
            out.append((p.ts, end - (top or 0) if top is not None else end))
            top = end
    return out


def _bins(events: list[tuple[float, int]], start: float, stop: float) -> list[float]:
    n = max(int((stop - start) / BIN_S) + 1, 1)
    b = [0.0] * n
    for t, v in events:
        i = int((t - start) / BIN_S)
        if 0 <= i < n:
            b[i] += v
    return b


def recovery_time(bins: list[float], start: float, up: float, until: float, rate: float,
                  window_s: float = WINDOW_S) -> float | None:
    """Seconds from up until the source first sends RECOVERED x rate over
    window_s: the start of the first such window, from the bin holding up
    on (the source sends nothing while the link is down, so a window
    reaching back before up does not credit it early)."""
    w = int(round(window_s / BIN_S))
    i = max(int((up - start) / BIN_S), 0)
    last = min(int((until - start) / BIN_S), len(bins)) - w
    need = RECOVERED * rate * window_s
    while i <= last:
        if sum(bins[i:i + w]) >= need:
            return max(start + i * BIN_S - up, 0.0)
        i += 1
    return None


def run_metrics(run_dir: str | Path) -> RunMetrics:
    run = Path(run_dir)
    config = _load(run / "config.json")
    result = _load(run / "result.json")
    cfg = config.get("config", config)
    node, pl = _access_node(cfg)
    pep = pl.get("name", cfg.get("pep", "none")) if isinstance(pl, dict) else str(pl)
    options = pl.get("options", "") if isinstance(pl, dict) else ""
    opts = dict(w.split("=", 1) for w in options.split() if "=" in w)
    bp = int(opts["buffer_packets"]) if "buffer_packets" in opts else None
    k = float(opts["ack_reserve"]) if "ack_reserve" in opts else None
    label = "none" if pep == "none" else f"{pep} " + " ".join(
        w for w in options.split() if not w.startswith(("trace_interval", "outage_detect")))
    src_profile = (cfg.get("profiles") or {}).get("src", "")
    if src_profile and src_profile != "reno-sack-1500":
        label += f" (source: {src_profile})"
    m = RunMetrics(run=run.name, label=label.strip(), pep=pep,
                   options=options, buffer_packets=bp, ack_reserve=k, integrity=_integrity(result),
                   loadavg=result.get("loadavg"))
    sched = schedule(run, cfg, result)
    if sched is None:
        m.error = "no outage schedule (schedule_clock_wall_s or an outage: link missing)"
        return m
    src = "10.99.15.2"
    dst = "10.99.15.254"
    try:
        topo = cfg.get("endpoints") or []
        sent = data_flow(run / "captures" / "lan_a.pcap", src, new_only=False)
        got = data_flow(run / "captures" / "lan_b.pcap", src)
    except (OSError, PcapError) as e:
        m.error = f"captures: {e}"
        return m
    del topo, dst
    if not sent:
        m.error = "no data in the LAN capture"
        return m
    end = max(t for t, _ in sent)
    start = sched.clock
    bins = _bins(sent, start, end)
    outs = sched.outages(end)
    for i, (down, up) in enumerate(outs):
        nxt = outs[i + 1][0] if i + 1 < len(outs) else end
        if up < end:
            m.recovery_s.append(recovery_time(bins, start, up, nxt, sched.payload_rate))
            m.recovery_long_s.append(recovery_time(bins, start, up, nxt, sched.payload_rate, WINDOW_LONG_S))
    # Whole cycles from the first outage's start, while data still arrived.
    if outs and got:
        last_rx = max(t for t, _ in got)
        first = outs[0][0]
        m.cycles = int((last_rx - first) // sched.period_s)
        if m.cycles:
            stop = first + m.cycles * sched.period_s
            moved = sum(v for t, v in got if first <= t < stop)
            m.throughput_fraction = moved / (m.cycles * sched.period_s * sched.payload_rate)
        first_rx = min(t for t, _ in got)
        total = sum(v for _, v in got)
        if last_rx > first_rx:
            m.goodput_fraction = total / ((last_rx - first_rx) * sched.payload_rate)
    if node:
        pdir = run / "pep" / node
        for ev in _jsonl(pdir / "outages.jsonl"):
            if ev.get("event") == "down":
                downs = [d for d, _ in outs if d <= ev["detected"]]
                if downs:
                    m.detect_latency_s.append(round(ev["detected"] - downs[-1], 3))
            elif ev.get("event") == "up":
                ups = [u for _, u in outs if u <= ev["recovered"]]
                if ups:
                    m.wan_recovered_after_s.append(round(ev["recovered"] - ups[-1], 3))
        samples = _jsonl(pdir / "buffer.jsonl")
        main = _main_connection(samples)
        occ = [s["occupancy_bytes"] for s in samples if s.get("id") == main]
        if occ:
            m.buffer_high_packets = round(max(occ) / SEGMENT, 1)
    return m


def _access_node(cfg: dict) -> tuple[str, Any]:
    """The access node's PEP placement: `acc` (the far end's `far` is a
    plain bridge or the wan=rate peer), else the first one."""
    placement = cfg.get("peps") or {}
    if "acc" in placement:
        return "acc", placement["acc"]
    return next(iter(placement.items()), ("", {}))


def _main_connection(samples: list[dict]) -> Any:
    """The connection id that held the most in the buffer trace (the main
    flow, not the tool's control connection or the split proof's)."""
    total: dict = {}
    for s in samples:
        total[s.get("id")] = total.get(s.get("id"), 0) + s.get("occupancy_bytes", 0)
    return max(total, key=total.get) if total else None


def traces(run_dir: str | Path) -> dict:
    """Time series for the figures, times in seconds from the schedule's start."""
    run = Path(run_dir)
    config = _load(run / "config.json")
    result = _load(run / "result.json")
    cfg = config.get("config", config)
    sched = schedule(run, cfg, result)
    t0 = sched.clock if sched else 0.0
    cw = [(s["t"] - t0, s.get("cwnd"), s.get("ssthresh")) for s in _jsonl(run / "cwnd.jsonl") if s.get("cwnd")]
    node, _ = _access_node(cfg)
    samples = _jsonl(run / "pep" / node / "buffer.jsonl") if node else []
    main = _main_connection(samples)
    buf = [(s["t"] - t0, s["occupancy_bytes"] / SEGMENT, s.get("reserving", False))
           for s in samples if s.get("id") == main]
    rate: list[tuple[float, float]] = []
    try:
        sent = data_flow(run / "captures" / "lan_a.pcap", "10.99.15.2", new_only=False)
        if sent and sched:
            b = _bins(sent, t0, max(t for t, _ in sent))
            rate = [(i * BIN_S, v / BIN_S / SEGMENT) for i, v in enumerate(b)]
    except (OSError, PcapError):
        pass
    return {"cwnd": cw, "buffer": buf, "rate": rate,
            "outages": [(d - t0, u - t0) for d, u in (sched.outages(t0 + 1e4) if sched else [])][:10]}


def _figure(run_dir: Path, title: str, window: tuple[float, float] = (0.0, 60.0)) -> str:
    """cwnd, sending rate and buffer occupancy of one run over one cycle, as a data: URI PNG."""
    tr = traces(run_dir)
    fig, axes = pyplot().subplots(3, 1, figsize=(9, 7), sharex=True)
    lo, hi = window
    for ax in axes:
        for d, u in tr["outages"]:
            if u > lo and d < hi:
                ax.axvspan(max(d, lo), min(u, hi), color="0.85")
    cw = [(t, c, s) for t, c, s in tr["cwnd"] if lo <= t <= hi]
    axes[0].plot([t for t, _, _ in cw], [c for _, c, _ in cw], label="cwnd")
    axes[0].plot([t for t, _, s in cw if s], [s for _, _, s in cw if s], label="ssthresh", alpha=0.6)
    axes[0].set_ylabel("source (packets)")
    axes[0].legend(loc="upper right")
    r = [(t, v) for t, v in tr["rate"] if lo <= t <= hi]
    axes[1].plot([t for t, _ in r], [v for _, v in r], lw=0.8)
    axes[1].set_ylabel("source sends (pkt/s)")
    b = [(t, v) for t, v, _ in tr["buffer"] if lo <= t <= hi]
    axes[2].plot([t for t, _ in b], [v for _, v in b])
    axes[2].set_ylabel("pepd buffer (packets)")
    axes[2].set_xlabel("seconds from the schedule's start (grey: link down)")
    fig.suptitle(title)
    fig.tight_layout()
    return data_uri(png(fig))


def _leg(m: RunMetrics) -> str:
    return "rate" if "wan=rate" in m.options else "tcp"


def _throughput_figure(rows: list[RunMetrics]) -> str | None:
    """Throughput against K per B and WAN leg (the study's Figure 8 in
    kind; K = 1 is no reservation), as a data: URI PNG; None without pepd runs."""
    series: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for m in rows:
        if m.pep == "none" or m.buffer_packets is None or m.throughput_fraction is None:
            continue
        if _leg(m) == "tcp" and "wan_rto_max" not in m.options:
            continue  # the uncapped row is another configuration, not a K = 1 point
        series.setdefault((_leg(m), m.buffer_packets), []).append((m.ack_reserve or 1.0, m.throughput_fraction))
    if not series:
        return None
    fig, ax = pyplot().subplots(figsize=(7, 4.5))
    for (leg, b), pts in sorted(series.items()):
        pts.sort()
        ax.plot([k for k, _ in pts], [v for _, v in pts], marker="o" if leg == "tcp" else "s",
                ls="-" if leg == "tcp" else "--", label=f"B={b} ({'TCP' if leg == 'tcp' else 'wan=rate'} leg)")
    none = [m.throughput_fraction for m in rows if m.pep == "none" and m.throughput_fraction is not None]
    if none:
        ax.axhline(none[0], color="0.5", ls=":", label="no PEP")
    ax.axhline(0.75, color="k", lw=0.8, label="limit 0.75")
    ax.set_xlabel("ACK-reservation threshold K (1: none)")
    ax.set_ylabel("throughput / link rate")
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    return data_uri(png(fig))


def _trace_choice(rows: list[RunMetrics], runs: list[Path]) -> list[tuple[RunMetrics, Path]]:
    """The runs whose traces the page draws: no PEP and pepd without
    reservation (Figure 3), with it (Figure 7): the TCP leg at the study's
    optimum B=185, K=0.88, the wan=rate leg at B=320 without and with
    K=0.6, where present, and the reserving row with the highest
    throughput (the best B and K of the run)."""
    ok = [(m, r) for m, r in zip(rows, runs) if not m.error]
    wanted = [
        lambda m: m.pep == "none" and "source" not in m.label,
        lambda m: _leg(m) == "tcp" and m.buffer_packets == 185 and m.ack_reserve is None and "wan_rto_max" in m.options,
        lambda m: _leg(m) == "tcp" and m.buffer_packets == 185 and m.ack_reserve == 0.88,
        lambda m: _leg(m) == "rate" and m.buffer_packets == 320 and m.ack_reserve is None,
        lambda m: _leg(m) == "rate" and m.buffer_packets == 320 and m.ack_reserve == 0.6,
    ]
    chosen = []
    for want in wanted:
        hit = next(((m, r) for m, r in ok if want(m) and (m, r) not in chosen), None)
        if hit:
            chosen.append(hit)
    best = max(((m, r) for m, r in ok if m.ack_reserve and m.throughput_fraction is not None),
               key=lambda mr: mr[0].throughput_fraction, default=None)
    if best and best not in chosen:
        chosen.append(best)
    return chosen or ok[:4]


def find_runs(matrix_dir: str | Path) -> list[Path]:
    runs = []
    for root, _dirs, files in os.walk(matrix_dir):
        if "result.json" in files and "config.json" in files:
            try:
                cfg = _load(Path(root) / "config.json")
            except (OSError, ValueError):
                continue
            scen = (cfg.get("config", cfg) or {}).get("scenario", "")
            if os.path.basename(str(scen)) == "outage.yaml":
                runs.append(Path(root))
    return sorted(runs)


def _f(v: Any, nd: int = 2) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    if isinstance(v, list):
        return ", ".join(_f(x, nd) for x in v) or "—"
    return html.escape(str(v))


def study_page(matrix_dir: str | Path) -> Path | None:
    """outage.html in the matrix directory: the table of recovery time and
    throughput per configuration and the traces of one cycle (the study's
    Figures 3, 7 and 8 in kind); None when the matrix has no outage runs."""
    runs = find_runs(matrix_dir)
    if not runs:
        return None
    rows = [run_metrics(r) for r in runs]
    parts = ["<!doctype html><meta charset=utf-8><title>Outages and recovery</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}td,th{padding:2px 8px;"
             "border-bottom:1px solid #ddd;text-align:right}td:first-child{text-align:left}</style>",
             "<h1>Link outages and recovery (the ACK-reservation study)</h1>",
             f"<p>Recovery: seconds from link-up until the source sends at least {RECOVERED:.0%} of the link's "
             f"payload rate over {WINDOW_S} s, and over {WINDOW_LONG_S} s (LAN capture at the source). Throughput: data reaching the "
             "receiver over whole 40 s cycles from the first outage, as a fraction of the link's payload rate "
             "(limit 0.75). Detection: pepd's zero-progress timer firing, seconds after the link went down. "
             "WAN back: pepd's WAN leg making progress again, seconds after link-up.</p>",
             "<table><tr><th>configuration</th><th>recovery per outage (s)</th>"
             f"<th>recovery, {WINDOW_LONG_S:g} s window (s)</th><th>throughput / link</th>"
             "<th>cycles</th><th>goodput / link (whole transfer)</th><th>detection (s)</th><th>WAN back (s)</th>"
             "<th>buffer max (pkts)</th><th>SHA-256</th><th>load avg</th></tr>"]
    for m in sorted(rows, key=lambda m: (m.pep != "none", "wan=rate" in m.options, m.buffer_packets or 0,
                                         m.ack_reserve or 0, m.label)):
        parts.append(f"<tr><td>{_f(m.label)}{(' <i>' + html.escape(m.error) + '</i>') if m.error else ''}</td>"
                     f"<td>{_f(m.recovery_s, 1)}</td><td>{_f(m.recovery_long_s, 1)}</td>"
                     f"<td>{_f(m.throughput_fraction, 3)}</td><td>{m.cycles}</td>"
                     f"<td>{_f(m.goodput_fraction, 3)}</td><td>{_f(m.detect_latency_s, 2)}</td>"
                     f"<td>{_f(m.wan_recovered_after_s, 2)}</td><td>{_f(m.buffer_high_packets, 0)}</td>"
                     f"<td>{_f(m.integrity)}</td><td>{_f(m.loadavg, 1)}</td></tr>")
    parts.append("</table>")
    try:
        uri = _throughput_figure(rows)
        if uri:
            parts.append(f"<h3>Throughput against K per B (Figure 8 in kind)</h3><img src='{uri}' width=700>")
    except Exception as e:  # a figure that cannot be drawn must not lose the table
        parts.append(f"<p>no throughput figure ({html.escape(str(e))})</p>")
    for m, r in _trace_choice(rows, runs):
        try:
            uri = _figure(r, m.label, (5.0, 65.0))
        except Exception as e:
            parts.append(f"<p>{_f(m.label)}: no figure ({html.escape(str(e))})</p>")
            continue
        parts.append(f"<h3>{_f(m.label)}</h3><img src='{uri}' width=900>")
    out = Path(matrix_dir) / "outage.html"
    out.write_text("\n".join(parts))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python3 -m analysis.outage RUN_OR_MATRIX_DIR", file=sys.stderr)
        return 2
    p = Path(args[0])
    if (p / "result.json").is_file():
        print(json.dumps(run_metrics(p).to_dict(), indent=1))
    else:
        page = study_page(p)
        if page is None:
            print(f"{p}: no runs of scenarios/outage.yaml", file=sys.stderr)
            return 2
        print(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
