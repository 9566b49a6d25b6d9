"""The split-gateway and TCP spoofing study pages (`satbed study-page`,
each study's `results` and its headlines), from stored matrix runs:
tests/data/split-gateways-page and tests/data/spoofing-page hold the cells
of the real runs the pages are made from (`satbed matrix
scenarios/split-gateways.yaml`, `satbed matrix
experiments/spoofing-claims.yaml`), each cell's metrics and configuration
cut down to what the pages read, and the cells' revisions."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3

import pytest

from satbed.core.errors import SatbedError
from satbed.model import experiment, linkprofile, profiles
from satbed.report import globalhawk, studies
from satbed.report.studies import multiflow_ber, multiflow_cells, spoofing, split_gateways

from satbed_testlib import REPO, satbed

DATA = os.path.join(REPO, "tests", "data")
SPLIT = os.path.join(DATA, "split-gateways-page")
SPOOF = os.path.join(DATA, "spoofing-page")
HEAD = "# The page\n\nProse above the marker, kept as written.\n\n"


def page_in(tmp_path, name: str) -> str:
    p = tmp_path / name
    p.write_text(HEAD + globalhawk.MARKER + "\nstale numbers\n")
    return str(p)


def generated_rows(page: str) -> list[list[str]]:
    """The headline rows of a generated page, as lists of cells."""
    text = open(page).read()
    head, generated = text.split(globalhawk.MARKER)
    assert head == HEAD and "stale numbers" not in generated
    return [[c.strip() for c in line.split("|")[1:-1]] for line in generated.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()]


def stored(fixture: str, **params) -> list[dict]:
    """The metrics of the measured cells with these parameters (None: not set)."""
    db = sqlite3.connect(os.path.join(fixture, "results.sqlite"))
    return [json.loads(m) for p, m in db.execute("SELECT params, metrics FROM cells WHERE status IN ('ok', 'limited')")
            if all(json.loads(p).get(k) == v for k, v in params.items())]


def test_the_split_gateway_page_is_written_from_the_stored_cells(tmp_path):
    page = page_in(tmp_path, "split-gateways.md")
    cp = satbed("study-page", SPLIT, "--page", page, timeout=120)
    assert cp.returncode == 0, cp.stderr
    rows = generated_rows(page)
    assert len(rows) == len(split_gateways._headlines())
    # Row 3, large windows: today's and the study's link throughput as the captures stored them.
    for column, variant in ((3, "large-windows"), (4, "large-windows-study-q10")):
        (m,) = stored(SPLIT, variant=variant)
        sat = next(v for v, c in m["captures"].items() if c["node"] == "sat")
        want = m["analysis"][sat]["main"]["summary"]["throughput_bps"] / 1e3
        assert rows[2][column].startswith(f"{want:.0f} kbit/s ("), rows[2]
    # Every row has a value in both conditions: no "no cell" left.
    assert all("no cell" not in r[3] and "no cell" not in r[4] for r in rows), rows
    assert "`scenarios/split-gateways.yaml`" in open(page).read()


def test_a_verdict_follows_the_numbers(tmp_path):
    """The verdicts are computed: large windows at 850 kbit/s would agree with the paper."""
    copy = tmp_path / "copy"
    shutil.copytree(SPLIT, copy)
    db = sqlite3.connect(copy / "results.sqlite")
    for h, p, m in db.execute("SELECT hash, params, metrics FROM cells").fetchall():
        if json.loads(p).get("variant") == "large-windows":
            m = json.loads(m)
            for a in m["analysis"].values():
                a["main"]["summary"]["throughput_bps"] = 850e3
            db.execute("UPDATE cells SET metrics = ? WHERE hash = ?", (json.dumps(m), h))
    db.commit()
    db.close()
    cells, _ = globalhawk.load_cells([str(copy)])
    row = split_gateways._headlines()[2]
    assert row.holds(row.today(cells.rows))
    original, _ = globalhawk.load_cells([SPLIT])
    assert not row.holds(row.today(original.rows))


def test_the_spoofing_page_is_written_from_the_stored_cells(tmp_path):
    page = page_in(tmp_path, "tcp-spoofing.md")
    cp = satbed("study-page", SPOOF, "--page", page, timeout=120)
    assert cp.returncode == 0, cp.stderr
    rows = generated_rows(page)
    assert len(rows) == len(spoofing._headlines())
    # Row 3: the sender's gain for one packet, no competing flow, from the stored views.
    # Today the user pulls the file (a download); under the study's conditions, for the
    # sender's view, the sender opens the connection (an upload from h5) with ns-2's
    # one-segment initial window on the end hosts.
    for column, direction, profile in ((3, "download", None), (4, "upload", "ns2-reno-sack-iw1")):
        def mean_sender(pep: str) -> float:
            values = [m["end_to_end_throughput"]["sender_bps"]
                      for m in stored(SPOOF, size=spoofing.PACKET, direction=direction, pep=pep,
                                      **{spoofing.FLOWS: 0, "profiles.h5": profile, "links.inet.rate": None})]
            assert len(values) == 3
            return sum(values) / len(values)
        want = (mean_sender("pepd") - mean_sender("none")) / mean_sender("none") * 100
        assert rows[2][column].startswith(f"{want:+.0f} % ("), rows[2]
    assert all("no cell" not in r[3] and "no cell" not in r[4] for r in rows), rows


def test_each_study_is_found_by_its_page_and_recognises_its_cells():
    for fixture, page, module in ((SPLIT, "docs/studies/split-gateways.md", split_gateways),
                                  (SPOOF, "docs/studies/tcp-spoofing.md", spoofing)):
        assert studies.for_page(page) is module.STUDY
        cells, _ = globalhawk.load_cells([fixture])
        assert studies.study_of(cells.rows) is module.STUDY


def test_a_page_without_its_marker_is_one_line(tmp_path):
    p = tmp_path / "split-gateways.md"
    p.write_text("# no marker\n")
    with pytest.raises(SatbedError, match="no line"):
        globalhawk.write_page([SPLIT], str(p), "test")


def test_the_study_conditions_reach_the_cells():
    """What the pages compare is what the cells run: the sender opens the
    spoofing study's connection, and the split-gateway study's variants set
    the T1 queue and the hosts' profiles."""
    spoof = experiment.load(os.path.join(REPO, "experiments", "spoofing-claims.yaml"), ["tcp"])
    by_variant = {c.params["variant"]: c.config for c in spoof.cells}
    assert by_variant["end-to-end"]["endpoints"] == ["h1", "h5"]
    assert by_variant["end-to-end"]["direction"] == "download"
    for v in ("sender-opens-spoofed", "ns2-iw1-end-to-end", "slow-internet-spoofed"):
        assert by_variant[v]["endpoints"] == ["h5", "h1"] and by_variant[v]["direction"] == "upload", v
    assert by_variant["ns2-iw1-end-to-end"]["profiles"]["h5"] == "ns2-reno-sack-iw1"
    assert by_variant["sender-opens-spoofed"]["profiles"]["h5"] == "reno-sack-1500"    # the scenario's own

    split = experiment.load(os.path.join(REPO, "scenarios", "split-gateways.yaml"), ["ftp"])
    cells = {c.params["variant"]: c for c in split.cells}
    for variant in split_gateways.STUDY_VARIANTS.values():
        assert cells[variant].params["queue"] == 10, variant
    assert cells["large-windows-study-q10"].config["profiles"]["server"] == "large-windows-195k-reno"


@pytest.mark.parametrize("name", ["split-gateways", "tcp-spoofing"])
def test_the_committed_pages_are_what_their_stored_runs_give(tmp_path, name):
    """docs/studies/NAME.md's generated part is what the run stored beside it
    (docs/studies/NAME) gives: regenerated into a copy, the same to the byte."""
    doc = os.path.join(REPO, "docs", "studies", f"{name}.md")
    copy = tmp_path / f"{name}.md"
    shutil.copy(doc, copy)
    run = tmp_path / "stored" / name     # the run table names a run by its directory
    shutil.copytree(os.path.join(REPO, "docs", "studies", name), run)
    globalhawk.write_page([str(run)], str(copy), f"satbed study-page docs/studies/{name} --page docs/studies/{name}.md")
    assert open(copy, encoding="utf-8").read() == open(doc, encoding="utf-8").read()


def test_row_6_reports_the_gateways_lead_over_hosts_at_the_study_rate(tmp_path):
    """Row 6's explanation cites the receiver's-window cells (the window the
    client advertised, the hosts' link rate, the download-time ratio) and
    the send-buffer cells before them: each buffer's link rate and
    retransmissions without gateways, and the ratio under the last buffer,
    as stored."""
    page = page_in(tmp_path, "split-gateways.md")
    assert satbed("study-page", SPLIT, "--page", page, timeout=120).returncode == 0
    why = generated_rows(page)[5][6]

    def on_link(cell: dict) -> dict:
        sat = next(v for v, c in cell["captures"].items() if c["node"] == "sat")
        return cell["analysis"][sat]["main"]["summary"]

    for kb in split_gateways.SEND_BUFFERS_KB:
        (sat,) = stored(SPLIT, variant=f"satellite-study-q10-snd{kb}k")
        summary = on_link(sat)
        assert (f"{kb} KB: {summary['throughput_bps'] / 1e3:.0f} kbit/s, "
                f"{summary['rexmt_pkts']:.0f} segments retransmitted") in why, why
    (sat,) = stored(SPLIT, variant=split_gateways.AT_STUDY_RATE["satellite"])
    (gw,) = stored(SPLIT, variant=split_gateways.AT_STUDY_RATE["gateways"])
    assert (f"move {on_link(sat)['throughput_bps'] / 1e3:.0f} kbit/s and the gateways download "
            f"{sat['seconds'] / gw['seconds']:.2f}x faster") in why, why
    # The window held at the receiver: what the client advertised, what the hosts moved, the ratio.
    (sat,) = stored(SPLIT, variant=split_gateways.AT_RECEIVER["satellite"])
    (gw,) = stored(SPLIT, variant=split_gateways.AT_RECEIVER["gateways"])
    summary = on_link(sat)
    assert (f"advertises at most {summary['receiver_win_max']:,.0f} B and the hosts move "
            f"{summary['throughput_bps'] / 1e3:.0f} kbit/s") in why, why
    assert f"download {sat['seconds'] / gw['seconds']:.2f}x faster" in why, why


def test_the_error_models_and_the_hosts_window_reach_the_cells():
    """The ACTS error-model variants run their profiles on the uplink (each
    a mean of 1e-4 after 40 s at 1e-9), the split-gateway send-buffer
    variants give the sender each buffer tried under the study's conditions,
    and the receive-buffer variants the client its NcFTP request."""
    acts = {c.params["variant"]: c.config for c in
            experiment.load(os.path.join(REPO, "scenarios", "multiflow-ber.yaml"), ["ping"]).cells}
    for variant, _ in multiflow_ber.ERROR_MODELS:
        path = acts[variant]["links"]["sat"]["a_to_b"]["profile"]
        points = linkprofile.points(path)
        key = "loss" if variant.endswith("-packet") else "ber"
        means, after = multiflow_cells._profile_seconds(points, key, 0.0)
        assert means[39] == pytest.approx(1e-9) and after == 0, variant
        assert means[40:130] == pytest.approx([1e-4] * 90), variant
        assert acts[variant]["profiles"] == acts[multiflow_ber.VERDICT]["profiles"], variant
    split = {c.params["variant"]: c for c in
             experiment.load(os.path.join(REPO, "scenarios", "split-gateways.yaml"), ["ftp"]).cells}
    for kb in split_gateways.SEND_BUFFERS_KB:
        for variant in split_gateways._at_send_buffer(kb).values():
            assert split[variant].params["queue"] == 10, variant
            assert split[variant].config["profiles"] == {"server": f"default-64k-reno-snd{kb}k",
                                                          "client": "default-64k-reno"}, variant
        wmem = profiles.load(f"default-64k-reno-snd{kb}k").sysctls["net.ipv4.tcp_wmem"]
        assert wmem == f"4096 {kb * 1024} {kb * 1024}", kb
    # The receiver's window: the client's NcFTP asks for half the buffer the page names (Linux doubles it).
    for variant in split_gateways.AT_RECEIVER.values():
        assert split[variant].params["queue"] == 10, variant
        assert split[variant].config["profiles"] == {"server": "default-64k-reno", "client": "default-64k-reno"}
        assert split[variant].config["client_rcvbuf"] == 26_800, variant
