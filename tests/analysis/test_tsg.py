"""xplot parsing and matplotlib rendering of tcptrace's graphs."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from analysis.tsg import (Window, default_window, draw_from_xpl, find_xpl, generate_xplot,
                          parse_xplot, render, XplotError)

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden.pcap"

SAMPLE = """dtime signed
title
10.0.0.1:1_==>_10.0.0.2:2 (time sequence graph)
xlabel
relative time
ylabel
sequence offset
white
orange
diamond 0.000000 0
atext 0.000000 1
SYN
white
darrow 0.1 1
uarrow 0.1 1449
line 0.1 1 0.1 1449
green
line 0.0 1 0.2 1
dtick 0.2 1
atext 0.2 1
3
yellow
line 0.0 65161 0.2 65161
utick 0.2 65161
diamond 0.3 5 white
red
darrow 0.4 1
atext 0.4 1449
R
purple
htick 0.35 1449
bogus 1 2 3
go
line 9 9 9 9
"""


def test_parse_xplot_sample() -> None:
    xp = parse_xplot(SAMPLE)
    assert (xp.xtype, xp.ytype) == ("dtime", "signed")
    assert xp.title.endswith("(time sequence graph)")
    assert xp.xlabel == "relative time" and xp.ylabel == "sequence offset"
    kinds = [e.kind for e in xp.elements]
    assert kinds.count("line") == 3  # the line after "go" is ignored
    syn = xp.elements[1]
    assert (syn.kind, syn.colour, syn.text) == ("atext", "orange", "SYN")
    dup = [e for e in xp.elements if e.kind == "dtick"][0]
    assert dup.colour == "green"
    # A trailing colour applies to its element only.
    push = [e for e in xp.elements if e.kind == "diamond"][1]
    assert push.colour == "white"
    assert [e for e in xp.elements if e.kind == "darrow"][1].colour == "red"
    r = [e for e in xp.elements if e.text == "R"][0]
    assert r.colour == "red" and r.coords == (0.4, 1449.0)
    assert xp.bounds() == (0.0, 0.4, 0.0, 65161.0)
    w = default_window(xp, duration=1.0)
    assert w.duration == pytest.approx(0.4 / 5)
    assert w.start <= 0.4 <= w.start + w.duration or w.start == pytest.approx(0.4 - w.duration)


def test_parse_xplot_rejects_garbage() -> None:
    with pytest.raises(XplotError):
        parse_xplot("")
    with pytest.raises(XplotError):
        parse_xplot("only-one-token\n")


def _check_png(path: Path, min_bytes: int = 20_000) -> np.ndarray:
    assert path.is_file() and path.stat().st_size > min_bytes, path
    img = mpimg.imread(str(path))
    assert img.shape[0] == 700 and img.shape[1] == 1200, img.shape
    rgb = (img[:, :, :3] * 255).astype(np.uint8).reshape(-1, 3)
    colours = np.unique(rgb, axis=0)
    assert len(colours) > 20  # not a blank or flat image
    non_black = np.any(rgb > 40, axis=1).mean()
    assert 0.01 < non_black < 0.9
    return rgb


@pytest.fixture(scope="module")
def xpl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shutil.which("tcptrace"):
        pytest.skip("tcptrace not installed")
    out = tmp_path_factory.mktemp("xpl")
    files = generate_xplot(GOLDEN, out, 1)
    assert {p.name for p in files} >= {"a2b_tsg.xpl", "a2b_tput.xpl", "a2b_rtt.xpl"}
    return out


def _endpoints(xpl_dir: Path) -> tuple[str, str]:
    title = (xpl_dir / "a2b_tsg.xpl").read_text().splitlines()[2]
    src, dst = title.split(" ")[0].split("_==>_")
    return src, dst


def test_graphs_from_golden(xpl_dir: Path) -> None:
    src, dst = _endpoints(xpl_dir)
    assert find_xpl(xpl_dir, "tsg", src, dst).name == "a2b_tsg.xpl"
    assert find_xpl(xpl_dir, "tsg", dst, src).name == "b2a_tsg.xpl"
    graphs = draw_from_xpl(xpl_dir, src, dst)
    assert {"tsg_full", "tsg_window", "tput", "rtt"} <= set(graphs)
    for key in ("tsg_full", "tsg_window", "tput", "rtt"):
        _check_png(xpl_dir / graphs[key])
    rgb = _check_png(xpl_dir / "tsg_window.png")
    # The legend's colours and the data's: green ACKs, yellow window, red
    # retransmissions, purple SACKs, white segments on black.
    def count(r: int, g: int, b: int) -> int:
        return int(np.sum(np.all(np.abs(rgb.astype(int) - (r, g, b)) < 40, axis=1)))
    for colour in ((0, 224, 0), (255, 255, 0), (255, 48, 48), (192, 64, 255), (255, 255, 255)):
        assert count(*colour) > 100, colour
    assert count(0, 0, 0) > rgb.shape[0] // 3  # xplot's black background


def test_explicit_window(xpl_dir: Path, tmp_path: Path) -> None:
    src, dst = _endpoints(xpl_dir)
    for p in xpl_dir.glob("*.xpl"):
        shutil.copy(p, tmp_path / p.name)
    graphs = draw_from_xpl(tmp_path, src, dst, Window(0.3, 0.1))
    assert graphs["window_start_s"] == "0.300000" and graphs["window_duration_s"] == "0.1"
    _check_png(tmp_path / "tsg_window.png", min_bytes=5_000)


def test_render_empty_plot(tmp_path: Path) -> None:
    xp = parse_xplot("dtime signed\ntitle\nnothing\ngo\n")
    out = render(xp, tmp_path / "empty.png")
    assert out.stat().st_size > 1000
