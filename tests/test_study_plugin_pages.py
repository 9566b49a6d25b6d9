"""Study pages written by study plug-ins (satbed/report/studies) through
`satbed study-page`: the ACK-reservation and ACTS multi-flow pages from
stored matrix runs. tests/data/ack-reservation-page and
tests/data/acts-multiflow-page hold real runs' results.sqlite (each cell's
metrics cut down to what the page reads) and the per-cell figures the
plug-ins took from the cells' captures and records (STUDY.json), as a run
stored under docs/studies/ is kept: without its cell directories."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import statistics

import pytest

from satbed.report import globalhawk, studies
from satbed.report.studies import ack_reservation, multiflow_ber

from satbed_testlib import REPO, satbed

DATA = os.path.join(REPO, "tests", "data")
HEAD = "# The page\n\nProse above the marker, kept as written.\n\n"


def fixture(tmp_path, name: str) -> str:
    """A copy: the page generator may add to a run directory's STUDY.json."""
    copy = tmp_path / name
    shutil.copytree(os.path.join(DATA, f"{name}-page"), copy)
    return str(copy)


def page_in(tmp_path, name: str) -> str:
    p = tmp_path / f"{name}.md"
    p.write_text(HEAD + globalhawk.MARKER + "\nstale numbers\n")
    return str(p)


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The numbered rows of the table under a heading."""
    section = text.split(f"### {heading}\n", 1)[1].split("\n### ", 1)[0]
    return [[c.strip() for c in line.split("|")[1:-1]] for line in section.splitlines() if re.match(r"\| \d+ \|", line)]


def headline_rows(text: str) -> list[list[str]]:
    """The shared headline table: #, the paper says, the paper, today, the study's conditions, agree?, why."""
    return table_rows(text, "The paper's headlines beside satbed's")


def stored(run: str, name: str, variant: str) -> dict:
    """The stored per-cell figures of the cell of one variant."""
    db = sqlite3.connect(os.path.join(run, "results.sqlite"))
    hashes = [h for h, params in db.execute("SELECT hash, params FROM cells")
              if json.loads(params).get("variant") == variant]
    with open(os.path.join(run, f"{name}.json")) as f:
        figures = json.load(f)
    assert len(hashes) == 1, hashes
    return figures[hashes[0]]


def test_each_page_is_its_plugin_s():
    assert studies.for_page("docs/studies/ack-reservation.md").doc == "ack-reservation"
    assert studies.for_page("docs/studies/acts-multiflow.md").doc == "acts-multiflow"
    assert studies.for_page("docs/studies/global-hawk.md") is None


def test_the_ack_reservation_page_is_written_from_the_stored_run(tmp_path):
    run, page = fixture(tmp_path, "ack-reservation"), page_in(tmp_path, "ack-reservation")
    cp = satbed("study-page", run, "--page", page, timeout=120)
    assert cp.returncode == 0, cp.stderr
    head, generated = open(page).read().split(globalhawk.MARKER)
    assert head == HEAD and "stale numbers" not in generated
    rows = headline_rows(generated)
    assert len(rows) == len(ack_reservation.CLAIMS)
    # Row 1: Table I's throughput without reservation, today and under the study's conditions.
    for col, variant in ((3, "pepd-B175"), (4, "study-drops-B175")):
        want = stored(run, "ack-reservation", variant)["throughput_fraction"]
        assert rows[0][col].startswith(f"{want:.3f} ("), rows[0]
    assert all("no cell" not in c for row in rows for c in row[3:6]), rows
    # The study's source alone, in the table of every condition.
    every = table_rows(generated, "Each condition")
    want = stored(run, "ack-reservation", "study-source-B175")["throughput_fraction"]
    assert every[0][3].startswith(f"{want:.3f} ("), every[0]
    assert os.path.getsize(tmp_path / "ack-reservation" / "source-traces.png") > 10_000
    assert "`scenarios/outage.yaml`" in generated and "steal" in generated


def test_an_ack_reservation_verdict_follows_the_stored_numbers(tmp_path):
    """Give the study's conditions the paper's 0.49 and the verdict flips."""
    run, page = fixture(tmp_path, "ack-reservation"), page_in(tmp_path, "ack-reservation")
    path = os.path.join(run, "ack-reservation.json")
    figures = json.load(open(path))
    target = next(h for h, c in figures.items() if c == stored(run, "ack-reservation", "study-drops-B175"))
    for value, verdict, agree in ((0.49, "agrees", "under the study's conditions only"),
                                  (0.70, "**disagrees**", "**no**")):
        figures[target]["throughput_fraction"] = value
        with open(path, "w") as f:
            json.dump(figures, f)
        assert satbed("study-page", run, "--page", page, timeout=120).returncode == 0
        row = headline_rows(open(page).read())[0]
        assert row[4] == f"{value:.3f} ({verdict})" and row[5] == agree, row


def test_the_acts_page_is_written_from_the_stored_run(tmp_path):
    run, page = fixture(tmp_path, "acts-multiflow"), page_in(tmp_path, "acts-multiflow")
    cp = satbed("study-page", run, "--page", page, timeout=120)
    assert cp.returncode == 0, cp.stderr
    generated = open(page).read().split(globalhawk.MARKER)[1]
    # The utilisation table: the median of the stored intervals of each BER class.
    c = stored(run, "acts-multiflow", "study-hosts-q40")
    want = statistics.median(u for d, u, _ in c["intervals"] if d == "1e-9") * 100
    line = next(x for x in generated.splitlines() if x.startswith("| `study-hosts-q40` |"))
    assert line.split("|")[2].strip() == f"{want:.0f}", line
    # 1e-5: bytes the link sent, corrupted ones included (the study's routers counted them too).
    at5 = statistics.median(u for d, u, _ in c["intervals"] if d == "1e-5") * 100
    assert line.split("|")[6].strip() == f"{at5:.0f}", line
    every = table_rows(generated, "Each condition")
    assert every[0][3].startswith(f"{want:.0f}%"), every[0]     # the study-hosts-q40 column
    assert os.path.getsize(tmp_path / "acts-multiflow" / "cdfs.png") > 10_000


def test_acts_row_5_gives_each_error_model_s_degradation_from_its_cells(tmp_path):
    """Row 5's explanation and the error-model table give each model's
    per-connection degradation from 1e-9 to 1e-4: the medians of the stored
    uploads of its runs, pooled."""
    run, page = fixture(tmp_path, "acts-multiflow"), page_in(tmp_path, "acts-multiflow")
    assert satbed("study-page", run, "--page", page, timeout=120).returncode == 0
    text = open(page).read()
    why = headline_rows(text)[4][6]
    db = sqlite3.connect(os.path.join(run, "results.sqlite"))
    with open(os.path.join(run, "acts-multiflow.json")) as f:
        figures = json.load(f)
    for variant, label in multiflow_ber.ERROR_MODELS:
        flows = [flow for h, params in db.execute("SELECT hash, params FROM cells")
                 if json.loads(params).get("variant") == variant for flow in figures[h]["flows"]]
        clean, noisy = (statistics.median(b for d, b in flows if d == dec) for dec in ("1e-9", "1e-4"))
        drop = 100 * (clean - noisy) / clean
        assert f"{label}, {drop:.0f}% (`{variant}`)" in why, why
        line = next(x for x in text.splitlines() if x.startswith(f"| `{variant}` |"))
        assert f"| {drop:.0f}% (" in line, line


def test_a_run_without_its_figures_or_cells_says_no_cell(tmp_path):
    run, page = fixture(tmp_path, "ack-reservation"), page_in(tmp_path, "ack-reservation")
    os.remove(os.path.join(run, "ack-reservation.json"))
    assert satbed("study-page", run, "--page", page, timeout=120).returncode == 0
    rows = headline_rows(open(page).read())
    assert rows and all(row[3] == "no cell" and row[4] == "no cell" for row in rows), rows


@pytest.mark.parametrize("name", ["ack-reservation", "acts-multiflow"])
def test_the_committed_pages_are_what_their_stored_runs_give(tmp_path, name):
    """docs/studies/NAME.md's generated part is the generator's output on
    the run stored beside it (regenerated into a copy, compared)."""
    doc = os.path.join(REPO, "docs", "studies", f"{name}.md")
    run = os.path.join(REPO, "docs", "studies", name, "results")
    copy = tmp_path / f"{name}.md"
    shutil.copy(doc, copy)
    shutil.copytree(run, tmp_path / "results")
    cp = satbed("study-page", str(tmp_path / "results"), "--page", str(copy), timeout=120)
    assert cp.returncode == 0, cp.stderr
    strip = re.compile(r"Generated by `[^`]*`")
    assert strip.sub("", open(copy).read()) == strip.sub("", open(doc).read())
