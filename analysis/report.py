"""Self-contained HTML report of one run directory.

`analyze_run` (re-exported from analysis.run) fills result.json["analysis"];
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
import os
from pathlib import Path
from typing import Any

from satbed.files import write_text

from .run import (VANTAGES, analyze_run, capture_paths, configured_window, load_json,
                  update_result)
from .tsg import Window, draw_from_xpl, generate_xplot

__all__ = ["analyze_run", "write_report"]

# (label, DirectionMetrics field, formatter)
METRIC_ROWS: list[tuple[str, str, str]] = [
    ("throughput (tcptrace)", "throughput_bps", "mbps"),
    ("unique bytes", "unique_bytes", "int"),
    ("data bytes", "data_bytes", "int"),
    ("data packets", "data_pkts", "int"),
    ("retransmitted bytes", "rexmt_bytes", "int"),
    ("retransmitted packets", "rexmt_pkts", "int"),
    ("total packets", "total_pkts", "int"),
    ("RTT samples", "rtt_samples", "int"),
    ("RTT min (ms)", "rtt_min_ms", "float"),
    ("RTT avg (ms)", "rtt_avg_ms", "float"),
    ("RTT max (ms)", "rtt_max_ms", "float"),
    ("RTT stdev (ms)", "rtt_stdev_ms", "float"),
    ("advertised window max (bytes)", "win_max", "int"),
    ("advertised window avg (bytes)", "win_avg", "int"),
    ("window scale", "window_scale", "int"),
    ("packets with SACK blocks sent", "sack_pkts", "int"),
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
    ("rtt", "RTT samples over time"),
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
"""


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
        return f"{value:.6g}"
    return str(value)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _value_table(data: Any) -> str:
    """Any JSON value as (nested) tables: dicts become key/value rows."""
    if isinstance(data, dict):
        if not data:
            return "<em>empty</em>"
        rows = "".join(f"<tr><th>{_e(k)}</th><td>{_value_table(v)}</td></tr>"
                       for k, v in data.items())
        return f"<table>{rows}</table>"
    if isinstance(data, list):
        if data and all(not isinstance(v, (dict, list)) for v in data):
            return _e(", ".join(_fmt(v) for v in data))
        rows = "".join(f"<tr><td>{_value_table(v)}</td></tr>" for v in data)
        return f"<table>{rows}</table>" if rows else "<em>empty</em>"
    return _e(_fmt(data))


def _json_section(title: str, data: dict[str, Any] | None, problem: str | None) -> str:
    body = _value_table(data) if data is not None else f'<p class="error">{_e(problem)}</p>'
    return f"<h2>{_e(title)}</h2>\n{body}\n"


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
        ("data bytes (unique)", _fmt(st["data_bytes"], "int")),
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


def redraw(run: Path, vantage: str, entry: dict[str, Any],
           window: Window | None) -> tuple[dict[str, str], str | None]:
    """Redraw a vantage's PNGs from stored .xpl files (or its capture)."""
    main = entry.get("main")
    if not main:
        return {}, None
    outdir = run / "analysis" / vantage
    data = main[main.get("data_direction", "a2b")]
    try:
        if not list(outdir.glob("*_tsg.xpl")):
            pcap = capture_paths(run).get(vantage)
            if pcap is None:
                return {}, "no stored .xpl files and no capture to regenerate them"
            generate_xplot(pcap, outdir, main["index"])
        return draw_from_xpl(outdir, data["src"], data["dst"], window), None
    except Exception as e:  # one vantage's drawing problem must not lose the report
        return {}, f"{type(e).__name__}: {e}"


def _vantage_section(run: Path, vantage: str, entry: dict[str, Any],
                     window: Window | None) -> str:
    parts = [f"<h3>Vantage {_e(vantage)}</h3>"]
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
    graphs, problem = redraw(run, vantage, entry, window)
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
                        f"{float(graphs['window_start_s']):.3f} s)")
        parts.append(f"<figure>{_img(outdir / name)}<figcaption>{_e(vantage)}: "
                     f"{_e(caption)}</figcaption></figure>")
    return "\n".join(parts)


def _testbed_sections(run: Path) -> list[str]:
    """Background traffic and router counters, where the run has them."""
    try:
        from satbed import counters, traffic
    except ImportError:     # analysis used without satbed beside it
        return []
    return [s for s in (traffic.report_section(str(run)), counters.report_section(str(run))) if s]


def write_report(run_dir: Path | str, window: Window | None = None) -> Path:
    """Write RUN/report.html and return its path."""
    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"run directory not found: {run}")
    result, result_problem = load_json(run / "result.json")
    analysis = (result or {}).get("analysis")
    present = {v for v, p in capture_paths(run).items() if p is not None}
    if not isinstance(analysis, dict) or not present <= set(analysis):
        # Graphs are drawn below in any case; skip them here to avoid doing it twice.
        analysis = analyze_run(run, graphs=False, window=window)
        result, result_problem = load_json(run / "result.json")
    if window is None:
        window = configured_window(run)
    config, config_problem = load_json(run / "config.json")
    env, env_problem = load_json(run / "environment.json")
    metrics = {k: v for k, v in (result or {}).items() if k != "analysis"}

    order = [v for v in VANTAGES if v in analysis] + sorted(set(analysis) - set(VANTAGES))
    sections = [
        _json_section("Configuration", config, config_problem),
        _json_section("Environment", env, env_problem),
        _json_section("Result metrics", metrics if result is not None else None, result_problem),
        "<h2>Analysis</h2>",
        "<p>Metrics from tcptrace -l -r per capture point; the main connection is the "
        "one carrying the most data. Throughput in bits per second.</p>",
    ]
    sections += [_vantage_section(run, v, analysis[v], window) for v in order]
    sections += _testbed_sections(run)
    title = f"satbed run {run.resolve().name}"
    doc = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
           f"<style>{CSS}</style></head><body>\n<h1>{_e(title)}</h1>\n"
           f"<p>Generated {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M:%S')} "
           f"UTC from <code>{_e(run.resolve())}</code>.</p>\n"
           + "\n".join(sections) + "\n</body></html>\n")
    # Record what was drawn, so result.json names the PNGs that exist now.
    update_result(run, analysis)
    out = run / "report.html"
    write_text(out, doc)
    return out

