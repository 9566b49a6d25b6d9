"""The matrix report, regenerated from stored data only (DIR/results.sqlite
and the cell directories), never by rerunning:

  DIR/report.html   self-contained: a study's own page where the matrix
                    reproduces one (satbed/report/studies/), else the three
                    Global Hawk charts; tables, the cells' time-sequence
                    graphs, environment
  DIR/results.csv   one row per cell
  DIR/charts/*.png  the charts as files"""

from __future__ import annotations

import html
import json
import os
import time
from collections import Counter
from pathlib import Path

from analysis.figures import data_uri

from satbed.core.errors import SatbedError
from satbed.core.files import write_text
from satbed.core.proc import REPO_ROOT
from satbed.results.store import MEASURED, CellRow, Store

from . import studies
from .charts import CHARTS, CHARTS_WANT, draw_chart
from .common import fmt_ber, fmt_mbps, html_table, human_size, pep_label
from .export import write_csv
from .gallery import gallery, gallery_html
from .summary import CAPTURE_METRICS, failure_reasons, summary_table, unavailable_reasons

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
.chart{margin:1.5em 0}.chart img{max-width:100%;border:1px solid #ddd}
.caption{font-size:13px;color:#555}.failed{color:#b00}
.gallery{display:flex;flex-wrap:wrap;gap:12px}.gallery figure{margin:0;width:370px}
.gallery img{width:100%;border:1px solid #ddd}.gallery figcaption{font-size:12px}
pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:12px}
"""


# The docs pages that explain this report, linked as files of the checkout
# that wrote it (a report is a file on disk, read without the docs site).
DOCS = (("docs/guide/experiments.md", "The matrix report"), ("docs/guide/results.md", "A matrix directory"))


def docs_line() -> str:
    links = [f"<a href='{html.escape(Path(REPO_ROOT, rel).as_uri())}'><code>{html.escape(rel)}</code></a>"
             f" ({html.escape(section)})" for rel, section in DOCS]
    return f"<p class='caption'>What this report shows: {links[0]}; the directory's files and columns: {links[1]}.</p>"


def environment(out: str, rows: list[CellRow], runs: list[dict]) -> dict:
    env: dict = {}
    for r in rows:
        path = os.path.join(out, "cells", r.hash, "environment.json")
        if os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    env = json.load(f)
                break
            except (OSError, ValueError):
                continue
    return {"cell environment (first cell)": env, "matrix runs": runs}


def build(out: str) -> str:
    """Write DIR/report.html, DIR/results.csv and DIR/charts/*.png; returns the report path."""
    db = os.path.join(out, "results.sqlite")
    if not os.path.exists(db):
        raise SatbedError(f"{out}: no results.sqlite (run `satbed matrix FILE --out {out}` first)")
    with Store(db, read_only=True) as store:
        rows = store.cells()
        runs = store.runs()
    write_csv(os.path.join(out, "results.csv"), rows)
    os.makedirs(os.path.join(out, "charts"), exist_ok=True)
    study = studies.pages(out, rows)
    charts = []
    # A study's own page replaces the Global Hawk charts (their axes, BER
    # and RTT, are not what those studies vary). A matrix with variants (e.g. the Global Hawk hosts axis: today's and
    # the study's) draws the three charts once per variant: pooling them
    # would average different hosts into one point.
    variants = sorted({r.params.get("variant") or "" for r in rows})
    for variant in variants if not study else []:
        vrows = [r for r in rows if (r.params.get("variant") or "") == variant]
        for base, title, x, fixed, want in CHARTS:
            name = f"{base}_{variant}" if variant else base
            if variant:
                title = f"{title} ({variant})"
            c = draw_chart(vrows, name, title, x, fixed, want)
            c["base"], c["variant"] = base, variant
            with open(os.path.join(out, "charts", f"{name}.png"), "wb") as f:
                f.write(c["png"])
            charts.append(c)

    experiments = sorted({r.experiment for r in rows})
    status = Counter(r.status for r in rows)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>satbed matrix: "
             f"{html.escape(', '.join(experiments))}</title><style>{CSS}</style></head><body>",
             f"<h1>satbed matrix report: {html.escape(', '.join(experiments) or 'empty')}</h1>",
             f"<p>{len(rows)} cells: " + ", ".join(f"{n} {s}" for s, n in sorted(status.items())) +
             f". Generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} from "
             f"<code>results.sqlite</code> and the cell directories. "
             f"<a href='results.csv'>results.csv</a></p>", docs_line()]
    reasons = failure_reasons(rows)
    if reasons:
        # Beside the charts, not only in the cells table: a cross at 0 needs its why.
        parts.append("<h2>Failures</h2><p class='failed'>" +
                     f"{sum(n for _, n in reasons)} cells did not measure; their reasons, most common first:</p>" +
                     html_table(["cells", "reason"], [[str(n), text] for text, n in reasons]))
    missing = unavailable_reasons(rows)
    if missing:
        parts.append("<h2>Unavailable</h2><p>" +
                     f"{sum(n for _, n in missing)} cells were not run: their PEP is not installed on the "
                     "machine that ran the matrix. A later run, once it is, runs them. Why:</p>" +
                     html_table(["cells", "reason"], [[str(n), text] for text, n in missing]))
    parts.extend(study)
    if charts:
        parts.append("<h2>Charts</h2>")
    for c in charts:
        # The same variant's other chart at the same fixed value (each variant has its own three).
        twin = next((o for o in charts if o is not c and o["variant"] == c["variant"] and o["x"] == c["x"]
                     and o["fixed"] == c["fixed"] and o["value"] is not None and o["value"] == c["value"]), None)
        if twin is not None and c["name"] < twin["name"] and c["value"] != CHARTS_WANT[c["base"]]:
            # Drawn at the nearest present value, it would be the other chart again.
            parts.append(f"<div class='chart' id='{c['name']}'><p class='caption'>Chart {c['base'][-1]}: "
                         f"the matrix has no {c['fixed']} = {CHARTS_WANT[c['base']]:g}; the nearest present "
                         f"value is {twin['name']}'s, so it is not drawn twice.</p></div>")
            try:
                os.remove(os.path.join(out, "charts", f"{c['name']}.png"))
            except FileNotFoundError:
                pass
            continue
        parts.append(f"<div class='chart' id='{c['name']}'><img alt='{c['name']}' "
                     f"src='{data_uri(c['png'])}'>"
                     f"<p class='caption'>{html.escape(c['caption'])}</p></div>")

    parts.append("<h2>Summary (repetitions pooled)</h2>")
    # The newest run's reference row: what the matrix summary compared with.
    reference = next((r["reference"] for r in reversed(runs) if r.get("reference")), None)
    table = summary_table(rows, reference)
    # Only the columns some configuration has: a ping column in a matrix
    # without ping cells, or capture columns without captures, stay out.
    named = ", ".join(f"{k}={v}" for k, v in reference.items()) if reference else ""
    extra = [(k, label) for k, label in (("ref_pct", f"% of {named}"),
                                         ("first_byte_s", "s before the first byte"),
                                         ("after_first_byte_bps", "goodput after it Mbit/s"),
                                         ("ref_after_first_byte_pct", f"after it, % of {named}"),
                                         ("rtt_ms_avg", "ping RTT ms"), ("cpu_s_per_gb", "CPU s per GB (both ends)"),
                                         *CAPTURE_METRICS)
             if any(d.get(k) is not None for d in table)]

    def cell(k: str, v: float | None) -> str:
        if v is None:
            return "–"
        if k.endswith("_bps"):
            return fmt_mbps(v)
        if k == "cpu_s_per_gb":
            return f"{v:.1f}"
        if k == "first_byte_s":
            return f"{v:.2f}"
        if k.endswith("_pct"):
            return f"{v:.1f} %"
        return f"{v:.1f}" if k.endswith("_ms_avg") else f"{v:,.0f}"
    settings = any(d["setting"] for d in table)
    body = [[*([d["setting"]] if settings else []),
             d["client"], d["pep"], f"{d['rtt']:g}", fmt_ber(d["ber"]), human_size(d["size"]), d["direction"],
             f"{d['ok']}/{d['cells']}" + (f" ({d['limited']} limited)" if d["limited"] else ""),
             fmt_mbps(d["mean_bps"]),
             fmt_mbps(d["ci95_bps"]) if d["ci95_bps"] is not None and d["ok"] > 1 else "–",
             *(cell(k, d.get(k)) for k, _ in extra),
             f"{d['seconds']:.1f}" if d["seconds"] else "–"] for d in table]
    parts.append(html_table([*(["setting"] if settings else []),
                         "client", "PEP", "RTT ms", "BER", "size", "direction", "ok", "goodput Mbit/s",
                         "± 95% Mbit/s", *(label for _, label in extra), "cell s"], body))
    if any(k == "first_byte_s" for k, _ in extra):
        parts.append("<p class='caption'>Seconds before the first byte: from the transfer command's start "
                     "until the received copy first held a byte (the application's own set-up: ssh's key "
                     "exchange and login, FTP's commands); the goodput after it runs from there to the "
                     "command's end.</p>")
    if any(k in dict(CAPTURE_METRICS) or k == "cpu_s_per_gb" for k, _ in extra):
        parts.append("<p class='caption'>From the cells' captures: sender and receiver views end to "
                     "end as the TCP spoofing study defines them (bytes acknowledged from the "
                     "initiator's SYN to the last ACK the sender received / the receiver sent); RTT "
                     "from every ACK, retransmissions and SACK blocks at the emulator port the "
                     "data enters the satellite link by.</p>")

    parts.append("<h2>Cells</h2>")
    body = []
    for r in sorted(rows, key=lambda r: (r.params["client"], pep_label(r.params), r.params["rtt"], r.params["ber"],
                                         r.repetition)):
        link = f"cells/{r.hash}/"
        rep = os.path.join(out, "cells", r.hash, "report.html")
        name = f"<a href='{link}report.html'>{r.hash}</a>" if os.path.exists(rep) else \
            f"<a href='{link}'>{r.hash}</a>"
        st = html.escape(r.status) if r.status in MEASURED else f"<span class='failed'>{html.escape(r.status)}</span>"
        p = r.params
        body.append([name, html.escape(p["client"]), html.escape(pep_label(p)), f"{p['rtt']:g}", fmt_ber(p["ber"]),
                     human_size(p["size"]), str(r.repetition), st, fmt_mbps(r.goodput_bps),
                     f"{r.seconds:.1f}" if r.seconds else "–", html.escape((r.error or "")[:200])])
    parts.append(html_table(["cell", "client", "PEP", "RTT ms", "BER", "size", "rep", "status", "goodput Mbit/s",
                         "seconds", "error"], body, raw=True))

    parts.extend(gallery_html(out, gallery(out, rows)))

    parts.append("<h2>Environment</h2><pre>" +
                 html.escape(json.dumps(environment(out, rows, runs), indent=2, sort_keys=True, default=str)) +
                 "</pre></body></html>")
    path = os.path.join(out, "report.html")
    write_text(path, "\n".join(parts))
    return path
