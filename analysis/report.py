"""Self-contained HTML report of one run directory.

`analyze_run` (re-exported from analysis.run) writes RUN/analysis.json;
`write_report` renders RUN/report.html with every image embedded as a data:
URI, so the file can be mailed or archived alone.  write_report redraws all
graphs from RUN/analysis/<vantage>/*.xpl (re-running tcptrace on
RUN/captures/<vantage>.pcap when those are missing), so a stored run can be
re-reported on any machine with tcptrace and matplotlib, without the testbed.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
from pathlib import Path
from typing import Any

from satbed.core.files import write_text
from satbed.core.proc import REPO_ROOT
from satbed.results.metrics import read_analysis

from . import counters, leo, traffic
from .run import VANTAGES, _classic_pcap, analyze_run, capture_paths, configured_window, load_json, run_window
from .tsg import Window, draw_from_xpl, generate_xplot

__all__ = ["analyze_run", "write_report"]

# (label, DirectionMetrics field, formatter)
METRIC_ROWS: list[tuple[str, str, str]] = [
    ("throughput (tcptrace)", "throughput_bps", "mbps"),
    ("unique bytes", "unique_bytes", "int"),
    ("data bytes", "data_bytes", "int"),
    ("data packets", "data_pkts", "int"),
    ("tcptrace retransmitted bytes (seen twice here)", "rexmt_bytes", "int"),
    ("tcptrace retransmitted packets (seen twice here)", "rexmt_pkts", "int"),
    ("total packets", "total_pkts", "int"),
    # tcptrace's RTT: never-retransmitted segments only (the overview table has
    # the figure from every ACK).
    ("tcptrace RTT samples", "rtt_samples", "int"),
    ("tcptrace RTT min (ms)", "rtt_min_ms", "float"),
    ("tcptrace RTT avg (ms)", "rtt_avg_ms", "float"),
    ("tcptrace RTT max (ms)", "rtt_max_ms", "float"),
    ("tcptrace RTT stdev (ms)", "rtt_stdev_ms", "float"),
    ("advertised window max (bytes)", "win_max", "int"),
    ("advertised window avg (bytes)", "win_avg", "int"),
    ("window scale", "window_scale", "int"),
    ("ACKs with a SACK option sent", "sack_pkts", "int"),
    ("max SACK blocks per ACK", "max_sack_blocks_per_ack", "int"),
    ("zero-window probes", "zwnd_probe_pkts", "int"),
    ("zero-window advertisements", "zero_win_adv", "int"),
    ("duplicate ACKs (for this data)", "dup_acks", "int"),
    ("triple duplicate ACKs", "triple_dupacks", "int"),
    ("max retransmissions of a segment", "max_retrans", "int"),
    ("out-of-order packets", "outoforder_pkts", "int"),
    ("first packet (UTC)", "first_packet", "time"),
    ("last packet (UTC)", "last_packet", "time"),
]

GRAPH_TITLES = [
    ("tsg_window", "Time-sequence graph, zoomed window"),
    ("tsg_full", "Time-sequence graph, whole transfer"),
    ("tput", "Throughput over time"),
    ("rtt", "RTT of every ACK over time (tcptrace's samples for runs analysed before)"),
]

CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #202020; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #999; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 2px 8px; text-align: left; vertical-align: top; }
th { background: #eee; } td.num { text-align: right; font-family: monospace; }
.error { color: #a00000; font-weight: bold; }
figure { margin: 1em 0; } figcaption { font-size: 0.9em; color: #444; }
img { max-width: 100%; border: 1px solid #444; }
summary h2 { display: inline; border: none; } details { margin-top: 1.2em; }
p.lead { font-size: 1.1em; } td.bad { color: #a00000; }
.graphs { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 0.8em; }
"""


# Keys whose float values are epoch seconds (config, result and analysis JSON).
TIME_KEYS = {"started", "finished", "start", "first_packet", "last_packet", "sender_end",
             "receiver_end", "last_ack_at_vantage", "first_retransmission", "window_start"}


def _is_epoch(key: str, value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and (key in TIME_KEYS or key.endswith("_at")) and 1e9 < float(value) < 1e10)


def _fmt(value: Any, kind: str = "auto") -> str:
    if value is None:
        return "NA"
    if kind == "mbps":
        return f"{value / 1e6:.3f} Mbit/s"
    if kind == "time":
        return _dt.datetime.fromtimestamp(value, _dt.timezone.utc).strftime(
            "%Y-%m-%d %H:%M:%S.%f")
    if kind == "int" and isinstance(value, (int, float)):
        return f"{int(value):,}"
    if kind == "float" and isinstance(value, (int, float)):
        return f"{value:.1f}"
    if isinstance(value, float):
        # Never scientific notation: 1.79537e+09 hides both times and byte counts.
        if abs(value) >= 1e5:
            return f"{value:,.0f}"
        return f"{value:.6g}" if abs(value) >= 1e-4 or value == 0 else f"{value:.3e}"
    return str(value)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _value_table(data: Any) -> str:
    """Any JSON value as (nested) tables: dicts become key/value rows."""
    if isinstance(data, dict):
        if not data:
            return "<em>empty</em>"
        rows = "".join(f"<tr><th>{_e(k)}</th><td>"
                       f"{_e(_fmt(v, 'time') + ' UTC') if _is_epoch(str(k), v) else _value_table(v)}"
                       f"</td></tr>" for k, v in data.items())
        return f"<table>{rows}</table>"
    if isinstance(data, list):
        if data and all(not isinstance(v, (dict, list)) for v in data):
            return _e(", ".join(_fmt(v) for v in data))
        rows = "".join(f"<tr><td>{_value_table(v)}</td></tr>" for v in data)
        return f"<table>{rows}</table>" if rows else "<em>empty</em>"
    return _e(_fmt(data))


def _json_section(title: str, data: dict[str, Any] | None, problem: str | None) -> str:
    """A JSON file as tables, folded: the report opens with results, not settings."""
    body = _value_table(data) if data is not None else f'<p class="error">{_e(problem)}</p>'
    return f"<details><summary><h2>{_e(title)}</h2></summary>\n{body}\n</details>\n"


def _metrics_table(main: dict[str, Any]) -> str:
    a2b, b2a = main["a2b"], main["b2a"]
    head = (f"<tr><th>metric</th><th>{_e(a2b['src'])} &rarr; {_e(a2b['dst'])}</th>"
            f"<th>{_e(b2a['src'])} &rarr; {_e(b2a['dst'])}</th></tr>")
    rows = "".join(
        f"<tr><th>{_e(label)}</th><td class=num>{_e(_fmt(a2b.get(f), kind))}</td>"
        f"<td class=num>{_e(_fmt(b2a.get(f), kind))}</td></tr>"
        for label, f, kind in METRIC_ROWS)
    return f"<table>{head}{rows}</table>"


def _spoofing_table(st: dict[str, Any] | None) -> str:
    if not st:
        return "<p>Sender/receiver-view throughput: not available (no data or no final ACK).</p>"
    rows = [
        ("data bytes (acknowledged)", _fmt(st["data_bytes"], "int")),
        ("sender view: until last ACK received", f"{_fmt(st['sender_bps'], 'mbps')} "
                                                 f"over {st['sender_view_s']:.3f} s"),
        ("receiver view: until last ACK sent", f"{_fmt(st['receiver_bps'], 'mbps')} "
                                               f"over {st['receiver_view_s']:.3f} s"),
        ("RTT vantage &harr; sender (ms)", f"{st['rtt_vantage_sender_ms']:.3f}"),
        ("RTT vantage &harr; receiver (ms)", f"{st['rtt_vantage_receiver_ms']:.3f}"),
        ("method", st["method"]),
    ]
    body = "".join(f"<tr><th>{k}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return ("<h4>Throughput as the TCP spoofing study defines it</h4>"
            f"<table>{body}</table>")


def _connection_list(conns: list[dict[str, Any]]) -> str:
    head = ("<tr><th>#</th><th>host a</th><th>host b</th><th>complete</th>"
            "<th>data bytes a&rarr;b</th><th>data bytes b&rarr;a</th>"
            "<th>rexmt pkts a&rarr;b</th><th>rexmt pkts b&rarr;a</th>"
            "<th>throughput a&rarr;b</th><th>throughput b&rarr;a</th></tr>")
    rows = "".join(
        f"<tr><td>{c['index']}</td><td>{_e(c['host_a'])}</td><td>{_e(c['host_b'])}</td>"
        f"<td>{'yes' if c['complete'] else 'no'}</td>"
        f"<td class=num>{_fmt(c['a2b']['data_bytes'], 'int')}</td>"
        f"<td class=num>{_fmt(c['b2a']['data_bytes'], 'int')}</td>"
        f"<td class=num>{_fmt(c['a2b']['rexmt_pkts'], 'int')}</td>"
        f"<td class=num>{_fmt(c['b2a']['rexmt_pkts'], 'int')}</td>"
        f"<td class=num>{_fmt(c['a2b']['throughput_bps'], 'mbps')}</td>"
        f"<td class=num>{_fmt(c['b2a']['throughput_bps'], 'mbps')}</td></tr>"
        for c in conns)
    return f"<table>{head}{rows}</table>"


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{_e(path.name)}" src="data:image/png;base64,{data}">'


def _relative_xpl(outdir: Path) -> bool:
    """Stored by an older satbed with tcptrace -zx: x restarts at each capture."""
    for p in outdir.glob("*_tsg.xpl"):
        return not p.read_text(errors="replace")[:20].startswith("timeval")
    return True


def redraw(run: Path, vantage: str, entry: dict[str, Any], window: Window | None,
           origin: float | None = None) -> tuple[dict[str, str], str | None]:
    """Redraw a vantage's PNGs from stored .xpl files (or its capture)."""
    main = entry.get("main")
    if not main:
        return {}, None
    outdir = run / "analysis" / vantage
    data = main[main.get("data_direction", "a2b")]
    try:
        if _relative_xpl(outdir):
            pcap = capture_paths(run).get(vantage)
            if pcap is not None:
                generate_xplot(_classic_pcap(pcap, outdir), outdir, main["index"])
            elif not list(outdir.glob("*_tsg.xpl")):
                return {}, "no stored .xpl files and no capture to regenerate them"
        return draw_from_xpl(outdir, data["src"], data["dst"], window, origin), None
    except Exception as e:  # one vantage's drawing problem must not lose the report
        return {}, f"{type(e).__name__}: {e}"


def _vantage_section(run: Path, vantage: str, entry: dict[str, Any],
                     window: Window | None, origin: float | None = None) -> str:
    parts = [f"<h3 id=\"vantage-{_e(vantage)}\">Vantage {_e(vantage)}</h3>"]
    if "udp" in entry:
        parts.append(_udp_table(entry))
        return "\n".join(parts)
    if "error" in entry:
        parts.append(f'<p class="error">{_e(entry["error"])}</p>')
        partial = entry.get("partial")
        if partial and partial.get("main"):
            parts.append("<p>Partial metrics up to the damage (they undercount):</p>")
            parts.append(_metrics_table(partial["main"]))
        return "\n".join(parts)
    main = entry["main"]
    parts.append(f"<p>Capture <code>{_e(entry.get('capture', ''))}</code>: "
                 f"{_fmt(entry.get('packets'), 'int')} packets, "
                 f"{entry.get('connections')} TCP connection(s). Main connection "
                 f"#{main['index']} ({_e(main['host_a'])} &harr; {_e(main['host_b'])}), "
                 f"data direction {_e(main['data_direction'])}, "
                 f"SACK blocks seen: {_e(_fmt(main.get('sack_blocks_seen')))}.</p>")
    parts.append(_metrics_table(main))
    parts.append(_spoofing_table(main.get("spoofing_throughput")))
    parts.append("<h4>All connections</h4>")
    parts.append(_connection_list(entry.get("connection_list", [])))
    graphs, problem = redraw(run, vantage, entry, window, origin)
    entry["graphs"] = graphs
    if problem:
        parts.append(f'<p class="error">graphs: {_e(problem)}</p>')
    outdir = run / "analysis" / vantage
    for key, caption in GRAPH_TITLES:
        name = graphs.get(key)
        if not name or not (outdir / name).is_file():
            continue
        if key == "tsg_window":
            caption += (f" ({float(graphs['window_duration_s']):g} s from "
                        f"{float(graphs['window_start_s']):.3f} s after the run's first packet"
                        + (f", {_fmt(float(graphs['window_start']), 'time')[11:23]} UTC"
                           if graphs.get("window_start") and origin is not None else "")
                        + ")")
        parts.append(f"<figure>{_img(outdir / name)}<figcaption>{_e(vantage)}: "
                     f"{_e(caption)}</figcaption></figure>")
    return "\n".join(parts)


def _testbed_sections(run: Path) -> list[str]:
    """Background traffic and router counters, where the run has them."""
    return [s for s in (traffic.report_section(str(run)), counters.report_section(str(run))) if s]


def _udp_table(entry: dict[str, Any]) -> str:
    udp = entry["udp"]
    rows = [[_e(f["src"]) + " &rarr; " + _e(f["dst"]), _fmt(f["datagrams"], "int"),
             _fmt(f["payload_bytes"], "int"), f"{f['duration_s']:.3f}", _fmt(f["rate_bps"], "mbps"),
             _fmt(f["first_packet"], "time")[11:], _fmt(f["last_packet"], "time")[11:]]
            for f in udp["flows"]]
    head = ("<tr><th>flow</th><th>datagrams</th><th>payload bytes</th><th>duration (s)</th>"
            "<th>wire rate</th><th>first (UTC)</th><th>last (UTC)</th></tr>")
    body = "".join("<tr>" + "".join(f"<td class=num>{c}</td>" for c in r) + "</tr>" for r in rows)
    return (f"<p>UDP capture (no TCP): {_fmt(udp['datagrams'], 'int')} datagrams in "
            f"{len(udp['flows'])} flow(s). Rates are payload on the wire, retransmitted "
            f"frames included.</p><table>{head}{body}</table>")


# (result.json key, label, formatter) for the headline table, in this order.
HEADLINE = [
    ("integrity", "integrity (SHA-256)", "auto"),
    ("prefix_integrity", "integrity of the bytes that arrived", "auto"),
    ("bytes", "bytes delivered", "int"),
    ("seconds", "transfer time (s)", "float3"),
    ("goodput_bps", "goodput (application)", "mbps"),
    ("tcp_connect_ms", "TCP connect (ms, client probe)", "float"),
    ("tcp_handshake_ms", "TCP handshake (ms, capture)", "float"),
    ("cpu_client_s", "CPU of the client command (s)", "float3"),
    ("cpu_server_s", "CPU of the server during the transfer (s)", "float3"),
    ("error", "error", "auto"),
]


def _headline(config: dict[str, Any] | None, result: dict[str, Any] | None) -> str:
    """What a researcher looks for first: the setup in one line, then the outcome."""
    cfg = config or {}
    bits = [f"{k} {_e(cfg[k])}" for k in ("client", "pep", "direction") if cfg.get(k) is not None]
    link = cfg.get("link") if isinstance(cfg.get("link"), dict) else {}
    ab, ba = link.get("a_to_b") or {}, link.get("b_to_a") or {}
    if isinstance(ab.get("delay_ms"), (int, float)) and isinstance(ba.get("delay_ms"), (int, float)):
        bits.append(f"RTT {ab['delay_ms'] + ba['delay_ms']:g} ms")
    if ab.get("ber") is not None:
        bits.append(f"BER {_e(ab['ber'])}")
    if ab.get("rate_bps"):
        bits.append(f"{ab['rate_bps'] / 1e6:g} Mbit/s")
    if cfg.get("size_bytes"):
        bits.append(f"{_fmt(cfg['size_bytes'], 'int')} bytes")
    if cfg.get("time_limit_s"):
        bits.append(f"time limit {_e(cfg['time_limit_s'])} s")
    parts = [f'<p class="lead">{", ".join(bits) or "configuration unknown"}</p>']
    res = result or {}
    rows = []
    for key, label, kind in HEADLINE:
        if res.get(key) is None:
            continue
        v = res[key]
        text = f"{v:.3f}" if kind == "float3" and isinstance(v, (int, float)) else _fmt(v, kind)
        # A time-limited transfer is incomplete by design; its prefix check is the verdict.
        bad = key == "error" or (key in ("integrity", "prefix_integrity") and v != "ok"
                                 and not (key == "integrity" and res.get("time_limited")))
        cls = ' class="bad"' if bad else " class=num"
        rows.append(f"<tr><th>{_e(label)}</th><td{cls}>{_e(text)}</td></tr>")
    if res.get("started") and res.get("finished"):
        rows.append(f"<tr><th>run (UTC)</th><td>{_e(_fmt(res['started'], 'time')[:19])} to "
                    f"{_e(_fmt(res['finished'], 'time')[11:19])}</td></tr>")
    parts.append(f"<table>{''.join(rows)}</table>" if rows else "<p>No result recorded.</p>")
    return "<h2>Results</h2>\n" + "\n".join(parts)


def _end_to_end_section(e2e: dict[str, Any] | None) -> str:
    if not e2e:
        return ""
    rows = [
        ("data bytes acknowledged", _fmt(e2e["data_bytes"], "int")),
        ("sender view: until the sender got the last ACK",
         f"{_fmt(e2e['sender_bps'], 'mbps')} over {e2e['sender_view_s']:.3f} s"),
        ("receiver view: until the receiver sent the last ACK",
         f"{_fmt(e2e['receiver_bps'], 'mbps')} over {e2e['receiver_view_s']:.3f} s"),
        ("transfer complete in the captures", "yes" if e2e.get("complete") else
         "no: cut short, acknowledged bytes only"),
        ("method", e2e["method"]),
    ]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return ("<h3>End to end, as the TCP spoofing study measures it</h3>"
            "<p>From the initiator's SYN to the last ACK at each end host, across the "
            "LAN captures (one clock): behind a split PEP a single capture only sees "
            f"its own segment.</p><table>{body}</table>")


def _overview(analysis: dict[str, Any], order: list[str]) -> str:
    """One row per vantage: the figures to compare along the path."""
    head = ["vantage", "data", "throughput (unique bytes / connection time)",
            "sender view", "receiver view", "retransmitted pkts", "RTT samples",
            "RTT min / avg / max (ms), every ACK", "tcptrace RTT avg / max (ms)",
            "SACK blocks (ACKs with SACK)", "complete"]
    rows = []
    for v in order:
        entry = analysis[v]
        link = f'<a href="#vantage-{_e(v)}">{_e(v)}</a>'
        if "udp" in entry:
            top = entry["udp"]["flows"][0] if entry["udp"]["flows"] else None
            rows.append([link, f"UDP {_e(top['src'])} &rarr; {_e(top['dst'])}" if top else "UDP",
                         _e(_fmt(top["rate_bps"] if top else None, "mbps")) + " (wire)"]
                        + [""] * (len(head) - 3))
            continue
        main = entry.get("main")
        if not main:
            rows.append([link, f'<span class="error">{_e(entry.get("error", "no data"))}</span>']
                        + [""] * (len(head) - 2))
            continue
        sm = main["summary"]
        rtt = main.get("rtt") or {}
        sack = main.get("sack") or {}

        def ms(x: Any) -> str:
            return "NA" if x is None else f"{x:.1f}"
        rows.append([
            link, f"{_e(sm['data_src'])} &rarr; {_e(sm['data_dst'])}",
            _e(_fmt(sm.get("throughput_bps"), "mbps")),
            _e(_fmt(sm.get("sender_view_bps"), "mbps")),
            _e(_fmt(sm.get("receiver_view_bps"), "mbps")),
            _e(_fmt(sm.get("rexmt_pkts"), "int")),
            _e(_fmt(rtt.get("samples"), "int")),
            f"{ms(rtt.get('min_ms'))} / {ms(rtt.get('avg_ms'))} / {ms(rtt.get('max_ms'))}",
            f"{ms(sm.get('rtt_tcptrace_avg_ms'))} / {ms(sm.get('rtt_tcptrace_max_ms'))}",
            f"{_fmt(sack.get('blocks'), 'int')} ({_fmt(sack.get('acks_with_sack'), 'int')})",
            "yes" if sm.get("complete_transfer") else
            ("no (cut short)" if sm.get("complete_transfer") is False else "NA"),
        ])
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td class=num>{c}</td>" for c in r) + "</tr>" for r in rows)
    return ("<h3>Per capture point</h3><p>Main connection at each vantage (the one carrying "
            "the most data). RTT from every ACK is measured the way tshark's "
            "tcp.analysis.ack_rtt is (a retransmitted segment counts from its first "
            "transmission); tcptrace's own RTT keeps never-retransmitted segments only. "
            f"Throughput in bits per second.</p><table><tr>{th}</tr>{body}</table>")


def write_report(run_dir: Path | str, window: Window | None = None) -> Path:
    """Write RUN/report.html and return its path.  `window` is seconds from the
    run's first captured packet; one window is drawn for every vantage."""
    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"run directory not found: {run}")
    result, result_problem = load_json(run / "result.json")
    stored = read_analysis(str(run)) or {}
    analysis = stored.get("analysis")
    present = {v for v, p in capture_paths(run).items() if p is not None}
    if not isinstance(analysis, dict) or not present <= set(analysis) or _stale(analysis):
        # Graphs are drawn below in any case; skip them here to avoid doing it twice.
        analysis = analyze_run(run, graphs=False, window=window)
        stored = read_analysis(str(run)) or {}
    if window is None:
        window = configured_window(run)
    origin, window = run_window(analysis, window)
    config, config_problem = load_json(run / "config.json")
    env, env_problem = load_json(run / "environment.json")
    # The run's figures and the analysis' own (connect time, end-to-end views)
    # together; an older run's result.json carried both.
    metrics = {**{k: v for k, v in (result or {}).items() if k != "analysis"},
               **{k: v for k, v in stored.items() if k != "analysis"}}

    order = [v for v in VANTAGES if v in analysis] + sorted(set(analysis) - set(VANTAGES))
    sections = [
        _headline(config, metrics if result is not None else None),
        _end_to_end_section(metrics.get("end_to_end_throughput")),
        _overview(analysis, order),
        "<h2>Per vantage: metrics and graphs</h2>",
        "<p>Metrics from tcptrace -l -r per capture point. All graphs share one "
        "clock (time of day, UTC); the zoomed window covers the same absolute "
        "time at every vantage.</p>",
    ]
    # Over a link with a profile: RTT, goodput and pepd's buffer over its time, handovers marked.
    sections.insert(1, leo.report_section(run))
    sections += [_vantage_section(run, v, analysis[v], window, origin) for v in order]
    sections += _testbed_sections(run)
    sections += [
        _json_section("All result metrics", metrics if result is not None else None,
                      result_problem),
        _json_section("Configuration", config, config_problem),
        _json_section("Environment", env, env_problem),
    ]
    title = f"satbed run {run.resolve().name}"
    doc = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
           f"<style>{CSS}</style></head><body>\n<h1>{_e(title)}</h1>\n"
           f"<p>Generated {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M:%S')} "
           f"UTC from <code>{_e(run.resolve())}</code>.</p>\n" + _docs_line()
           + "\n".join(s for s in sections if s) + "\n</body></html>\n")
    # A report writes its page and its images only: the stored metrics stay as measured.
    out = run / "report.html"
    write_text(out, doc)
    return out


# The docs pages that explain this report, linked as files of the checkout
# that wrote it (a report is a file on disk, read without the docs site).
DOCS = (("docs/guide/analysis.md", "the metrics, graphs and this report"),
        ("docs/guide/results.md", "the run directory's files"))


def _docs_line() -> str:
    links = [f'<a href="{_e((Path(REPO_ROOT) / rel).as_uri())}"><code>{_e(rel)}</code></a> ({_e(what)})'
             for rel, what in DOCS]
    return f"<p>What this report shows: {'; '.join(links)}.</p>\n"


def _stale(analysis: dict[str, Any]) -> bool:
    """Stored by an older satbed: no RTT, SACK and retransmissions of its own
    yet, or a UDP capture recorded as an error."""
    for entry in analysis.values():
        if not isinstance(entry, dict):
            continue
        if entry.get("main") and "retransmissions" not in entry["main"]:
            return True
        if "no TCP packets traced" in str(entry.get("error", "")):
            return True
    return False
