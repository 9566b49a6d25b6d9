"""The Global Hawk study page (satbed/report/globalhawk.py) from a stored
matrix run: tests/data/globalhawk-page/results.sqlite holds cells of a real
`satbed matrix experiments/globalhawk-claims.yaml` run, their analysis cut
down to the figures the page reads."""

from __future__ import annotations

import csv
import os
import re
import shutil
import sqlite3
import json

import pytest

from satbed.core.errors import SatbedError
from satbed.report import globalhawk, globalhawk_claims, globalhawk_grid, globalhawk_spread

from satbed_testlib import REPO, satbed

FIXTURE = os.path.join(REPO, "tests", "data", "globalhawk-page")
HEAD = "# The page\n\nProse above the marker, kept as written.\n\n"


def page_in(tmp_path, text: str = HEAD + globalhawk.MARKER + "\nstale numbers\n") -> str:
    p = tmp_path / "global-hawk.md"
    p.write_text(text)
    return str(p)


def stored_goodput(variant: str, client: str, pep: str, rtt: float, ber: float) -> float:
    db = sqlite3.connect(os.path.join(FIXTURE, "results.sqlite"))
    values = [g for params, g in db.execute("SELECT params, goodput_bps FROM cells WHERE status IN ('ok', 'limited')")
              if (p := json.loads(params))["client"] == client and p["pep"] == pep and p.get("variant") == variant
              and p["rtt"] == rtt and p["ber"] == ber]
    assert len(values) == 1, values
    return values[0]


def test_the_page_is_rewritten_below_its_marker_from_the_stored_numbers(tmp_path):
    page = page_in(tmp_path)
    cp = satbed("study-page", FIXTURE, "--page", page, timeout=120)
    assert cp.returncode == 0, cp.stderr
    text = open(page).read()
    head, generated = text.split(globalhawk.MARKER)
    assert head == HEAD and "stale numbers" not in generated
    # NcFTP at 600 ms and 1e-5 under the study's error model, as stored.
    want = stored_goodput("study-errors", "ftp", "none", 600.0, 1e-5)
    row = next(line for line in generated.splitlines() if line.startswith("| 5 | Figure 2 |"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[6] == f"{want / 1e3:.0f} kbit/s (agrees)", row
    # Every claim has a row, and each condition a value or an honest "no cell".
    rows = [line for line in generated.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) == len(globalhawk_claims.CLAIMS)
    for chart in ("chart1", "chart2", "chart3"):
        assert os.path.getsize(tmp_path / "global-hawk" / f"{chart}.png") > 10_000
        assert f"](global-hawk/{chart}.png)" in generated
    assert "`experiments/globalhawk-claims.yaml`" in generated and "steal" in generated


def test_a_verdict_follows_the_numbers(tmp_path):
    """The verdict is computed, not written: a claim whose test is inverted flips."""
    cells, _ = globalhawk.load_cells([FIXTURE])
    claim = next(c for c in globalhawk_claims.CLAIMS if c.where == "Figure 2" and "730" in c.says)
    per_packet = claim.value(cells, "study-errors")
    per_bit = claim.value(cells, "study")
    assert per_packet is not None and per_bit is not None
    assert claim.holds(per_packet) and not claim.holds(per_bit)
    assert per_packet > 5 * per_bit


def test_study_errors_without_errors_reads_the_study_cell():
    cells, _ = globalhawk.load_cells([FIXTURE])
    assert cells.goodput("study-errors", "ftp", "none", 600.0, 0.0) == cells.goodput("study", "ftp", "none", 600.0, 0.0)


def test_a_page_without_its_marker_or_a_directory_without_results_is_one_line(tmp_path):
    with pytest.raises(SatbedError, match="no line"):
        globalhawk.write_page([FIXTURE], page_in(tmp_path, "# no marker\n"), "test")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SatbedError, match="no results.sqlite"):
        globalhawk.write_page([str(empty)], page_in(tmp_path), "test")
    copy = tmp_path / "copy"
    shutil.copytree(FIXTURE, copy)
    cp = satbed("study-page", str(copy), "--page", str(tmp_path / "missing.md"), timeout=60)
    assert cp.returncode == 2 and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def _row(client: str, pep: str, rtt: float, goodput: float, options: str = "", variant: str = "") -> "globalhawk.CellRow":
    params = {"client": client, "pep": pep, "rtt": rtt, "ber": 1e-5, "pep_options": options, "variant": variant}
    return globalhawk.CellRow(hash=f"{client}{pep}{rtt}{options}", experiment="x", params=params, config={},
                              repetition=0, status="ok", goodput_bps=goodput)


@pytest.mark.parametrize("cubic_gain, verdict", [(1.0, "the congestion control is the cause"),
                                                 (2.0, "the congestion control alone does not explain it")])
def test_the_pepd_leg_experiment_is_read_from_its_cells(cubic_gain, verdict):
    """The explanation of rows 2 and 4 quotes the experiment's cells, and
    its conclusion follows them: a different outcome reads differently."""
    rows = [_row(c, "none", 0.0, 2e6) for c in ("ftp", "scp")]
    rows += [_row(c, "pepd", 0.0, 6e6) for c in ("ftp", "scp")]
    rows += [_row(c, "pepd", 0.0, 2e6 * cubic_gain, o) for c in ("ftp", "scp")
             for o in ("cc=cubic", "cc=cubic buffer_factor=1")]
    text = globalhawk_claims.cubic_leg(globalhawk_claims.Cells(rows), 0.0)
    assert f"{cubic_gain:.2f}-{cubic_gain:.2f}x" in text and "3.00-3.00x on BBR" in text and verdict in text
    assert "untested" in globalhawk_claims.cubic_leg(globalhawk_claims.Cells(rows[:4]), 0.0)
    table = globalhawk._pepd_leg_table(globalhawk_claims.Cells(rows))
    assert table[2] == f"| ftp | 0 ms | 2,000 | 6,000 | {2000 * cubic_gain:,.0f} | {2000 * cubic_gain:,.0f} |"


def test_a_time_sequence_figure_needs_its_cell_or_its_earlier_drawing(tmp_path):
    """Without the cell's directory a figure is said not drawn, unless the PNG
    drawn from that very cell is already beside the page."""
    row = _row("ftp", "none", 600.0, 8e5, variant="study-errors")
    figures = str(tmp_path / "global-hawk")
    out = globalhawk._tsg_figures(globalhawk_claims.Cells([row]), figures)
    assert out[0].startswith("- Figure 2: FTP without a PEP") and "no stored cell directory" in out[0]
    assert any("no stored cell)" in line for line in out[1:])
    os.makedirs(figures)
    open(os.path.join(figures, f"tsg-{row.hash}-lan_a.png"), "wb").write(b"png")
    out = globalhawk._tsg_figures(globalhawk_claims.Cells([row]), figures)
    assert f"![Figure 2: FTP without a PEP, Client A's side](global-hawk/tsg-{row.hash}-lan_a.png)" in out


def test_a_stored_run_is_read_without_being_changed(tmp_path):
    """The page reads the stores kept in the repository read-only: an older
    store format is read as it is, never upgraded in place."""
    import hashlib
    before = {name: hashlib.sha256(open(os.path.join(FIXTURE, name), "rb").read()).hexdigest()
              for name in os.listdir(FIXTURE)}
    assert satbed("study-page", FIXTURE, "--page", page_in(tmp_path), timeout=120).returncode == 0
    after = {name: hashlib.sha256(open(os.path.join(FIXTURE, name), "rb").read()).hexdigest()
             for name in os.listdir(FIXTURE)}
    assert after == before


def _grid_store(d, cells: list[tuple[str, str, str, str, float, float, str, float | None]], expected: int) -> None:
    """A stored run of the whole grid (experiment `globalhawk`): variant,
    client, pep, options, rtt, ber, status, goodput per cell."""
    from satbed.results.store import Store
    with Store(os.path.join(d, "results.sqlite")) as store:
        run = store.begin_run("globalhawk", "/x/scenarios/globalhawk.yaml", 0, expected, 0, {"cores": 2})
        for i, (variant, client, pep, options, rtt, ber, status, goodput) in enumerate(cells):
            params = {"client": client, "pep": pep, "pep_options": options, "rtt": rtt, "ber": ber,
                      "variant": variant, "size": 100 << 20}
            store.put(globalhawk.CellRow(hash=f"grid{i:012d}", experiment="globalhawk", params=params, config={},
                                         repetition=0, status=status, goodput_bps=goodput, seconds=120.0,
                                         metrics={"loadavg": [1.5, 1, 1], "host_cpu": {"steal_fraction": 0.002}}))
        store.end_run(run, "interrupted")


@pytest.mark.parametrize("expected, charts", [(636, "Drawn from the claims' cells (20 MB per cell; the whole grid "
                                                  "below is not complete yet)"),
                                             (4, "Drawn from the whole grid (100 MB per cell)")])
def test_the_whole_grid_has_its_own_section_and_feeds_the_claims_once_complete(tmp_path, expected, charts):
    """The grid's 100 MB cells fill its tables and its CSV. While the grid
    is incomplete the claims table reads the claims experiment's cells, even
    where the grid holds a cell of the same condition with another goodput;
    once it is complete the table, and Charts 1-3, read the grid, and the
    claims experiment is read again beside it."""
    grid = tmp_path / "full"
    grid.mkdir()
    _grid_store(str(grid), [
        ("study-errors", "ftp", "none", "", 600.0, 1e-5, "ok", 123_456.0),     # row 5's condition, other value
        ("today", "scp", "none", "", 600.0, 1e-5, "limited", 70_000.0),
        ("today", "scp", "pepd", "wan=rate", 600.0, 1e-5, "ok", 7_300_000.0),
        ("study-scps", "scp", "scps", globalhawk_grid.SCPS_OPTIONS, 600.0, 1e-5, "failed", None),
    ], expected)
    page = page_in(tmp_path)
    cp = satbed("study-page", FIXTURE, str(grid), "--page", page, timeout=120)
    assert cp.returncode == 0, cp.stderr
    generated = open(page).read().split(globalhawk.MARKER)[1]
    row5 = next(line for line in generated.splitlines() if line.startswith("| 5 | Figure 2 |"))
    if expected == 4:
        assert [c.strip() for c in row5.split("|")][6] == "123 kbit/s (**disagrees**)"
        assert "Read again from the claims experiment's 20 MB cells" in generated
    else:
        want = stored_goodput("study-errors", "ftp", "none", 600.0, 1e-5)
        assert [c.strip() for c in row5.split("|")][6] == f"{want / 1e3:.0f} kbit/s (agrees)"
        assert "Read again from the whole grid's 100 MB cells stored so far" in generated
    assert "### The whole grid" in generated and f"Cells stored: 4 of {expected} (1 failed, 1 limited, 2 ok)" in generated
    assert charts in generated
    # 600 ms, BER 1e-5 is the last of the twelve columns.
    lines = generated.splitlines()
    today = lines.index("#### Today's hosts, errors per bit")
    scp_none = next(line for line in lines[today:] if line.startswith("| scp | no PEP |"))
    assert scp_none.rstrip(" |").split("|")[-1].strip() == "0.07*" and "| · |" in scp_none
    scp_rate = next(line for line in lines[today:] if line.startswith("| scp | pepd, rate-based WAN leg |"))
    assert scp_rate.rstrip(" |").split("|")[-1].strip() == "7.30"
    scps = next(line for line in lines if line.startswith("| scp | SCPS gateway |"))
    assert scps.rstrip(" |").split("|")[-1].strip() == "failed"
    rows = list(csv.DictReader(open(tmp_path / "global-hawk" / "grid.csv")))
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok", "limited", "failed"}
    assert next(r for r in rows if r["status"] == "limited")["goodput_bps"] == "70000"


def test_quic_rows_sit_in_today_s_table_and_beside_scp_and_saratoga(tmp_path):
    """The grid's QUIC cells (variant quic, no PEP) are rows of today's
    table and of the QUIC comparison at 600 ms; a grid without them has no
    such section."""
    grid = tmp_path / "full"
    grid.mkdir()
    _grid_store(str(grid), [
        ("quic", "quic", "none", "", 600.0, 0.0, "ok", 6_650_000.0),
        ("quic", "http3", "none", "", 600.0, 1e-5, "limited", 95_000.0),
        ("today", "scp", "pepd", "", 600.0, 1e-5, "ok", 3_250_000.0),
        ("today", "saratoga", "none", "", 600.0, 1e-5, "ok", 4_450_000.0),
    ], 4)
    page = page_in(tmp_path)
    cp = satbed("study-page", FIXTURE, str(grid), "--page", page, timeout=120)
    assert cp.returncode == 0, cp.stderr
    lines = open(page).read().split(globalhawk.MARKER)[1].splitlines()
    today = lines.index("#### Today's hosts, errors per bit")
    quic = next(line for line in lines[today:] if line.startswith("| quic | no PEP |"))
    assert [c.strip() for c in quic.split("|")][-4] == "6.65"     # 600 ms, BER 0: the tenth of twelve
    beside = lines.index("#### QUIC beside SCP and Saratoga at 600 ms, today's hosts")
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.rstrip(" |").split("|")[2:]]
             for line in lines[beside:beside + 14] if line.startswith("| ") and not line.startswith("| |")}
    assert cells["QUIC, one stream (quic)"] == ["6.65", "·", "·"]
    assert cells["HTTP/3 (http3)"] == ["·", "·", "0.10*"]
    assert cells["scp, pepd TCP WAN leg"][2] == "3.25" and cells["Saratoga"][2] == "4.45"
    assert cells["scp, no PEP"] == ["·", "·", "·"]
    without = tmp_path / "tcp-only"
    without.mkdir()
    _grid_store(str(without), [("today", "scp", "pepd", "", 600.0, 1e-5, "ok", 3_250_000.0)], 1)
    (tmp_path / "p2").mkdir()
    page2 = page_in(tmp_path / "p2")
    assert satbed("study-page", FIXTURE, str(without), "--page", page2, timeout=120).returncode == 0
    assert "QUIC beside" not in open(page2).read()


def _window_row(client: str, pep: str, repetition: int, lan_win: int, experiment: str = "globalhawk-window-spread"
                ) -> "globalhawk.CellRow":
    """A cell of today's hosts at 600 ms and 1e-5 whose client advertised at most lan_win."""
    params = {"client": client, "pep": pep, "rtt": 600.0, "ber": 1e-5, "pep_options": "", "variant": "today",
              "size": 100 << 20, "time_limit": 300.0, "seed": 1}
    acks = {"win_max": lan_win, "sack_pkts": 10}
    main = {"data_direction": "b2a", "b2a": {}, "a2b": acks}
    metrics = {"analysis": {"lan_a": {"main": main}, "wan_a": {"main": main}}}
    return globalhawk.CellRow(hash=f"{experiment}{client}{pep}{repetition}", experiment=experiment, params=params,
                              config={}, repetition=repetition, status="limited", goodput_bps=80e3, metrics=metrics)


def test_the_spread_section_counts_the_runs_that_uphold_each_verdict():
    """Row 15 (SCP's window grows to about 1 MB) upheld by two runs of three
    is the run's verdict, not the host's; row 11 (FTP's window below the
    bandwidth-delay product) upheld by none is settled."""
    spread = [_window_row("scp", "none", k, w) for k, w in enumerate((1_654_784, 467_456, 1_300_000))]
    spread += [_window_row("ftp", "none", k, 250_000) for k in range(3)]
    claims = globalhawk_claims.Cells([_window_row("scp", "none", 0, 467_456, "globalhawk-claims")])
    lines = globalhawk_spread.section(spread, claims, globalhawk_claims.Cells([]))
    row15 = next(line for line in lines if line.startswith("| 15 |"))
    assert row15.endswith("| 2 of 3 |") and "467,456 B (**disagrees**)" in row15
    row11 = next(line for line in lines if line.startswith("| 11 |"))
    assert row11.endswith("| 0 of 3 |")
    assert any("disagree with each other on rows 13, 15" in line for line in lines), lines
    assert any("same verdict on rows 5, 11, 16" in line for line in lines), lines


def _limited(hash_: str, idle_ms: float) -> "globalhawk.CellRow":
    params = {"client": "scp", "pep": "scps", "pep_options": globalhawk_grid.SCPS_OPTIONS, "rtt": 600.0,
              "ber": 1e-5, "variant": "study-scps", "size": 100 << 20}
    leg = {"idletime_max_ms": idle_ms, "rexmt_pkts": 18}
    metrics = {"bytes": 73_105_408, "analysis": {"lan_a": {"main": {"data_direction": "b2a", "b2a": leg}}}}
    return globalhawk.CellRow(hash=hash_, experiment="globalhawk", params=params, config={}, repetition=0,
                              status="limited", goodput_bps=1.95e6, metrics=metrics)


@pytest.mark.parametrize("idle_ms, mark", [(65_000.0, "1.95†"), (5_500.0, "1.95*")])
def test_an_unfinished_cell_whose_data_went_silent_is_marked_stalled_not_slow(idle_ms, mark):
    """A time-limited cell whose client leg was silent for minutes is listed
    as a stall, with what it delivered; one that kept moving stays `*`."""
    lines = globalhawk_grid.tables(globalhawk_grid.Grid([_limited("c0ffee", idle_ms)]))
    row = next(line for line in lines if line.startswith("| scp | SCPS gateway |"))
    assert row.rstrip(" |").split("|")[-1].strip() == mark
    listed = [line for line in lines if line.startswith("- `c0ffee`")]
    if mark.endswith("†"):
        assert listed == ["- `c0ffee`: scp with scps (study-scps), 600 ms, 1e-5: 69.7 of 100 MB delivered; silent "
                          "for 65 s at most; 18 segments retransmitted on the client's leg, where the emulator "
                          "loses nothing."]
    else:
        assert listed == []


def test_the_spread_section_names_a_table_verdict_that_every_repeat_overturns():
    """Row 11: the claims run's window is within 64 KB (agrees), every repeat's is not."""
    spread = [_window_row("ftp", "none", k, 163_840) for k in range(3)]
    claims = globalhawk_claims.Cells([_window_row("ftp", "none", 0, 65_535, "globalhawk-claims")])
    lines = globalhawk_spread.section(spread, claims, globalhawk_claims.Cells([]))
    assert any(line.startswith("On row 11 the claims experiment's verdict is not the one every repeat gives")
               for line in lines), lines


def test_a_stalled_cell_is_a_marked_point_of_its_chart_line():
    """Chart 2's SCPS line for SCP keeps the stalled cell's point (at BER
    1e-5, the third) and marks it; a cell that kept moving is not marked."""
    grid = globalhawk_grid.Grid([_limited("c0ffee", 65_000.0)])
    points, stalls = globalhawk_grid._series(grid, ("study-errors", "study-scps"), "scp", "scps",
                                             globalhawk_grid.SCPS_OPTIONS, "ber", 600.0)
    assert points == stalls == [(2, 1.95)]
    grid = globalhawk_grid.Grid([_limited("c0ffee", 5_500.0)])
    points, stalls = globalhawk_grid._series(grid, ("study-errors", "study-scps"), "scp", "scps",
                                             globalhawk_grid.SCPS_OPTIONS, "ber", 600.0)
    assert points == [(2, 1.95)] and stalls == []
