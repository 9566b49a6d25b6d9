"""The LEO view of one run over a link with a profile: RTT, goodput and the
PEPs' buffers over the profile's time, with its handovers marked.

A run's profile clock starts at result.json's schedule_clock_wall_s (satemu
starts every link schedule with the main flow), so a sample at epoch E sits
at profile time E - that. The series, each from stored files only:

- RTT: the ping client's echoes (RUN/ping_echoes.csv) or, for a TCP run,
  the RTT of every ACK at the sender's satellite-side vantage
  (RUN/analysis/<vantage>/rtt_every_ack.csv), beside twice the profile's
  one-way delay (the two directions' delays added where they differ);
- goodput: new data reaching the receiver's LAN capture, in bins;
- buffer: the bytes each pepd held (RUN/pep/<node>/buffer.jsonl, written
  with pep option trace_interval), its connections added up;
- handovers: the instants the profile's handovers_s comment line gives
  (satbed leo-profile writes it; satbed/model/linkprofile.py).

`report_section` is the run report's part; `figure` draws it as PNG bytes."""

from __future__ import annotations

import bisect
import csv
import html
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from satbed.backends.clients.ping import ECHOES_FILE, ECHOES_HEADER
from satbed.core.errors import SatbedError
from satbed.core.files import read_regular
from satbed.model import linkprofile

from .figures import data_uri, png, pyplot
from .outage import data_flow
from .pcap import PcapError
from .run import RTT_SAMPLES_CSV

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURE = "leo_timeline.png"     # RUN/analysis/leo/FIGURE
MAX_SERIES_BYTES = 64 << 20      # a day of echoes or a large transfer's ACKs fit many times over
BUFFER_STEP_S = 0.1


@dataclass
class Timeline:
    origin: float                                   # epoch seconds of profile time 0
    profile: str
    handovers: list[float] | None                   # None: the profile does not say
    expected: list[tuple[float, float]]             # (profile s, RTT ms the profile gives from then on)
    rtt: list[tuple[float, float]] = field(default_factory=list)
    rtt_source: str = ""
    goodput: list[tuple[float, float]] = field(default_factory=list)   # (profile s, bit/s) per bin
    goodput_source: str = ""
    buffer: dict[str, list[tuple[float, float]]] = field(default_factory=dict)   # node -> (profile s, bytes)
    notes: list[str] = field(default_factory=list)


def read_echoes(path: str) -> list[tuple[int, float, float]]:
    """(seq, sent epoch s, RTT ms) of a ping echoes file, checked whole:
    anything else is one SatbedError line naming the file and the line."""
    rows = _rows(_text(path, "ping echoes file"))
    if not rows or tuple(c.strip() for c in rows[0]) != ECHOES_HEADER:
        raise SatbedError(f"{path}: line 1: the header is not {','.join(ECHOES_HEADER)}")
    out = []
    for n, row in enumerate(rows[1:], 2):
        if len(row) != 3:
            raise SatbedError(f"{path}: line {n}: {len(row)} fields, not 3")
        try:
            seq, sent, rtt = int(row[0]), float(row[1]), float(row[2])
        except ValueError:
            raise SatbedError(f"{path}: line {n}: not a sequence number, a time and an RTT") from None
        if seq < 0 or not math.isfinite(sent) or sent < 0 or not math.isfinite(rtt) or rtt < 0:
            raise SatbedError(f"{path}: line {n}: a negative or non-finite value")
        out.append((seq, sent, rtt))
    return out


def read_rtt_samples(path: str) -> list[tuple[float, float]]:
    """(epoch s, RTT ms) of an analysis' rtt_every_ack.csv, checked whole."""
    rows = _rows(_text(path, "RTT samples file"))
    if not rows or [c.strip() for c in rows[0]] != ["epoch_s", "rtt_ms"]:
        raise SatbedError(f"{path}: line 1: the header is not epoch_s,rtt_ms")
    out = []
    for n, row in enumerate(rows[1:], 2):
        try:
            t, v = (float(c) for c in row)
        except ValueError:
            raise SatbedError(f"{path}: line {n}: not two numbers") from None
        if not (math.isfinite(t) and math.isfinite(v)) or v < 0:
            raise SatbedError(f"{path}: line {n}: a non-finite time or a negative RTT")
        out.append((t, v))
    return out


def read_buffer(path: str) -> list[tuple[float, int, float]]:
    """(epoch s, connection id, bytes held) of a pepd buffer.jsonl, checked whole."""
    out = []
    for n, line in enumerate(_text(path, "pepd buffer trace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            t, cid, held = float(rec["t"]), rec["id"], float(rec.get("occupancy_bytes") or 0)
        except (ValueError, KeyError, TypeError, RecursionError):
            raise SatbedError(f"{path}: line {n}: not a buffer sample (t, id, occupancy_bytes)") from None
        if not isinstance(cid, int) or isinstance(cid, bool) or not math.isfinite(t) or not math.isfinite(held) \
                or held < 0:
            raise SatbedError(f"{path}: line {n}: not a buffer sample (t, id, occupancy_bytes)")
        out.append((t, cid, held))
    return out


def _rows(text: str) -> list[list[str]]:
    """Comma-separated cells, line by line: these files are written
    without quoting, and a csv reader would stop on a stray carriage return."""
    return [line.split(",") for line in text.splitlines()]


def _text(path: str, what: str) -> str:
    try:
        return read_regular(path, what, MAX_SERIES_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise SatbedError(f"{path}: not UTF-8 text") from None


def load_object(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise SatbedError(f"{path}: {e}") from None
    if not isinstance(doc, dict):
        raise SatbedError(f"{path}: not a JSON object")
    return doc


def link_profiles(config: dict) -> tuple[str, str] | None:
    """The satellite link's profile files (a to b, b to a) from a run's
    config.json, or None for a link without one. The node named sat first,
    then the single link."""
    cfg = config.get("config", config)
    links = cfg.get("links") if isinstance(cfg.get("links"), dict) else {}
    candidates = [v for _, v in sorted(links.items(), key=lambda kv: kv[0] != "sat")]
    if isinstance(cfg.get("link"), dict):
        candidates.append(cfg["link"])
    for link in candidates:
        if not isinstance(link, dict):
            continue
        ab, ba = link.get("a_to_b") or {}, link.get("b_to_a") or {}
        if ab.get("profile") or ba.get("profile"):
            return str(ab.get("profile") or ba.get("profile")), str(ba.get("profile") or ab.get("profile"))
    return None


def profile_delays(path: str) -> list[tuple[float, float]]:
    """The profile's one-way delay steps (t_s, ms), after linkprofile.check."""
    return profile_steps(path, "delay_ms")


def profile_steps(path: str, column: str) -> list[tuple[float, float]]:
    """The steps (t_s, value) a CSV profile's column sets (up as 1 or 0),
    after linkprofile.check; [] where the profile has no such column."""
    linkprofile.check(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.strip().startswith("["):
        return [(float(p["t_s"]), float(p[column])) for p in json.loads(text) if p.get(column) is not None]
    rows = [r for r in csv.reader(text.splitlines(), skipinitialspace=True) if r and not r[0].startswith("#")]
    head = [h.strip() for h in rows[0]]
    if column not in head:
        return []
    t, c = head.index("t_s"), head.index(column)
    cell = (lambda v: 1.0 if v.strip().lower() in ("true", "1", "t") else 0.0) if column == "up" else float
    return [(float(r[t]), cell(r[c])) for r in rows[1:] if r[c].strip()]


def delay_at(steps: list[tuple[float, float]], t: float) -> float | None:
    """The step's value in force at profile time t (the first before it starts)."""
    if not steps:
        return None
    i = bisect.bisect_right([s for s, _ in steps], t) - 1
    return steps[max(i, 0)][1]


def timeline(run_dir: str | Path) -> Timeline | None:
    """The run's LEO series, or None for a run whose link has no profile."""
    run = Path(run_dir)
    config = load_object(run / "config.json")
    profiles = link_profiles(config)
    if profiles is None:
        return None
    result = load_object(run / "result.json")
    origin = result.get("schedule_clock_wall_s")
    if not isinstance(origin, (int, float)) or isinstance(origin, bool):
        raise SatbedError(f"{run / 'result.json'}: no schedule_clock_wall_s: the profile's clock is unknown")
    ab, ba = (profile_delays(p) for p in profiles)
    times = sorted({t for t, _ in ab} | {t for t, _ in ba})
    expected = [(t, (delay_at(ab, t) or 0) + (delay_at(ba, t) or 0)) for t in times]
    tl = Timeline(float(origin), profiles[0], linkprofile.handovers(profiles[0]), expected)
    if tl.handovers is None:
        tl.notes.append("the profile names no handovers (made from a trace, or not by satbed leo-profile)")
    cfg = config.get("config", config)
    _rtt(run, cfg, tl)
    _goodput(run, cfg, tl)
    for path in sorted((run / "pep").glob("*/buffer.jsonl")):
        tl.buffer[path.parent.name] = _held(read_buffer(str(path)), tl.origin)
    return tl


def _rtt(run: Path, cfg: dict, tl: Timeline) -> None:
    if (run / ECHOES_FILE).is_file():
        tl.rtt = [(sent - tl.origin, rtt) for _, sent, rtt in read_echoes(str(run / ECHOES_FILE))]
        tl.rtt_source = "ping's echoes (by send time)"
        return
    # The sender's satellite-side vantage: its RTT is the satellite leg's
    # and the receiver side's, behind a split PEP as well as without one.
    order = ("wan_b", "wan_a", "lan_b", "lan_a") if cfg.get("direction", "download") == "download" \
        else ("wan_a", "wan_b", "lan_a", "lan_b")
    for v in order:
        path = run / "analysis" / v / RTT_SAMPLES_CSV
        if path.is_file():
            tl.rtt = [(t - tl.origin, ms) for t, ms in read_rtt_samples(str(path))]
            tl.rtt_source = f"every ACK at {v} (by the ACK's time)"
            return
    tl.notes.append("no RTT samples: no ping echoes, and no analysed TCP capture")


def _goodput(run: Path, cfg: dict, tl: Timeline) -> None:
    """New data at the receiver's LAN capture, binned."""
    download = cfg.get("direction", "download") == "download"
    vantage = "lan_a" if download else "lan_b"
    pcap = run / "captures" / f"{vantage}.pcap"
    sender = _sender_ip(cfg, download)
    if not pcap.is_file() or sender is None:
        tl.notes.append(f"no goodput: no captures/{vantage}.pcap" if sender else "no goodput: the sender is unknown")
        return
    try:
        flow = data_flow(pcap, sender)
    except (OSError, PcapError) as e:
        tl.notes.append(f"no goodput: {e}")
        return
    if not flow:
        return
    start, stop = flow[0][0], flow[-1][0]
    step = max(0.1, (stop - start) / 200)
    bins = [0.0] * (int((stop - start) / step) + 1)
    for t, n in flow:
        bins[int((t - start) / step)] += n
    tl.goodput = [(start - tl.origin + (i + 0.5) * step, 8 * b / step) for i, b in enumerate(bins)]
    tl.goodput_source = f"new data at {vantage}, {step:.3g} s bins"


def _sender_ip(cfg: dict, download: bool) -> str | None:
    """The main flow's sender: the second endpoint for a download."""
    ends = cfg.get("endpoints")
    spec = cfg.get("topology_spec") or {}
    hosts = spec.get("hosts") if isinstance(spec, dict) else None
    if not (isinstance(ends, list) and len(ends) == 2 and isinstance(hosts, dict)):
        return None
    host = hosts.get(ends[1] if download else ends[0])
    ip = host.get("ip") if isinstance(host, dict) else None
    return str(ip).split("/")[0] if ip else None


def _held(samples: list[tuple[float, int, float]], origin: float) -> list[tuple[float, float]]:
    """Bytes held, all connections added up on a BUFFER_STEP_S grid: each
    connection samples on its own clock, so it counts with its latest
    sample until its samples end."""
    by_id: dict[int, list[tuple[float, float]]] = {}
    for t, cid, held in samples:
        by_id.setdefault(cid, []).append((t, held))
    if not by_id:
        return []
    for s in by_id.values():
        s.sort()
    t0 = min(s[0][0] for s in by_id.values())
    t1 = max(s[-1][0] for s in by_id.values())
    out = []
    for k in range(int((t1 - t0) / BUFFER_STEP_S) + 1):
        t = t0 + k * BUFFER_STEP_S
        total = 0.0
        for s in by_id.values():
            i = bisect.bisect_right(s, (t + 1e-9, math.inf)) - 1
            if i >= 0 and t - s[-1][0] <= BUFFER_STEP_S:
                total += s[i][1]
        out.append((t - origin, total))
    return out


def figure(tl: Timeline, title: str) -> bytes:
    """draw's figure as PNG bytes."""
    return png(draw(tl, title))


def draw(tl: Timeline, title: str) -> Figure:
    """RTT, goodput and buffer panels (those with data) over profile time,
    the handovers as dashed vertical lines."""
    panels = ["rtt"] + (["goodput"] if tl.goodput else []) + (["buffer"] if tl.buffer else [])
    fig, axes = pyplot().subplots(len(panels), 1, figsize=(10, 2.6 * len(panels) + 0.6), sharex=True, squeeze=False)
    xs = [t for t, _ in tl.rtt] + [t for t, _ in tl.goodput] + [t for s in tl.buffer.values() for t, _ in s]
    lo, hi = (min(xs), max(xs)) if xs else (0.0, tl.expected[-1][0] if tl.expected else 1.0)
    for ax, panel in zip(axes[:, 0], panels):
        for h in tl.handovers or []:
            if lo <= h <= hi:
                ax.axvline(h, color="tab:red", ls="--", lw=0.8, alpha=0.7)
        if panel == "rtt":
            exp = [(t, v) for t, v in tl.expected if t <= hi] or tl.expected[:1]
            if exp:
                ax.step([t for t, _ in exp] + [hi], [v for _, v in exp] + [exp[-1][1]], where="post",
                        color="0.4", lw=1, label="profile (both directions' delay)")
            ax.plot([t for t, _ in tl.rtt], [v for _, v in tl.rtt], ".", ms=3, label=tl.rtt_source or "no samples")
            ax.set_ylabel("RTT (ms)")
            ax.legend(loc="upper right", fontsize=8)
        elif panel == "goodput":
            ax.plot([t for t, _ in tl.goodput], [v / 1e6 for _, v in tl.goodput], lw=1)
            ax.set_ylabel("goodput (Mbit/s)")
        else:
            for node, s in sorted(tl.buffer.items()):
                ax.plot([t for t, _ in s], [v / 1e3 for _, v in s], lw=1, label=node)
            ax.set_ylabel("pepd buffer (kB)")
            ax.legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("seconds of the link profile (dashed: handovers)")
    axes[-1, 0].set_xlim(lo, hi if hi > lo else lo + 1)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def report_section(run_dir: str | Path) -> str:
    """The run report's LEO section (the figure embedded, also written to
    RUN/analysis/leo/FIGURE), "" for a run without a link profile, and the
    reason in one line where the series cannot be read."""
    run = Path(run_dir)
    if not (run / "config.json").is_file():
        return ""
    try:
        tl = timeline(run)
        if tl is None:
            return ""
        data = figure(tl, f"{run.resolve().name}: {os.path.basename(tl.profile)}")
    except SatbedError as e:
        return f'<h2>LEO link over time</h2><p class="error">{html.escape(str(e))}</p>'
    out = run / "analysis" / "leo"
    out.mkdir(parents=True, exist_ok=True)
    (out / FIGURE).write_bytes(data)
    marks = (f"{len(tl.handovers)} handovers from the profile's handovers_s line" if tl.handovers is not None
             else "no handovers marked")
    sources = "; ".join(s for s in (f"RTT: {tl.rtt_source}" if tl.rtt_source else "",
                                    f"goodput: {tl.goodput_source}" if tl.goodput_source else "",
                                    f"buffer: pepd on {', '.join(sorted(tl.buffer))}" if tl.buffer else "") if s)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in tl.notes)
    return (f"<h2>LEO link over time</h2><p>Profile <code>{html.escape(tl.profile)}</code>, its clock from "
            f"result.json's schedule_clock_wall_s; {html.escape(marks)}. {html.escape(sources)}.</p>"
            + (f"<ul>{notes}</ul>" if notes else "")
            + f'<figure><img alt="{FIGURE}" src="{data_uri(data)}"><figcaption>RTT, goodput and pepd\'s '
            f"buffer over the profile's time; the grey steps are the RTT the profile gives.</figcaption></figure>")
