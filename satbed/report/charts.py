"""The Global Hawk study's three charts, drawn from a matrix's stored cells:
Chart 1: goodput vs BER at RTT 0; Chart 2: vs BER at 600 ms; Chart 3: vs RTT
at BER 1e-5. One colour per protocol; solid with a PEP, dashed without;
mean and 95% confidence interval over repetitions. A partial matrix draws
what it has: a missing RTT or BER is replaced by the nearest one present and
the chart says so."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

from analysis.figures import png, pyplot
from satbed.results.store import MEASURED, CellRow

from .common import MARKERS, PROTOCOL_ORDER, colour, fmt_ber, line_style, mean_ci, measured, param_key, pep_label


# Axes a chart holds at one value per series (the most common one) besides its own two.
OTHER_AXES = ("size", "direction", "rate", "ceil", "queue", "emulator", "captures", "topology", "pep_options",
              "link", "seed", "analyze")


def pick(values: list[float], target: float, log: bool = False) -> float | None:
    """The value present nearest the target (BER compared on a log scale, 0 as 1e-12)."""
    if not values:
        return None
    if log:
        return min(values, key=lambda v: (abs(math.log10(v or 1e-12) - math.log10(target or 1e-12)), v))
    return min(values, key=lambda v: (abs(v - target), v))


def series(rows: list[CellRow], x: str, fixed: str, value: float) -> dict[tuple[str, str], dict]:
    """(client, pep) -> {"points": {x value: [goodput...]}, "failed": [x values
    where no repetition measured], "limited": [x values where a repetition was
    stopped by the time limit]} for the cells at fixed == value, each series
    held at its most common value of every other axis."""
    at = [r for r in rows if r.params.get(fixed) == value and "client" in r.params]
    by_series: dict[tuple[str, str], list[CellRow]] = defaultdict(list)
    for r in at:
        by_series[(r.params["client"], pep_label(r.params))].append(r)
    out = {}
    for key, rs in by_series.items():
        held = {a: Counter(param_key(r.params.get(a)) for r in rs).most_common(1)[0][0] for a in OTHER_AXES}
        points: dict[float, list[float]] = defaultdict(list)
        tried: set[float] = set()
        limited: set[float] = set()
        for r in rs:
            if all(param_key(r.params.get(a)) == held[a] for a in OTHER_AXES):
                tried.add(r.params[x])
                if r.status in MEASURED and r.goodput_bps:
                    points[r.params[x]].append(r.goodput_bps)
                    if r.status == "limited":
                        limited.add(r.params[x])
        out[key] = {"points": dict(points), "failed": sorted(tried - set(points)), "limited": sorted(limited),
                    "held": {a: json.loads(v) for a, v in held.items()}}
    return out

CHARTS = (
    # name, title, x axis, fixed axis, wanted value
    ("chart1", "Chart 1: goodput vs BER at RTT {v:g} ms", "ber", "rtt", 0.0),
    ("chart2", "Chart 2: goodput vs BER at RTT {v:g} ms", "ber", "rtt", 600.0),
    ("chart3", "Chart 3: goodput vs RTT at BER {b}", "rtt", "ber", 1e-5),
)

CHARTS_WANT = {name: want for name, _, _, _, want in CHARTS}


def draw_chart(rows: list[CellRow], name: str, title: str, x: str, fixed: str, want: float) -> dict:
    """One chart as PNG bytes plus a caption and the plotted numbers."""
    ok = measured(rows)
    present = sorted({r.params[fixed] for r in ok})
    value = pick(present, want, log=fixed == "ber")
    fig, ax = pyplot().subplots(figsize=(7.5, 4.6), dpi=110)
    caption, plotted = "", []
    if value is None:
        ax.text(0.5, 0.5, "no throughput measurements in this matrix", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        shown = want
        caption = "No cell measured goodput (ping cells measure RTT only)."
    else:
        shown = value
        if value != want:
            caption = (f"The matrix has no {fixed} = {fmt_ber(want) if fixed == 'ber' else f'{want:g} ms'}; "
                       f"drawn at the nearest present value. ")
        # Failed cells (a stalled transfer at high BER) stay visible as crosses at 0.
        ser = series([r for r in rows if r.status in ("ok", "limited", "failed", "timeout")], x, fixed, value)
        xs_all = sorted({xv for s in ser.values() for xv in [*s["points"], *s["failed"]]})
        # BER on evenly spaced categories (0 has no place on a log axis); RTT linear.
        pos = {v: i for i, v in enumerate(xs_all)} if x == "ber" else {v: v for v in xs_all}
        peps = sorted({p for _, p in ser if p != "none"})
        any_failed = any_limited = False
        order = sorted(ser, key=lambda k: (PROTOCOL_ORDER.index(k[0]) if k[0] in PROTOCOL_ORDER else 99, k))
        for client, pep in order:
            pts = ser[(client, pep)]["points"]
            xs = sorted(pts)
            stats = [mean_ci(pts[v]) for v in xs]
            label = f"{client} ({'no PEP' if pep == 'none' else pep})"
            ax.errorbar([pos[v] for v in xs], [m / 1e6 for m, _ in stats], yerr=[c / 1e6 for _, c in stats],
                        color=colour(client), linestyle=line_style(pep),
                        marker=MARKERS[(peps.index(pep) + 1) % len(MARKERS)] if pep != "none" else MARKERS[0],
                        markersize=5, capsize=3, linewidth=1.6, label=label)
            lim = ser[(client, pep)]["limited"]
            if lim:
                any_limited = True
                ax.plot([pos[v] for v in lim], [mean_ci(pts[v])[0] / 1e6 for v in lim], linestyle="none",
                        marker="o", markersize=8, markerfacecolor="white", markeredgewidth=1.6,
                        color=colour(client), zorder=3)
            for v, (m, c) in zip(xs, stats):
                plotted.append({"client": client, "pep": pep, x: v, "n": len(pts[v]), "mean_bps": m,
                                "ci95_bps": c, "time_limited": v in lim})
            bad = ser[(client, pep)]["failed"]
            if bad:
                any_failed = True
                # The series' line runs on to its failures, so a protocol that collapses shows it.
                joined = sorted([(v, m) for v, (m, _) in zip(xs, stats)] + [(v, 0.0) for v in bad])
                ax.plot([pos[v] for v, _ in joined], [m / 1e6 for _, m in joined], color=colour(client),
                        linestyle=line_style(pep), linewidth=1.6)
                ax.plot([pos[v] for v in bad], [0] * len(bad), linestyle="none", marker="x", markersize=9,
                        markeredgewidth=2, color=colour(client), clip_on=False)
        if x == "ber":
            ax.set_xticks(range(len(xs_all)))
            ax.set_xticklabels([fmt_ber(v) for v in xs_all])
            ax.set_xlabel("bit-error rate")
            if len(xs_all) == 1:
                ax.set_xlim(-0.5, 0.5)
        else:
            ax.set_xticks(xs_all)
            ax.set_xlabel("round-trip time (ms)")
            if len(xs_all) == 1:
                ax.set_xlim(xs_all[0] - 50, xs_all[0] + 50)
        ax.set_ylabel("goodput (Mbit/s)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if order:
            ax.legend(fontsize=8, ncol=2, loc="best")
        caption += ("Solid: with PEP; dash-dot: with PEP options (e.g. pepd wan=rate); dashed: without. Points: mean over repetitions; bars: 95% interval. "
                    "Each series is held at its most common size, direction and link settings.")
        if any_limited:
            caption += (" A hollow circle: the transfer was still running at the cell's time limit; its "
                        "goodput is what it delivered within the limit.")
        if any_failed:
            caption += (" A cross at 0: every repetition failed (typically a transfer that stalled "
                        "within the client's time limit, i.e. below size / limit); see the cells table.")
    ax.set_title(title.format(v=shown, b=fmt_ber(shown)), fontsize=11)
    fig.tight_layout()
    return {"name": name, "png": png(fig), "caption": caption, "points": plotted, "fixed": fixed,
            "value": value, "x": x}
