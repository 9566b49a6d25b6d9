"""Turn a run directory's captures into the "analysis" metrics.

Layout:
    RUN/captures/<vantage>.pcap   vantage in lan_a, wan_a, wan_b, lan_b (any subset; the runner's)
    RUN/result.json               the runner's; read here, never written
    RUN/analysis.json             ours: the metrics per vantage (satbed/results/metrics.py)
    RUN/analysis/<vantage>/       tcptrace outputs, xplot files, PNGs (ours)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from satbed.core.files import write_json, write_text
from satbed.results.metrics import ANALYSIS_FILE, analysis_document

from . import pcap as pcapmod
from .acks import ack_rtt, retransmissions, sack_stats
from .tcptrace import (Connection, TcptraceError, apply_csv_seconds, main_connection,
                       parse_long, run_tcptrace)
from .throughput import direction_times, spoofing_throughput
from .tsg import Window, choose_window, draw_from_xpl, generate_xplot

VANTAGES = ("lan_a", "wan_a", "wan_b", "lan_b")
TCPDUMP = "/usr/bin/tcpdump"


class CaptureError(Exception):
    """A capture cannot be analysed; the message goes into the error note."""


def capture_paths(run_dir: Path) -> dict[str, Path | None]:
    """Standard vantages (None when absent) plus any other *.pcap present."""
    cap_dir = run_dir / "captures"
    found: dict[str, Path | None] = {v: None for v in VANTAGES}
    if cap_dir.is_dir():
        for p in sorted(cap_dir.glob("*.pcap")) + sorted(cap_dir.glob("*.pcapng")):
            if p.stem not in found or found[p.stem] is None:
                found[p.stem] = p
    return found


def _classic_pcap(src: Path, outdir: Path) -> Path:
    """tcptrace 6.6.7 cannot read pcapng: convert with tcpdump when needed."""
    magic = pcapmod.file_magic(src)
    if magic is None:
        raise CaptureError(f"{src.name}: empty or shorter than a pcap header")
    if magic != pcapmod.MAGIC_PCAPNG:
        return src
    dst = outdir / (src.stem + ".converted.pcap")
    try:
        res = subprocess.run([TCPDUMP, "-r", str(src), "-w", str(dst)], capture_output=True,
                             text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CaptureError(f"{src.name}: pcapng conversion failed: {e}") from e
    if res.returncode != 0 or not dst.exists():
        raise CaptureError(f"{src.name}: pcapng conversion failed: {res.stderr.strip()}")
    return dst


RTT_SAMPLES_CSV = "rtt_every_ack.csv"


def _main_summary(conn: Connection, packets: pcapmod.TcpColumns,
                  outdir: Path | None = None) -> dict[str, Any]:
    data, rev = conn.data_direction()
    # RTT from every ACK and true SACK block counts (analysis/acks.py says why
    # tcptrace's own figures are not used for these).
    rtt = ack_rtt(packets, data.src, data.dst)
    if outdir is not None:
        # Kept for the RTT graph, which is redrawn from stored files only.
        write_text(outdir / RTT_SAMPLES_CSV, "epoch_s,rtt_ms\n" + "".join(
            f"{t:.6f},{v:.3f}\n" for t, v in rtt.series))
    sack = sack_stats(packets, data.src, data.dst)
    rexmt = retransmissions(packets, data.src, data.dst)
    d = {
        "index": conn.index,
        "host_a": conn.host_a,
        "host_b": conn.host_b,
        "complete": conn.complete,
        "first_packet": conn.first_packet,
        "last_packet": conn.last_packet,
        "elapsed_s": conn.elapsed_s,
        "data_direction": "a2b" if data is conn.a2b else "b2a",
        "a2b": conn.a2b.to_dict(),
        "b2a": conn.b2a.to_dict(),
        "rtt": rtt.to_dict(),
        "sack": sack.to_dict(),
        # The ACK side's SACKs describe the data direction's losses.
        "sack_blocks_seen": sack.blocks,
        # Where the run's zoom window goes (one window for every vantage).
        "first_retransmission": rexmt.first,
        "retransmissions": rexmt.to_dict(),
        "spoofing_throughput": None,
    }
    st = spoofing_throughput(packets, data.src, data.dst) if len(packets) else None
    if st is not None:
        d["spoofing_throughput"] = st.to_dict()
    # The few numbers charts and tables need, already oriented along the data.
    d["summary"] = {
        "data_src": data.src,
        "data_dst": data.dst,
        "throughput_bps": data.throughput_bps,
        "sender_view_bps": st.sender_bps if st else None,
        "receiver_view_bps": st.receiver_bps if st else None,
        "unique_bytes": data.unique_bytes,
        "data_bytes": data.data_bytes,
        "data_pkts": data.data_pkts,
        # The sender's retransmissions passing this point (tshark's count);
        # tcptrace's (bytes seen twice here) beside it.
        "rexmt_bytes": rexmt.bytes,
        "rexmt_pkts": rexmt.pkts,
        "rexmt_pkts_tcptrace": data.rexmt_pkts,
        "rtt_samples": rtt.samples,
        "rtt_min_ms": rtt.min_ms,
        "rtt_avg_ms": rtt.avg_ms,
        "rtt_max_ms": rtt.max_ms,
        "rtt_stdev_ms": rtt.stdev_ms,
        # tcptrace's Karn-filtered figures, kept to show the difference.
        "rtt_tcptrace_samples": data.rtt_samples,
        "rtt_tcptrace_avg_ms": data.rtt_avg_ms,
        "rtt_tcptrace_max_ms": data.rtt_max_ms,
        "receiver_win_max": rev.win_max,
        "receiver_win_avg": rev.win_avg,
        "sack_blocks_seen": sack.blocks,
        "acks_with_sack": sack.acks_with_sack,
        "complete_transfer": st.complete if st else None,
        "dup_acks": data.dup_acks,
        "zero_window_probes": data.zwnd_probe_pkts,
        "elapsed_s": conn.elapsed_s,
    }
    return d


def analyze_capture(pcap: Path, outdir: Path, graphs: bool = True,
                    window: Window | None = None,
                    origin: float | None = None) -> dict[str, Any]:
    """Metrics for one capture; raises CaptureError/TcptraceError on failure."""
    outdir.mkdir(parents=True, exist_ok=True)
    if not pcap.is_file():
        raise CaptureError(f"capture missing: {pcap}")
    src = _classic_pcap(pcap, outdir)
    try:
        summary = pcapmod.read_tcp(src)
    except pcapmod.PcapError as e:
        raise CaptureError(str(e)) from e
    if not len(summary.tcp) and len(summary.udp_columns):
        # Saratoga (and other UDP transfers): tcptrace has nothing to say.
        return {"capture": str(pcap), "packets": summary.records, "tcp_packets": 0,
                "udp": udp_view(summary.udp_columns)}
    tt = run_tcptrace(src, outdir)
    conns = parse_long(tt.long_text)
    apply_csv_seconds(conns, tt.csv.read_text(errors="replace"))
    if tt.packets_seen == 0 or not conns:
        raise CaptureError(f"{pcap.name}: no TCP packets traced ({summary.records} records read)")
    times = direction_times(summary.tcp)
    for c in conns:
        for dm in (c.a2b, c.b2a):
            dm.first_packet, dm.last_packet = times.get((dm.src, dm.dst), (None, None))
        if c.syns is None:
            c.syns = (c.a2b.syn_pkts or 0) + (c.b2a.syn_pkts or 0)
            c.fins = (c.a2b.fin_pkts or 0) + (c.b2a.fin_pkts or 0)
    main = main_connection(conns)
    assert main is not None
    out: dict[str, Any] = {
        "capture": str(pcap),
        "packets": summary.records,
        "tcp_packets": tt.packets_seen,
        "connections": len(conns),
        "main": _main_summary(main, summary.tcp, outdir),
        "connection_list": [c.to_dict() for c in conns],
        "outputs": sorted(p.name for p in outdir.iterdir() if p.is_file()),
    }
    if summary.truncated or tt.truncated:
        detail = tt.stderr.splitlines()[-1] if tt.stderr else "file ends inside a packet record"
        # Partial numbers stay available but flagged: they undercount.
        return {"error": f"truncated capture {pcap.name}: {detail}", "partial": out}
    if graphs:
        draw_graphs(out, outdir, src, window, origin)
    return out


def udp_view(datagrams: pcapmod.UdpColumns) -> dict[str, Any]:
    """Per-flow datagram counts and rates of a UDP capture, biggest flow first.

    A flow is one direction (src -> dst); its rate is payload bits over the
    time from its first to its last datagram (wire rate: Saratoga's
    retransmitted frames included, unlike the application's goodput).
    """
    d = datagrams
    rows = []
    if len(d):
        flows, seen_first, inverse = pcapmod.flows(d.src, d.sport, d.dst, d.dport, len(d.addrs))
        count = np.bincount(inverse, minlength=len(flows))
        nbytes = np.bincount(inverse, weights=d.payload, minlength=len(flows))
        first = np.full(len(flows), np.inf)
        last = np.full(len(flows), -np.inf)
        np.minimum.at(first, inverse, d.ts)
        np.maximum.at(last, inverse, d.ts)
        # Ties in size keep the order the flows first appeared in.
        for k in sorted(range(len(flows)), key=lambda k: (-nbytes[k], seen_first[k])):
            src, sport, dst, dport = flows[k].tolist()
            span = float(last[k] - first[k])
            total = int(nbytes[k])
            rows.append({"src": f"{d.addrs[src]}:{sport}", "dst": f"{d.addrs[dst]}:{dport}",
                         "datagrams": int(count[k]), "payload_bytes": total, "first_packet": float(first[k]),
                         "last_packet": float(last[k]), "duration_s": span,
                         "rate_bps": 8 * total / span if span > 0 else None})
    return {"datagrams": len(d), "flows": rows}


def draw_graphs(out: dict[str, Any], outdir: Path, pcap: Path, window: Window | None,
                origin: float | None) -> None:
    """xplot files and PNGs of a vantage's main connection, into out["graphs"]."""
    main = out["main"]
    data = main[main["data_direction"]]
    try:
        generate_xplot(pcap, outdir, main["index"])
        out["graphs"] = draw_from_xpl(outdir, data["src"], data["dst"], window, origin)
    except Exception as e:  # a drawing failure must not lose the metrics
        out["graph_error"] = f"{type(e).__name__}: {e}"
    out["outputs"] = sorted(p.name for p in outdir.iterdir() if p.is_file())


def analyze_run(run_dir: Path | str, graphs: bool = True,
                window: Window | None = None) -> dict[str, Any]:
    """Analyse every capture of a run and store the result in RUN/analysis.json.

    Returns {vantage: metrics or {"error": ...}}.  One bad capture never
    prevents the others from being analysed.  The zoomed time-sequence graph
    uses `window` (seconds from the run's first captured packet), else
    config.json's "tsg_window" {"start_s", "duration_s"}, else a window around
    the run's first retransmission: chosen once and drawn at the same absolute
    time for every vantage.
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"run directory not found: {run}")
    if window is None:
        window = configured_window(run)
    analysis: dict[str, Any] = {}
    sources: dict[str, Path] = {}
    for vantage, pcap in capture_paths(run).items():
        if pcap is None:
            analysis[vantage] = {"error": f"capture missing: captures/{vantage}.pcap"}
            continue
        outdir = run / "analysis" / vantage
        try:
            analysis[vantage] = analyze_capture(pcap, outdir, graphs=False)
            sources[vantage] = _classic_pcap(pcap, outdir)
        except (CaptureError, TcptraceError, OSError) as e:
            analysis[vantage] = {"error": str(e)}
    if graphs:
        origin, window = run_window(analysis, window)
        for vantage, src in sources.items():
            if "main" in analysis[vantage]:
                draw_graphs(analysis[vantage], run / "analysis" / vantage, src, window, origin)
    write_analysis(run, analysis)
    return analysis


def run_window(analysis: dict[str, Any],
               window: Window | None) -> tuple[float | None, Window | None]:
    """(time origin, zoom window) of a run: the origin is the earliest main-connection
    packet of any vantage; without an explicit window, one around the earliest
    retransmission any vantage saw.  (None, window) when no vantage has a main."""
    mains = [e["main"] for e in analysis.values() if isinstance(e, dict) and e.get("main")]
    firsts = [m["first_packet"] for m in mains if m.get("first_packet") is not None]
    lasts = [m["last_packet"] for m in mains if m.get("last_packet") is not None]
    if not firsts or not lasts:
        return None, window
    origin = min(firsts)
    if window is None:
        rexmts = [m["first_retransmission"] for m in mains
                  if m.get("first_retransmission") is not None]
        window = choose_window(origin, max(lasts), min(rexmts) if rexmts else None)
    return origin, window


def load_json(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(content, None) or (None, reason) for a JSON object file."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None, f"{path.name} missing"
    except (OSError, ValueError) as e:
        return None, f"{path.name} unreadable: {e}"
    if not isinstance(data, dict):
        return None, f"{path.name} is not a JSON object"
    return data, None


def configured_window(run: Path) -> Window | None:
    cfg, _ = load_json(run / "config.json")
    w = (cfg or {}).get("tsg_window")
    if not isinstance(w, dict):
        return None
    try:
        return Window(float(w.get("start_s", 0.0)), float(w.get("duration_s", 1.0)))
    except (TypeError, ValueError):
        return None


def _host_ports(run: Path) -> dict[str, str]:
    """{"lan_a": Client A's IP, "lan_b": Client B's IP}: which end host sits
    next to each LAN capture, from the run's config (empty when unknown)."""
    config, _ = load_json(run / "config.json")
    hosts = ((config or {}).get("topology_spec") or {}).get("hosts", {})
    plan = (config or {}).get("plan") or {}
    # The main flow's hosts as the runner resolved them (older runs: the chain's ends).
    ends = [plan.get("a"), plan.get("b")] if plan.get("a") else [*list(hosts)[:1], *list(hosts)[-1:]]
    if len(ends) < 2 or not all(e in hosts for e in ends):
        return {}
    out = {"lan_a": str(hosts[ends[0]].get("ip", "")).split("/")[0],
           "lan_b": str(hosts[ends[1]].get("ip", "")).split("/")[0]}
    return {k: v for k, v in out.items() if v}


def _ip(addr: Any) -> str:
    return str(addr or "").rsplit(":", 1)[0]


def handshake_from_capture(run: Path, analysis: dict[str, Any]) -> dict[str, Any] | None:
    """The main connection's connect time as its initiator saw it: SYN to
    SYN/ACK on the initiator's own port (lan_a for Client A, lan_b for Client
    B), from the capture. A split PEP answers the SYN from the LAN, so with one
    this is LAN-short; end to end it is one satellite RTT."""
    for vantage, ip in _host_ports(run).items():
        main = (analysis.get(vantage) or {}).get("main")
        if not main:
            continue
        opener = main.get("a2b") or {}
        if _ip(opener.get("src")) == ip and \
                opener.get("rtt_3whs_ms") is not None and (opener.get("syn_pkts") or 0) > 0:
            return {"tcp_handshake_ms": opener["rtt_3whs_ms"], "tcp_handshake_vantage": vantage}
    return None


def end_to_end(run: Path, analysis: dict[str, Any]) -> dict[str, Any] | None:
    """Sender- and receiver-view throughput of the whole transfer, across vantages.

    Behind a split PEP each capture sees only its own segment, so one vantage's
    views describe client <-> PEP.  All captures share one clock, and the LAN
    captures sit next to the end hosts, so the study's end-to-end figures are:
    start = the initiator's SYN on its own LAN port, sender end = the last ACK
    on the sender's LAN port, receiver end = the last ACK on the receiver's LAN
    port; bytes = what the receiver acknowledged.  Without a PEP this equals
    the single-vantage views; None when either LAN capture lacks them.
    """
    ports = _host_ports(run)
    views: dict[str, dict[str, Any]] = {}
    for vantage in ports:
        main = (analysis.get(vantage) or {}).get("main") or {}
        st = main.get("spoofing_throughput")
        if st and st.get("sender_end") is not None:
            views[vantage] = {**st, "data_src": main["summary"]["data_src"],
                              "data_dst": main["summary"]["data_dst"]}
    if len(views) < 2:
        return None
    by_ip = {ip: v for v, ip in ports.items()}
    anyview = next(iter(views.values()))
    sender_v = by_ip.get(_ip(anyview["data_src"]))
    receiver_v = by_ip.get(_ip(anyview["data_dst"]))
    init_v = by_ip.get(_ip(anyview.get("initiator")))
    if not (sender_v and receiver_v and init_v) or sender_v == receiver_v:
        return None
    snd, rcv, ini = views[sender_v], views[receiver_v], views[init_v]
    start = ini["start"]
    nbytes = rcv["data_bytes"]
    sv = snd["sender_end"] - start
    rv = rcv["receiver_end"] - start
    return {
        "data_bytes": nbytes,
        "start": start,
        "sender_end": snd["sender_end"],
        "receiver_end": rcv["receiver_end"],
        "sender_view_s": sv,
        "receiver_view_s": rv,
        "sender_bps": 8 * nbytes / sv if sv > 0 else 0.0,
        "receiver_bps": 8 * nbytes / rv if rv > 0 else 0.0,
        "complete": bool(snd.get("complete", True) and rcv.get("complete", True)),
        "method": f"start: SYN on {init_v}; sender end: last ACK on {sender_v}; "
                  f"receiver end: last ACK on {receiver_v}",
    }


def write_analysis(run: Path, analysis: dict[str, Any]) -> None:
    """Write RUN/analysis.json: the vantages' metrics, the capture's view of
    the connect time and the end-to-end views; written atomically. The
    runner's result.json is left as it wrote it."""
    extra = {**(handshake_from_capture(run, analysis) or {})}
    e2e = end_to_end(run, analysis)
    if e2e is not None:
        extra["end_to_end_throughput"] = e2e
    write_json(run / ANALYSIS_FILE, analysis_document(analysis, extra))
