"""tcptrace long-output parsing, checked against tcptrace on the golden capture."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analysis.tcptrace import (main_connection, normalize_label, parse_long,
                               apply_csv_seconds, run_tcptrace)

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden.pcap"

SAMPLE = """\
TCP connection info:
2 TCP connections traced:
TCP connection 1:
\thost a:        10.99.99.2:33000
\thost b:        10.99.99.254:21
\tcomplete conn: no\t(SYNs: 2)  (FINs: 0)
\tfirst packet:  Sun Nov 22 05:54:18.402749 2026
\tlast packet:   Sun Nov 22 05:54:19.013518 2026
\telapsed time:  0:00:00.610769
\ttotal packets: 20
\tfilename:      x.pcap
   a->b:\t\t\t      b->a:
     total packets:            12           total packets:             8      
     unique bytes sent:       300           unique bytes sent:       100      
     actual data bytes:       300           actual data bytes:       100      
     initial window:          100 bytes     initial window:          100 bytes
     initial window:            1 pkts      initial window:            1 pkts 
     ttl stream length:        NA           ttl stream length:        NA      
     SYN/FIN pkts sent:       1/0           SYN/FIN pkts sent:       1/0      
     throughput:              491 Bps       throughput:              163 Bps  
     RTT avg:               600.3 ms        RTT avg:                 0.0 ms   
     max # retrans:             2           max # retrans:             0      
================================
TCP connection 2:
\thost c:        10.99.99.2:33001
\thost d:        10.99.99.254:20
\tcomplete conn: yes
\tfirst packet:  Sun Nov 22 05:54:18.502749 2026
\tlast packet:   Sun Nov 22 05:54:19.013518 2026
\telapsed time:  0:00:00.510769
\ttotal packets: 30
\tfilename:      x.pcap
   c->d:\t\t\t      d->c:
     total packets:            10           total packets:            20      
     unique bytes sent:         0           unique bytes sent:     50000      
     actual data bytes:         0           actual data bytes:     52000      
"""


def test_parse_two_column_quirks() -> None:
    conns = parse_long(SAMPLE)
    assert [c.index for c in conns] == [1, 2]
    c1 = conns[0]
    assert (c1.host_a, c1.host_b) == ("10.99.99.2:33000", "10.99.99.254:21")
    assert (c1.complete, c1.syns, c1.fins) == (False, 2, 0)
    assert c1.a2b.total_pkts == 12 and c1.b2a.total_pkts == 8
    assert c1.a2b.initial_window_bytes == 100 and c1.a2b.initial_window_pkts == 1
    assert c1.a2b.stream_length is None  # "NA"
    assert c1.a2b.raw["ttl_stream_length"] == "NA"
    assert c1.a2b.throughput_bps == 491 * 8  # Bps is bytes per second
    assert c1.a2b.rtt_avg_ms == pytest.approx(600.3)
    assert c1.a2b.max_retrans == 2
    assert (c1.a2b.syn_pkts, c1.a2b.fin_pkts) == (1, 0)
    assert c1.elapsed_s == pytest.approx(0.610769)
    c2 = conns[1]
    assert c2.host_a == "10.99.99.2:33001" and c2.complete
    assert c2.b2a.unique_bytes == 50000
    # The data connection wins even though it has fewer packets in one direction.
    assert main_connection(conns) is c2
    assert c2.data_direction()[0] is c2.b2a


def test_normalize_label() -> None:
    assert normalize_label("max sack blks/ack") == "max_sack_blks_ack"
    assert normalize_label("max # retrans") == "max_retrans"
    assert normalize_label("RTT min (last)") == "rtt_min_last"
    assert normalize_label("initial window", "5 pkts") == "initial_window_pkts"


def test_parse_empty() -> None:
    assert parse_long("") == []
    assert main_connection([]) is None


@pytest.fixture(scope="module")
def golden_conns(tmp_path_factory: pytest.TempPathFactory):
    if not shutil.which("tcptrace"):
        pytest.skip("tcptrace not installed")
    out = tmp_path_factory.mktemp("tt")
    tt = run_tcptrace(GOLDEN, out)
    conns = parse_long(tt.long_text)
    apply_csv_seconds(conns, tt.csv.read_text())
    return tt, conns


def test_golden_against_tcptrace(golden_conns, expected: dict) -> None:
    tt, conns = golden_conns
    assert not tt.truncated
    assert len(conns) == expected["connections"] == 1
    c = main_connection(conns)
    a2b, b2a = c.a2b, c.b2a
    e = expected["a2b"]
    assert a2b.unique_bytes == e["unique_bytes"] == expected["transfer_bytes"]
    assert a2b.data_pkts == e["data_pkts"]
    assert a2b.data_bytes == e["data_bytes"]
    assert a2b.rexmt_pkts == e["rexmt_pkts"]
    assert a2b.rexmt_bytes == e["rexmt_bytes"]
    assert a2b.rtt_samples == e["rtt_samples"]
    for f in ("rtt_min_ms", "rtt_max_ms", "rtt_avg_ms", "rtt_stdev_ms"):
        assert getattr(a2b, f) == pytest.approx(e[f]), f
    assert a2b.dup_acks == e["dup_acks"]
    assert a2b.triple_dupacks == e["triple_dupacks"]
    assert a2b.throughput_bps == pytest.approx(8 * e["throughput_Bps"])
    assert a2b.win_max == e["max_win_adv"]
    assert a2b.total_pkts == e["total_pkts"]
    assert b2a.sack_pkts == expected["b2a"]["sack_pkts"]
    assert b2a.win_max == expected["b2a"]["max_win_adv"]
    assert b2a.total_pkts == expected["b2a"]["total_pkts"]
    assert b2a.unique_bytes == 0


def test_golden_consistency(golden_conns, expected: dict) -> None:
    _, conns = golden_conns
    c = conns[0]
    # Every segment the receiver's nftables rule dropped was sent again.
    assert c.a2b.rexmt_pkts >= expected["nft_drops"] > 0
    assert c.a2b.data_bytes == c.a2b.unique_bytes + c.a2b.rexmt_bytes
    assert c.complete and c.a2b.syn_pkts == 1 and c.a2b.fin_pkts == 1
    assert c.a2b.rtt_min_ms <= c.a2b.rtt_avg_ms <= c.a2b.rtt_max_ms
    assert c.first_packet is not None and c.last_packet is not None
    assert c.last_packet - c.first_packet == pytest.approx(c.elapsed_s, abs=1e-5)
    # Epoch times are plausible (the CSV's seconds, the long output's fraction).
    assert 1.6e9 < c.first_packet < 4e9


def test_run_tcptrace_missing_file(tmp_path: Path) -> None:
    from analysis.tcptrace import TcptraceError
    with pytest.raises(TcptraceError):
        run_tcptrace(tmp_path / "nope.pcap", tmp_path)
