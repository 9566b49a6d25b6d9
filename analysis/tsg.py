"""xplot files from tcptrace, drawn with matplotlib in xplot's style.

tcptrace -S/-T/-R write xplot input files (*_tsg.xpl, *_tput.xpl, *_rtt.xpl).
Format, as tcptrace 6.6.7 writes it:

    <x type> <y type>            first line: "dtime signed" with -zxy,
                                 "timeval signed" with wall-clock time
    title | xlabel | ylabel      the next line holds the text
    <colour>                     alone on a line: the current colour
    line x1 y1 x2 y2 [colour]
    dot|plus|box|diamond|x|invisible x y [colour]
    uarrow|darrow|larrow|rarrow x y [colour]       arrow heads
    utick|dtick|htick|vtick|ltick|rtick x y [colour]   small ticks
    text|atext|btext|ltext|rtext x y [colour]      the next line holds the
                                                   text (a = above, b = below,
                                                   l/r = left/right of x y)
    go                           end of file

A trailing colour applies to that element only.  In a time-sequence graph
tcptrace draws: white segments (darrow at the first byte, uarrow past the
last, joined by a line), red retransmissions with an "R", green ACK line,
yellow window line (ack + advertised window), green dticks for duplicate ACKs
(with the count as text), yellow uticks for repeated window advertisements,
purple SACK blocks (line between htick ends, "S"), white diamonds for pushed
segments, orange SYN/FIN markers.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from .figures import pyplot
from .tcptrace import TcptraceError, _run, TCPTRACE

if TYPE_CHECKING:
    from matplotlib.lines import Line2D

TWO_POINT = {"dot", "plus", "box", "diamond", "x", "invisible",
             "uarrow", "darrow", "larrow", "rarrow",
             "utick", "dtick", "htick", "vtick", "ltick", "rtick"}
TEXTS = {"text", "atext", "btext", "ltext", "rtext"}
COLOURS = {"white", "green", "red", "yellow", "blue", "purple", "orange",
           "magenta", "pink", "black", "gray", "grey", "cyan"}

# xplot colour names -> what they look like on xplot's black background.
PALETTE = {
    "white": "#ffffff", "green": "#00e000", "red": "#ff3030", "yellow": "#ffff00",
    "blue": "#5080ff", "purple": "#c040ff", "orange": "#ffa500", "magenta": "#ff00ff",
    "pink": "#ffb0c0", "black": "#000000", "gray": "#a0a0a0", "grey": "#a0a0a0",
    "cyan": "#00ffff",
}
BACKGROUND = "#000000"
FOREGROUND = "#d0d0d0"


# Open arrow heads and ticks in screen space, like xplot's: an open path's vertices.
OPEN_PATHS: dict[str, tuple[tuple[int, int], ...]] = {
    "darrow": ((-1, 1), (0, 0), (1, 1)),
    "uarrow": ((-1, -1), (0, 0), (1, -1)),
    "larrow": ((1, 1), (0, 0), (1, -1)),
    "rarrow": ((-1, 1), (0, 0), (-1, -1)),
    "utick": ((0, 0), (0, 1)),
    "dtick": ((0, 0), (0, -1)),
    "htick": ((-1, 0), (1, 0)),
    "vtick": ((0, -1), (0, 1)),
    "ltick": ((0, 0), (-1, 0)),
    "rtick": ((0, 0), (1, 0)),
}
POINT_MARKERS = {"dot": ".", "plus": "+", "x": "x", "box": "s", "diamond": "D"}
MARKERS = frozenset(OPEN_PATHS) | frozenset(POINT_MARKERS)


def _marker(kind: str) -> Any:
    """matplotlib's marker for an xplot point kind."""
    if kind in POINT_MARKERS:
        return POINT_MARKERS[kind]
    path = pyplot().matplotlib.path.Path
    points = OPEN_PATHS[kind]
    return path(points, [path.MOVETO] + [path.LINETO] * (len(points) - 1))


MARKER_SIZE = {"dot": 2.0, "diamond": 3.0, "box": 3.0, "plus": 4.0, "x": 4.0}
TEXT_ALIGN = {"text": ("center", "center"), "atext": ("center", "bottom"),
              "btext": ("center", "top"), "ltext": ("right", "center"),
              "rtext": ("left", "center")}


@dataclass
class Window:
    """A zoom window: `start` seconds after a time origin, `duration` seconds long.

    The origin is the run's first captured packet (every vantage shares it, so
    one window covers the same absolute time in every graph), or for a lone
    xplot file its own first x value.
    """
    start: float
    duration: float


# tcptrace's throughput for two segments with no time between them: 2^31 - 1 B/s
# (or per-microsecond values in the GB/s); never a rate a link carried.
TPUT_SENTINEL_BPS = float(2**31 - 1)


@dataclass
class Element:
    kind: str
    coords: tuple[float, ...]
    colour: str
    text: str = ""

    @property
    def xs(self) -> tuple[float, ...]:
        return self.coords[0::2]

    @property
    def ys(self) -> tuple[float, ...]:
        return self.coords[1::2]


@dataclass
class Xplot:
    xtype: str = "double"
    ytype: str = "double"
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    elements: list[Element] = field(default_factory=list)

    def bounds(self, kinds: Iterable[str] | None = None) -> tuple[float, float, float, float] | None:
        xs: list[float] = []
        ys: list[float] = []
        want = set(kinds) if kinds is not None else None
        for e in self.elements:
            if want is None or e.kind in want:
                xs.extend(e.xs)
                ys.extend(e.ys)
        if not xs:
            return None
        return min(xs), max(xs), min(ys), max(ys)


class XplotError(ValueError):
    """The text is not an xplot file."""


def parse_xplot(text: str) -> Xplot:
    lines = text.splitlines()
    if not lines:
        raise XplotError("empty xplot file")
    head = lines[0].split()
    if len(head) != 2:
        raise XplotError(f"bad xplot header: {lines[0]!r}")
    xp = Xplot(xtype=head[0], ytype=head[1])
    colour = "white"
    i = 1
    while i < len(lines):
        toks = lines[i].split()
        i += 1
        if not toks:
            continue
        cmd = toks[0]
        if cmd in ("title", "xlabel", "ylabel"):
            setattr(xp, cmd, lines[i].strip() if i < len(lines) else "")
            i += 1
            continue
        if cmd == "go":
            break
        if len(toks) == 1 and cmd in COLOURS:
            colour = cmd
            continue
        ncoord = 4 if cmd == "line" else 2 if (cmd in TWO_POINT or cmd in TEXTS) else 0
        if ncoord == 0 or len(toks) < 1 + ncoord:
            continue  # unknown command: xplot ignores what it cannot draw too
        try:
            coords = tuple(float(t) for t in toks[1:1 + ncoord])
        except ValueError:
            continue
        extra = toks[1 + ncoord:]
        ecolour = extra[0] if extra and extra[0] in COLOURS else colour
        text = ""
        if cmd in TEXTS:
            text = lines[i].strip() if i < len(lines) else ""
            i += 1
        xp.elements.append(Element(cmd, coords, ecolour, text))
    return xp


def read_xplot(path: Path) -> Xplot:
    return parse_xplot(Path(path).read_text(errors="replace"))


def time_of_day(t: float, digits: int = 3) -> str:
    """Epoch seconds -> 'HH:MM:SS.mmm' UTC."""
    dt = _dt.datetime.fromtimestamp(t, _dt.timezone.utc)
    return dt.strftime("%H:%M:%S.%f")[:9 + digits] if digits else dt.strftime("%H:%M:%S")


def _time_of_day(x: float, _pos: int | None = None) -> str:
    return time_of_day(x)


def x_origin(xp: Xplot) -> float:
    """The first x value of the plot (its first packet), 0.0 for an empty one."""
    b = xp.bounds()
    return b[0] if b is not None else 0.0


# ------------------------------------------------------------------ drawing

TSG_LEGEND = [
    ("line", "green", "ACKs received"),
    ("line", "yellow", "advertised window (ack + window)"),
    ("dtick", "green", "duplicate ACKs"),
    ("utick", "yellow", "repeated window advertisements"),
    ("uarrow", "white", "segments sent (first/last byte)"),
    ("uarrow", "red", "retransmissions (R)"),
    ("line", "purple", "SACK blocks"),
]
# tcptrace counts every byte on the wire here, retransmissions included: under
# loss these read above the goodput (the tables' unique-byte figures).
TPUT_LEGEND = [
    ("dot", "yellow", "instantaneous (per segment)"),
    ("line", "red", "wire rate over the last 10 segments (retransmissions included)"),
    ("line", "blue", "wire rate since the first segment (retransmissions included)"),
]
RTT_LEGEND = [("line", "red", "RTT sample")]


def _legend_handles(spec: list[tuple[str, str, str]]) -> list[Line2D]:
    handles = []
    for kind, colour, label in spec:
        c = PALETTE[colour]
        if kind == "line":
            handles.append(pyplot().Line2D([], [], color=c, lw=1.5, label=label))
        else:
            handles.append(pyplot().Line2D([], [], color=c, lw=0, marker=_marker(kind),
                                           markersize=8, markerfacecolor="none",
                                           markeredgecolor=c, label=label))
    return handles


def _in_window(e: Element, x0: float, x1: float) -> bool:
    xs = e.xs
    return max(xs) >= x0 and min(xs) <= x1


def _focus_ylim(elems: list[Element]) -> tuple[float, float] | None:
    """Fit y to the segments and ACKs when the window line runs far above them.

    With autotuning the advertised window (yellow) ends megabytes above the
    data, which would squash everything else into a line at the bottom.
    """
    core = [y for e in elems if e.colour != "yellow" and (e.kind == "line" or e.kind in MARKERS)
            for y in e.ys]
    every = [y for e in elems if e.kind == "line" or e.kind in MARKERS for y in e.ys]
    if not core or not every:
        return None
    # Percentiles, not extremes: a reset carries a sequence number from
    # nowhere (tcptrace draws it ~4 GB away) and would flatten the transfer.
    core.sort()
    lo, hi = core[int(0.002 * (len(core) - 1))], core[int(0.998 * (len(core) - 1))]
    span = (hi - lo) or 1.0
    if max(every) <= hi + 0.3 * span:
        return None
    return lo - 0.03 * span, hi + 0.15 * span


def render(xp: Xplot, out: Path, *, xlim: tuple[float, float] | None = None,
           ylim: tuple[float, float] | None = None, legend: list[tuple[str, str, str]] | None = None,
           title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
           yscale: float = 1.0, max_texts: int = 400, size: tuple[float, float] = (12, 7),
           dpi: int = 100) -> Path:
    """Draw an xplot file to a PNG; xlim selects a window (y fits the window)."""
    elems = xp.elements
    if xlim is not None:
        elems = [e for e in elems if _in_window(e, *xlim)]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=size, dpi=dpi)
    try:
        fig.patch.set_facecolor(BACKGROUND)
        ax.set_facecolor(BACKGROUND)
        for spine in ax.spines.values():
            spine.set_color(FOREGROUND)
        ax.tick_params(colors=FOREGROUND, labelsize=9)

        segs: dict[str, list[list[tuple[float, float]]]] = {}
        points: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
        texts = [e for e in elems if e.kind in TEXTS]
        for e in elems:
            if e.kind == "line":
                x1, y1, x2, y2 = e.coords
                segs.setdefault(e.colour, []).append([(x1, y1 * yscale), (x2, y2 * yscale)])
            elif e.kind in MARKERS:
                xs, ys = points.setdefault((e.kind, e.colour), ([], []))
                xs.append(e.coords[0])
                ys.append(e.coords[1] * yscale)
        for colour, s in segs.items():
            ax.add_collection(plt.matplotlib.collections.LineCollection(
                s, colors=PALETTE.get(colour, FOREGROUND), linewidths=0.8))
        for (kind, colour), (xs, ys) in points.items():
            c = PALETTE.get(colour, FOREGROUND)
            ax.plot(xs, ys, lw=0, marker=_marker(kind), markersize=MARKER_SIZE.get(kind, 5.0),
                    markerfacecolor="none" if kind in ("diamond", "box") else c,
                    markeredgecolor=c, markeredgewidth=0.8)
        if len(texts) > max_texts:
            # A whole-transfer view cannot show thousands of labels; keep the
            # rare, meaningful ones (R, SYN, FIN, ...) and drop counters and "S".
            texts = [t for t in texts if not t.text.isdigit() and t.text != "S"]
            if len(texts) > 60:
                # Dozens of "R"s only smear; the red arrows still mark them.
                texts = [t for t in texts if t.text != "R"][:max_texts]
        for t in texts:
            ha, va = TEXT_ALIGN[t.kind]
            ax.text(t.coords[0], t.coords[1] * yscale, t.text, color=PALETTE.get(t.colour, FOREGROUND),
                    fontsize=7, ha=ha, va=va, clip_on=True)

        b = Xplot(elements=elems).bounds(k for k in ("line", *MARKERS, *TEXTS))
        if xlim is not None:
            # A little room so labels at the window's edge (SYN at 0) stay readable.
            pad = (xlim[1] - xlim[0]) * 0.01
            ax.set_xlim(xlim[0] - pad, xlim[1] + pad)
        elif b is not None:
            pad = (b[1] - b[0]) * 0.02 or 0.5
            ax.set_xlim(b[0] - pad, b[1] + pad)
        cropped_above: float | None = None
        if ylim is None:
            ylim = _focus_ylim(elems)
            if ylim is not None:
                # Say so on the graph: a silently cropped window line reads as "no window".
                cropped_above = max(y for e in elems if e.kind == "line" or e.kind in MARKERS
                                    for y in e.ys)
        if ylim is not None:
            ax.set_ylim(ylim[0] * yscale, ylim[1] * yscale)
        elif b is not None:
            lo, hi = b[2] * yscale, b[3] * yscale
            pad = (hi - lo) * 0.03 or 1.0
            ax.set_ylim(lo - pad, hi + pad)
        ax.set_title(title if title is not None else xp.title, color=FOREGROUND, fontsize=11)
        ax.set_xlabel(xlabel if xlabel is not None else xp.xlabel, color=FOREGROUND)
        ax.set_ylabel(ylabel if ylabel is not None else xp.ylabel, color=FOREGROUND)
        ax.grid(True, color="#303030", lw=0.5)
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)
        if xp.xtype == "timeval":
            # Absolute capture time: every vantage's graph reads on one clock.
            ax.xaxis.set_major_formatter(plt.FuncFormatter(_time_of_day))
        else:
            ax.ticklabel_format(axis="x", style="plain", useOffset=False)
        if cropped_above is not None:
            ax.text(0.01, 0.98, f"advertised window line runs above the plot, up to "
                    f"{cropped_above * yscale:,.0f}: cropped to show the data",
                    transform=ax.transAxes, color=PALETTE["yellow"], fontsize=8,
                    ha="left", va="top")
        if legend:
            # Below the axes: inside it would hide the start of the transfer.
            leg = ax.legend(handles=_legend_handles(legend), loc="upper center",
                            bbox_to_anchor=(0.5, -0.09), ncol=min(4, len(legend)), fontsize=8,
                            facecolor=BACKGROUND, edgecolor=FOREGROUND)
            for txt in leg.get_texts():
                txt.set_color(FOREGROUND)
        fig.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, facecolor=fig.get_facecolor())
    finally:
        plt.close(fig)
    return out


# ------------------------------------------------------------ tcptrace glue

def generate_xplot(pcap: Path, outdir: Path, conn_index: int,
                   timeout: float = 300.0) -> list[Path]:
    """Run tcptrace -S -T -R -zy for one connection; returns the .xpl files.

    x stays absolute capture time (not -zx, which restarts at each capture's
    own first packet) so graphs of different vantages share one time axis.
    Old .xpl files are removed first so a rerun never mixes connections.
    """
    outdir.mkdir(parents=True, exist_ok=True)
    for old in outdir.glob("*.xpl"):
        old.unlink()
    res = _run([TCPTRACE, "-n", "-zy", "-S", "-T", "-R", f"-o{conn_index}",
                str(Path(pcap).resolve())], outdir, timeout)
    (outdir / "xplot.stdout").write_text(res.stdout)
    if res.returncode != 0:
        raise TcptraceError(f"tcptrace -S failed: {res.stderr.strip()[-200:]}")
    return sorted(outdir.glob("*.xpl"))


def find_xpl(outdir: Path, kind: str, src: str, dst: str) -> Path | None:
    """The *_<kind>.xpl file whose title names src ==> dst."""
    want = f"{src}_==>_{dst}"
    for p in sorted(outdir.glob(f"*_{kind}.xpl")):
        head = p.read_text(errors="replace")[:400]
        if want in head:
            return p
    return None




def choose_window(origin: float, end: float, first_rexmt: float | None,
                  duration: float = 1.0) -> Window:
    """A window like the study's: `duration` seconds around the first retransmission
    (a quarter of it before), relative to `origin`; the middle of the transfer
    without one.  A transfer shorter than four windows gets a fifth of its length."""
    total = max(end - origin, 0.0)
    if total < 4 * duration:
        duration = max(total / 5, 1e-3)
    centre = first_rexmt if first_rexmt is not None else origin + total / 2
    start = min(max(origin, centre - duration / 4), max(origin, end - duration))
    return Window(start - origin, duration)


def default_window(xp: Xplot, duration: float = 1.0) -> Window:
    """choose_window for one xplot file alone, relative to its first x."""
    b = xp.bounds()
    if b is None:
        return Window(0.0, duration)
    rexmt = [e.coords[0] for e in xp.elements if e.kind in TEXTS and e.text == "R"]
    return choose_window(b[0], b[1], min(rexmt) if rexmt else None, duration)


def _axis_label(xp: Xplot) -> str:
    return "time of day (UTC)" if xp.xtype == "timeval" else "time since first packet (s)"


def draw_tsg(xpl: Path, outdir: Path, window: Window | None = None,
             origin: float | None = None) -> dict[str, str]:
    """Whole-transfer and zoomed time-sequence graphs; `window` is relative to
    `origin` (default: this plot's own first packet)."""
    xp = read_xplot(xpl)
    own = x_origin(xp) if xp.xtype == "timeval" else 0.0
    if origin is None or xp.xtype != "timeval":
        # A relative (-zx) plot from an older run cannot be placed on the run's clock.
        origin = own
    w = window
    if w is None:
        d = default_window(xp)
        w = Window(d.start + own - origin, d.duration)
    x0 = origin + w.start
    full = render(xp, outdir / "tsg_full.png", legend=TSG_LEGEND,
                  xlabel=_axis_label(xp), ylabel="sequence offset (bytes)")
    when = time_of_day(x0) + " UTC" if xp.xtype == "timeval" else f"{x0:.3f} s"
    zoom = render(xp, outdir / "tsg_window.png", xlim=(x0, x0 + w.duration),
                  legend=TSG_LEGEND, title=f"{xp.title}, {w.duration:g} s from {when}",
                  xlabel=_axis_label(xp), ylabel="sequence offset (bytes)")
    return {"tsg_full": full.name, "tsg_window": zoom.name,
            "window_start_s": f"{w.start:.6f}", "window_duration_s": f"{w.duration:g}",
            "window_start": f"{x0:.6f}"}


def draw_tput(xpl: Path, outdir: Path) -> str:
    xp = read_xplot(xpl)
    # Zero-interval samples carry tcptrace's 2^31 B/s sentinel (or GB/s for
    # segments a microsecond apart); they would set a 0-20 Gbit/s axis with
    # the real rates flat on zero.  Drop them from the drawing.
    xp = Xplot(xp.xtype, xp.ytype, xp.title, xp.xlabel, xp.ylabel,
               [e for e in xp.elements
                if not (e.kind not in TEXTS and max(e.ys) >= TPUT_SENTINEL_BPS)])
    # Per-segment "instantaneous" points still reach far above the averages;
    # scale the axis to the averaged curves like one would zoom in xplot.
    avg = [y for e in xp.elements if e.colour in ("red", "blue") and e.kind in ("line", "dot")
           for y in e.ys]
    # The first few averages can spike too (segments queued back to back), so
    # a high percentile, not the maximum, sets the scale.
    avg.sort()
    top = avg[int(0.98 * (len(avg) - 1))] if avg else 0.0
    ylim = (0.0, top * 1.3) if top > 0 else None
    out = render(xp, outdir / "tput.png", legend=TPUT_LEGEND, ylim=ylim, yscale=8e-6,
                 xlabel=_axis_label(xp), ylabel="throughput (Mbit/s)")
    return out.name


def draw_rtt(xpl: Path, outdir: Path) -> str:
    xp = read_xplot(xpl)
    out = render(xp, outdir / "rtt.png", legend=RTT_LEGEND,
                 title=f"{xp.title}: tcptrace's samples (never-retransmitted segments only)",
                 xlabel=_axis_label(xp), ylabel="RTT (ms)")
    return out.name


def draw_rtt_samples(csv: Path, outdir: Path, title: str) -> str | None:
    """rtt.png from the RTT of every ACK (analysis/acks.py), on the capture
    clock; None when the file holds no sample."""
    pts: list[tuple[float, float]] = []
    for line in csv.read_text().splitlines()[1:]:
        try:
            t, v = line.split(",")
            pts.append((float(t), float(v)))
        except ValueError:
            continue
    if not pts:
        return None
    xp = Xplot("timeval", "signed", title, "", "",
               [Element("dot", (t, v), "red") for t, v in pts])
    out = render(xp, outdir / "rtt.png", legend=[("dot", "red", "RTT of an ACK (from the segment's "
                                                                "first transmission)")],
                 xlabel=_axis_label(xp), ylabel="RTT (ms)")
    return out.name


def draw_from_xpl(outdir: Path, src: str, dst: str, window: Window | None = None,
                  origin: float | None = None) -> dict[str, str]:
    """Redraw every PNG from the stored .xpl files of the src -> dst direction
    (the RTT graph from the stored RTT of every ACK when there is one)."""
    graphs: dict[str, str] = {}
    tsg = find_xpl(outdir, "tsg", src, dst)
    if tsg is not None:
        graphs.update(draw_tsg(tsg, outdir, window, origin))
    tput = find_xpl(outdir, "tput", src, dst)
    if tput is not None:
        graphs["tput"] = draw_tput(tput, outdir)
    samples = outdir / "rtt_every_ack.csv"
    drawn = draw_rtt_samples(samples, outdir, f"{src}_==>_{dst} (RTT of every ACK)") \
        if samples.is_file() else None
    rtt = find_xpl(outdir, "rtt", src, dst)
    if drawn is not None:
        graphs["rtt"] = drawn
    elif rtt is not None:
        graphs["rtt"] = draw_rtt(rtt, outdir)
    return graphs
