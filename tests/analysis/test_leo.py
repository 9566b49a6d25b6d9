"""The LEO view of a run (analysis/leo.py) on a stored run, the files it
reads fed bad input (one line each), the handovers a profile carries, and
the ping client's echoes.

tests/fixtures/leo-run is cut from a 40 s ping over scenarios/leo.yaml:
its result.json's schedule clock, its echoes, its config's link (the
profile's path made relative; the test points it at the copy), the first
40 s of the leo-starlink profile with its two handovers in them, and
120 samples of pepG's buffer trace from a pepd run, moved onto the ping's
clock."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis import leo
from satbed.backends.clients import ping
from satbed.core.errors import SatbedError
from satbed.model import linkprofile
from satbed.report.gallery import gallery, gallery_html
from satbed.results.store import CellRow
from synth_pcap import ACK, Seg, write_pcap

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "leo-run"


def stored_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    cfg = json.loads((run / "config.json").read_text())
    for d in ("a_to_b", "b_to_a"):
        cfg["links"]["sat"][d]["profile"] = str(run / "leo.csv")
    (run / "config.json").write_text(json.dumps(cfg))
    return run


def origin(run: Path) -> float:
    return json.loads((run / "result.json").read_text())["schedule_clock_wall_s"]


def test_the_timeline_of_a_stored_ping_run(tmp_path):
    run = stored_run(tmp_path)
    tl = leo.timeline(run)
    assert tl is not None and tl.handovers == [15.0, 30.0]
    echoes = leo.read_echoes(str(run / "ping_echoes.csv"))
    assert len(tl.rtt) == len(echoes) == 40
    # Each echo at its send time on the profile's clock.
    assert tl.rtt[0] == pytest.approx((echoes[0][1] - origin(run), echoes[0][2]))
    # The profile's RTT: both directions' one-way delay (the same file each way).
    assert leo.delay_at(tl.expected, 20.0) == pytest.approx(2 * leo.delay_at(leo.profile_delays(str(run / "leo.csv")), 20.0))
    # The echoes follow it across the 30 s handover's 1.4 ms drop, within the chain's overhead.
    before = [v for t, v in tl.rtt if 25 < t < 30]
    after = [v for t, v in tl.rtt if 30 < t < 35]
    assert min(before) - max(after) > 1.0
    for t, v in tl.rtt:
        assert 0 < v - leo.delay_at(tl.expected, t) < 1.0
    assert list(tl.buffer) == ["pepG"] and max(v for _, v in tl.buffer["pepG"]) > 1e6
    assert tl.goodput == [] and "no goodput: no captures/lan_a.pcap" in tl.notes


def test_the_figure_marks_each_handover_on_every_panel(tmp_path):
    tl = leo.timeline(stored_run(tmp_path))
    fig = leo.draw(tl, "stored")
    axes = fig.get_axes()
    assert len(axes) == 2           # RTT and buffer: the stored run has no capture for goodput
    for ax in axes:
        vertical = {float(ln.get_xdata()[0]) for ln in ax.lines
                    if len(ln.get_xdata()) == 2 and ln.get_xdata()[0] == ln.get_xdata()[1]}
        assert vertical == {15.0, 30.0}
    echoes = next(ln for ln in axes[0].lines if ln.get_marker() == ".")
    assert list(echoes.get_ydata()) == [v for _, v in tl.rtt]


def test_the_run_report_section_writes_and_embeds_the_figure(tmp_path):
    run = stored_run(tmp_path)
    section = leo.report_section(run)
    png = run / "analysis" / "leo" / leo.FIGURE
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "2 handovers from the profile's handovers_s line".replace("'", "&#x27;") in section
    assert "data:image/png;base64," in section and "ping&#x27;s echoes" in section


def test_goodput_from_the_receivers_capture(tmp_path):
    run = stored_run(tmp_path)
    t0 = origin(run) + 5
    srv, ut = "10.99.20.254", "10.99.20.2"
    segs = [Seg(t0 + i / 100, srv, 5000, ut, 40000, 1 + 1000 * i, 1, ACK, 1000) for i in range(100)]
    (run / "captures").mkdir()
    write_pcap(run / "captures" / "lan_a.pcap", segs)
    tl = leo.timeline(run)
    step = 0.1
    assert sum(v for _, v in tl.goodput) * step / 8 == pytest.approx(100_000)
    assert 5 <= tl.goodput[0][0] and tl.goodput[-1][0] <= 6.1
    assert len(leo.draw(tl, "with goodput").get_axes()) == 3


def test_a_run_without_a_profile_has_no_section(tmp_path):
    run = stored_run(tmp_path)
    cfg = json.loads((run / "config.json").read_text())
    for d in ("a_to_b", "b_to_a"):
        cfg["links"]["sat"][d]["profile"] = None
    (run / "config.json").write_text(json.dumps(cfg))
    assert leo.report_section(run) == "" and not (run / "analysis" / "leo").exists()


def test_a_profile_from_a_trace_marks_no_handovers(tmp_path):
    run = stored_run(tmp_path)
    text = (run / "leo.csv").read_text().replace("# handovers_s: 15,30\n", "")
    (run / "leo.csv").write_text(text)
    tl = leo.timeline(run)
    assert tl.handovers is None and not any(
        len(ln.get_xdata()) == 2 and ln.get_xdata()[0] == ln.get_xdata()[1] for ln in leo.draw(tl, "").axes[0].lines)


BAD_FILES = [
    ("ping_echoes.csv", "seq,sent,rtt_ms\n", "line 1: the header is not seq,sent_epoch_s,rtt_ms"),
    ("ping_echoes.csv", "seq,sent_epoch_s,rtt_ms\n1,2\n", "line 2: 2 fields, not 3"),
    ("ping_echoes.csv", "seq,sent_epoch_s,rtt_ms\n1,x,3\n", "line 2: not a sequence number, a time and an RTT"),
    ("ping_echoes.csv", "seq,sent_epoch_s,rtt_ms\n1,5,nan\n", "line 2: a negative or non-finite value"),
    ("ping_echoes.csv", b"\xff\xfe", "not UTF-8 text"),
    ("pep/pepG/buffer.jsonl", '{"t": 1, "id": 2}\n{"t": "x"}\n', "line 2: not a buffer sample"),
    ("pep/pepG/buffer.jsonl", '{"t": 1, "id": true, "occupancy_bytes": 3}\n', "line 1: not a buffer sample"),
    ("pep/pepG/buffer.jsonl", "[[[[" * 100, "line 1: not a buffer sample"),
    ("leo.csv", "# handovers_s: 15,x\nt_s,delay_ms\n0,4\n", "handovers_s: 'x' is not a time"),
    ("leo.csv", "# handovers_s: 30,15\nt_s,delay_ms\n0,4\n", "handovers_s: '15' is before the one before it"),
    ("leo.csv", "# handovers_s: -1\nt_s,delay_ms\n0,4\n", "handovers_s: '-1' is not a time"),
    ("leo.csv", "# handovers_s: 1\n# handovers_s: 2\nt_s,delay_ms\n0,4\n", "line 2: a second handovers_s: line"),
    ("leo.csv", "t_s,delay_ms\n0,-4\n", "delay_ms -4.0 outside"),
    ("leo.csv", "t_s,delay_ms\n0,4\r5\n", "not CSV (new-line character seen in unquoted field"),
    ("result.json", "{}", "no schedule_clock_wall_s"),
    ("result.json", "[1]", "not a JSON object"),
]


@pytest.mark.parametrize("name, content, message", BAD_FILES, ids=[f"{n}: {m}" for n, _, m in BAD_FILES])
def test_bad_files_are_one_line(tmp_path, name, content, message):
    run = stored_run(tmp_path)
    path = run / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(SatbedError) as err:
        leo.timeline(run)
    assert message in str(err.value) and "\n" not in str(err.value)
    # The run's report says it in its section, and goes on.
    section = leo.report_section(run)
    assert "class=\"error\"" in section and "Traceback" not in section


def test_bad_rtt_samples_are_one_line(tmp_path):
    path = tmp_path / "rtt_every_ack.csv"
    for text, message in (("t,rtt\n", "the header is not epoch_s,rtt_ms"),
                          ("epoch_s,rtt_ms\n1,2,3\n", "line 2: not two numbers"),
                          ("epoch_s,rtt_ms\n1,-2\n", "line 2: a non-finite time or a negative RTT")):
        path.write_text(text)
        with pytest.raises(SatbedError, match=message):
            leo.read_rtt_samples(str(path))
    path.write_text("epoch_s,rtt_ms\n1.5,20.25\n")
    assert leo.read_rtt_samples(str(path)) == [(1.5, 20.25)]


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_any_echoes_file_is_read_or_refused_in_one_line(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("echoes") / "ping_echoes.csv"
    path.write_text("seq,sent_epoch_s,rtt_ms\n" + text)
    try:
        rows = leo.read_echoes(str(path))
    except SatbedError as e:
        assert "\n" not in str(e)
    else:
        assert all(seq >= 0 and sent >= 0 and rtt >= 0 for seq, sent, rtt in rows)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                          st.text(alphabet="0123456789.-e x", max_size=6)), max_size=8))
def test_any_handovers_line_is_read_or_refused_in_one_line(tmp_path_factory, cells):
    path = tmp_path_factory.mktemp("profile") / "p.csv"
    path.write_text(f"# {linkprofile.HANDOVERS} {','.join(cells)}\nt_s,delay_ms\n0,4\n")
    try:
        times = linkprofile.handovers(str(path))
    except SatbedError as e:
        assert "\n" not in str(e)
    else:
        assert times == sorted(times) and all(0 <= t <= linkprofile.MAX_TIME_S for t in times)


def test_handovers_round_trip_through_render(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(linkprofile.render([{"t_s": 0, "delay_ms": 4.5}], "made here", [15.0, 30.5]))
    linkprofile.check(str(path))
    assert linkprofile.handovers(str(path)) == [15.0, 30.5]
    path.write_text(linkprofile.render([{"t_s": 0, "delay_ms": 4.5}], "made here", []))
    assert linkprofile.handovers(str(path)) == []
    path.write_text(linkprofile.render([{"t_s": 0, "delay_ms": 4.5}], "made here"))
    assert linkprofile.handovers(str(path)) is None


PING_D = """PING 10.99.20.254 (10.99.20.254) 56(84) bytes of data.
[1795794146.551397] 64 bytes from 10.99.20.254: icmp_seq=1 ttl=64 time=9.12 ms
[1795794148.561000] 64 bytes from 10.99.20.254: icmp_seq=3 ttl=64 time=1000 ms

--- 10.99.20.254 ping statistics ---
3 packets transmitted, 2 received, 33.3333% packet loss, time 2003ms
rtt min/avg/max/mdev = 9.120/504.560/1000.000/495.440 ms
"""


def test_ping_records_every_echo_by_its_send_time():
    # Sent RTT before the reply's stamp (abs: a relative tolerance is seconds at epoch scale).
    assert ping.echoes(PING_D) == [(1, pytest.approx(1795794146.551397 - 0.00912, abs=1e-6), 9.12),
                                   (3, pytest.approx(1795794147.561, abs=1e-6), 1000.0)]
    assert ping.parse(PING_D)["received"] == 2
    # Without -D (no timestamps) there is nothing to place on the clock.
    assert ping.echoes(PING_D.replace("[1795794146.551397] ", "")) == [
        (3, pytest.approx(1795794147.561, abs=1e-6), 1000.0)]


def test_the_run_report_and_the_matrix_gallery_show_the_timeline(tmp_path):
    """A ping cell over the profile: no TCP to analyse, yet its report has
    the LEO section and the matrix report's gallery embeds the figure."""
    out = tmp_path / "matrix"
    cell = stored_run(tmp_path)
    shutil.move(str(cell), str(out / "cells" / "00000000000000aa"))
    cell = out / "cells" / "00000000000000aa"
    cfg = json.loads((cell / "config.json").read_text())
    for d in ("a_to_b", "b_to_a"):
        cfg["links"]["sat"][d]["profile"] = str(cell / "leo.csv")
    (cell / "config.json").write_text(json.dumps(cfg))
    row = CellRow(hash="00000000000000aa", experiment="leo", config={}, repetition=0, status="ok",
                  params={"client": "ping", "pep": "none", "rtt": 0.0, "ber": 0.0})
    shown = gallery(str(out), [row], stream=io.StringIO())
    assert "LEO link over time" in (cell / "report.html").read_text()
    assert f"<figcaption>analysis/leo/{leo.FIGURE}</figcaption>" in "\n".join(gallery_html(str(out), shown))
    # Beside a TCP cell's zoomed graph the timeline is embedded too, not only linked.
    (cell / "analysis" / "wan_b").mkdir(parents=True)
    (cell / "analysis" / "wan_b" / "tsg_window.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    page = "\n".join(gallery_html(str(out), gallery(str(out), [row], stream=io.StringIO())))
    assert f"<figcaption>analysis/leo/{leo.FIGURE}</figcaption>" in page
    assert "<figcaption>analysis/wan_b/tsg_window.png</figcaption>" in page
