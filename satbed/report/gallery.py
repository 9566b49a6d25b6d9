"""The time-sequence graphs of a matrix's cells on its report page: the
study's own view first, the first few drawn here when missing, the rest
linked."""

from __future__ import annotations

import glob
import html
import json
import os
import sys
from typing import TextIO

from analysis import leo
from analysis.figures import data_uri
from analysis.report import write_report

from satbed.results.store import CellRow

from .common import fmt_ber, pep_label

MAX_EMBEDDED_GRAPHS = 48        # more are linked, so the report stays loadable


# Cells whose graphs a report draws when missing (~12 s per vantage per 100 MB):
# FTP and SCP under each of the Global Hawk matrix's three PEP rows (none,
# pepd's TCP WAN leg, pepd wan=rate).
GALLERY_DRAWN = 6


def gallery(out: str, rows: list[CellRow], stream: TextIO = sys.stderr) -> list[dict]:
    """Time-sequence graphs and reports of the cells, the study's own view
    (highest RTT and BER, FTP/SCP, each PEP) first. Matrix cells store
    metrics, tcptrace output and captures but no graphs; the first
    GALLERY_DRAWN TCP cells of that view are drawn here, once, and every other
    cell is drawn by `satbed report DIR/cells/HASH`."""
    items = []
    for r in rows:
        cell_dir = os.path.join(out, "cells", r.hash)
        analysed = any(isinstance(v, dict) and "main" in v for v in (r.metrics.get("analysis") or {}).values())
        # A LEO cell's report has its timeline, a ping cell's too (no TCP to analyse).
        analysed = analysed or _has_profile(cell_dir)
        drawn = os.path.exists(os.path.join(cell_dir, "report.html")) or \
            glob.glob(os.path.join(cell_dir, "analysis", "**", "*.png"), recursive=True)
        if not analysed and not drawn:
            continue
        p = r.params
        # PEP before client: the first few drawn alternate FTP and SCP, as the
        # study shows them, instead of one protocol under every PEP.
        items.append({"row": r, "dir": cell_dir,
                      "rank": (-(p["rtt"]), -(p["ber"]), 0 if p["client"] in ("ftp", "scp") else 1,
                               r.repetition, pep_label(p), p["client"])})
    items.sort(key=lambda d: d["rank"])
    for it in items[:GALLERY_DRAWN]:
        if not os.path.exists(os.path.join(it["dir"], "report.html")):
            stream.write(f"satbed report: drawing the graphs of cell {it['row'].hash} "
                         f"({it['row'].params['client']}/{pep_label(it['row'].params)})\n")
            stream.flush()
            try:
                write_report(it["dir"])
            except Exception as e:  # one cell's drawing problem must not lose the matrix report
                stream.write(f"satbed report: cell {it['row'].hash}: graphs not drawn: {e}\n")
    shown = []
    for it in items:
        pngs = sorted(glob.glob(os.path.join(it["dir"], "analysis", "**", "*.png"), recursive=True))
        report = os.path.join(it["dir"], "report.html")
        if pngs or os.path.exists(report):
            shown.append({**it, "pngs": pngs, "report": report if os.path.exists(report) else None})
    return shown


def gallery_html(out: str, items: list[dict]) -> list[str]:
    """Per cell: the zoomed time-sequence graphs (the study's view) embedded,
    every other graph and the cell's own report linked. Beyond
    MAX_EMBEDDED_GRAPHS images, everything is linked."""
    parts = ["<h2>Time-sequence graphs</h2>"]
    if not items:
        return parts + ["<p>No cell has analysis graphs (captures off, ping cells, or no tcptrace).</p>"]
    parts.append("<p>Zoomed time-sequence graphs per vantage point (lan_a: Client A's port; wan: the "
                 "satellite side; lan_b: Client B's port); the other graphs and each cell's report are linked. "
                 "Any other cell's graphs: <code>satbed report DIR/cells/HASH</code>.</p>")
    embedded = 0
    for it in items:
        r, p = it["row"], it["row"].params
        cell = os.path.join(out, "cells", r.hash)
        label = f"{p['client']} / {pep_label(p)}, RTT {p['rtt']:g} ms, BER {fmt_ber(p['ber'])}, repetition {r.repetition}"
        links = [f"<a href='cells/{r.hash}/report.html'>cell report</a>"] if it["report"] else []
        shown = [g for g in it["pngs"] if os.path.basename(g).startswith("tsg_window")
                 or os.path.basename(g) == leo.FIGURE] or it["pngs"][:1]
        figures = []
        for png in it["pngs"]:
            rel = os.path.relpath(png, out)
            name = os.path.relpath(png, cell)
            if png in shown and embedded < MAX_EMBEDDED_GRAPHS:
                figures.append(f"<figure><img alt='{html.escape(rel)}' src='{_png_data(png)}'>"
                               f"<figcaption>{html.escape(name)}</figcaption></figure>")
                embedded += 1
            else:
                links.append(f"<a href='{html.escape(rel)}'>{html.escape(name)}</a>")
        parts.append(f"<h3>{html.escape(label)}</h3><div class='gallery'>{''.join(figures)}</div>"
                     f"<p class='caption'>{' · '.join(links)}</p>")
    return parts


def _has_profile(cell_dir: str) -> bool:
    """Whether the cell's satellite link followed a link profile (its config says)."""
    try:
        with open(os.path.join(cell_dir, "config.json"), encoding="utf-8") as f:
            return leo.link_profiles(json.load(f)) is not None
    except (OSError, ValueError, AttributeError):
        return False


def _png_data(path: str) -> str:
    with open(path, "rb") as f:
        return data_uri(f.read())
