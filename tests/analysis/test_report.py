"""HTML report and CLI over a run directory."""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

from analysis.report import analyze_run, write_report

REPO = Path(__file__).resolve().parents[2]


def _images(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', html)]


def test_report_sections_and_images(run_dir: Path) -> None:
    analyze_run(run_dir, graphs=False)
    measured = {n: (run_dir / n).read_bytes() for n in ("result.json", "analysis.json")}
    path = write_report(run_dir)
    assert path == run_dir / "report.html"
    html = path.read_text()
    for section in ("<h2>Results</h2>", "<h3>Per capture point</h3>", "<h2>Configuration</h2>",
                    "<h2>Environment</h2>", "<h2>All result metrics</h2>",
                    "Vantage lan_a", "Vantage wan_a", "Vantage wan_b", "Vantage lan_b"):
        assert section in html, section
    # Results lead; settings follow the graphs, folded.
    assert html.index("<h2>Results</h2>") < html.index("Vantage lan_a") < html.index(
        "<h2>Configuration</h2>")
    text = re.sub(r'src="data:[^"]+"', "", html)
    assert not re.search(r"\de\+\d", text)  # no 1.79537e+09 anywhere
    assert "retransmitted packets" in html and "tcptrace RTT avg (ms)" in html
    assert "RTT min / avg / max (ms), every ACK" in html and "SACK blocks (ACKs with SACK)" in html
    # The stored configuration, environment and metrics, as the runner wrote them.
    assert "nuttcp-tcp" in html and "10.99.99.1/24" in html
    assert "tcpdump version 4.99.3" in html and "c0ac865fdff0e74625fa5ea4200b3201624f0889" in html
    assert "416125a984faadb0c084ffb04d3497abef5c18696cb0070a4737b983594d5b91" in html
    assert "sender view" in html and "receiver view" in html
    # The docs pages that explain it, as files of this checkout, with their paths in words.
    for rel in ("docs/guide/analysis.md", "docs/guide/results.md"):
        assert (REPO / rel).is_file()
        assert f'href="{(REPO / rel).as_uri()}"><code>{rel}</code>' in html
    assert 'class="error">truncated capture wan_a.pcap' in html
    assert "not a pcap file" in html
    imgs = _images(html)
    assert len(imgs) == 4
    assert all(i.startswith(b"\x89PNG\r\n\x1a\n") and len(i) > 20_000 for i in imgs)
    # No external references: the file stands alone.
    assert not re.search(r'src="(?!data:)', html)
    # A report writes its page and images only; the stored metrics stay as measured.
    assert (run_dir / "analysis" / "lan_a" / "tsg_full.png").is_file()
    assert {n: (run_dir / n).read_bytes() for n in measured} == measured


def test_report_redraws_from_stored_files(run_dir: Path) -> None:
    write_report(run_dir)  # analyses on its own when the run has no analysis.json
    lan_a = run_dir / "analysis" / "lan_a"
    for png in lan_a.glob("*.png"):
        png.unlink()
    html = write_report(run_dir).read_text()
    assert len(_images(html)) == 4 and (lan_a / "tsg_window.png").is_file()
    # Without the .xpl files the graphs come back from the capture.
    for xpl in lan_a.glob("*.xpl"):
        xpl.unlink()
    html = write_report(run_dir).read_text()
    assert len(_images(html)) == 4 and (lan_a / "a2b_tsg.xpl").is_file()


def test_report_without_side_files(tmp_path: Path) -> None:
    run = tmp_path / "bare"
    run.mkdir()
    html = write_report(run).read_text()
    assert "config.json missing" in html and "environment.json missing" in html
    # Each in the overview table and in its vantage's section.
    assert html.count("capture missing") == 8


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/usr/bin/python3", "-m", "analysis", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_cli(run_dir: Path, tmp_path: Path) -> None:
    res = _cli(str(run_dir), "--window", "0.2", "0.25")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(run_dir / "report.html")
    assert "0.25 s from 0.200 s" in (run_dir / "report.html").read_text()
    bad = _cli(str(tmp_path / "nope"))
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and "nope" in bad.stderr
