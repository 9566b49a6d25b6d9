"""Run-level views: one zoom window for every vantage, a UDP view for Saratoga."""

from __future__ import annotations

import html
import ipaddress
import shutil
import struct
from pathlib import Path

import pytest

from analysis.report import write_report
from analysis.run import analyze_run
from analysis.tsg import Window, time_of_day

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden.pcap"


def shifted(src: Path, dst: Path, by_s: float) -> None:
    """A copy of a classic (microsecond, little-endian) pcap with every timestamp moved."""
    blob = bytearray(src.read_bytes())
    off = 24
    while off + 16 <= len(blob):
        sec, usec, caplen, _ = struct.unpack_from("<IIII", blob, off)
        t = sec * 1_000_000 + usec + round(by_s * 1e6)
        struct.pack_into("<II", blob, off, t // 1_000_000, t % 1_000_000)
        off += 16 + caplen
    dst.write_bytes(bytes(blob))


def test_one_window_at_the_same_absolute_time_for_every_vantage(tmp_path: Path) -> None:
    if not shutil.which("tcptrace"):
        pytest.skip("tcptrace not installed")
    run = tmp_path / "run"
    (run / "captures").mkdir(parents=True)
    shutil.copy(GOLDEN, run / "captures" / "lan_a.pcap")
    # The far side sees everything 0.3 s later, as across a satellite hop.
    shifted(GOLDEN, run / "captures" / "lan_b.pcap", 0.3)
    a = analyze_run(run)
    ga, gb = a["lan_a"]["graphs"], a["lan_b"]["graphs"]
    # The RTT graph is drawn from the RTT of every ACK, stored beside the metrics.
    csv = (run / "analysis" / "lan_a" / "rtt_every_ack.csv").read_text().splitlines()
    assert len(csv) == 1 + a["lan_a"]["main"]["rtt"]["samples"] and ga["rtt"] == "rtt.png"
    assert ga["window_start"] == gb["window_start"]
    assert ga["window_start_s"] == gb["window_start_s"]
    origin = a["lan_a"]["main"]["first_packet"]
    assert float(ga["window_start"]) == pytest.approx(origin + float(ga["window_start_s"]), abs=1e-5)
    # Around the earliest retransmission any vantage saw: lan_a's.
    first_r = a["lan_a"]["main"]["first_retransmission"]
    assert float(ga["window_start"]) < first_r < float(ga["window_start"]) + float(ga["window_duration_s"])
    # An explicit window is seconds from the run's first packet, for both.
    page = write_report(run, window=Window(0.5, 0.2)).read_text()
    # Both captions name the same absolute start (the stored metrics stay as measured).
    at = html.escape(f"0.2 s from 0.500 s after the run's first packet, {time_of_day(origin + 0.5)}")
    for v in ("lan_a", "lan_b"):
        assert f"{v}: Time-sequence graph, zoomed window ({at} UTC)" in page


def udp_pcap(path: Path, t0: float, n: int, size: int) -> None:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i in range(n):
        ts = t0 + i * 0.01
        udp = struct.pack(">HHHH", 7542, 51693, 8 + size, 0)
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + 8 + size, 0, 0x4000, 64, 17, 0,
                         ipaddress.IPv4Address("10.99.99.254").packed,
                         ipaddress.IPv4Address("10.99.99.2").packed)
        head = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00" + ip + udp
        sec = int(ts)
        out.append(struct.pack("<IIII", sec, round((ts - sec) * 1e6), len(head),
                               len(head) + size) + head)
    path.write_bytes(b"".join(out))


def test_udp_capture_gets_a_udp_view_not_an_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "captures").mkdir(parents=True)
    udp_pcap(run / "captures" / "lan_a.pcap", 1_795_000_000.0, 101, 1000)
    a = analyze_run(run)
    v = a["lan_a"]
    assert "error" not in v
    flow = v["udp"]["flows"][0]
    assert (flow["src"], flow["dst"], flow["datagrams"]) == ("10.99.99.254:7542", "10.99.99.2:51693", 101)
    assert flow["payload_bytes"] == 101_000
    assert flow["rate_bps"] == pytest.approx(8 * 101_000 / 1.0)
    html = write_report(run).read_text()
    assert "UDP capture (no TCP)" in html and "no TCP packets" not in html
