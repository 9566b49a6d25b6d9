"""The study pages of `satbed report` (satbed/report/studies/) from stored cells:
the TCP spoofing figures, the split gateways' four set-ups side by side and the
ACTS multi-flow BER study's intervals and flows by BER class."""

from __future__ import annotations

import json
import os

import pytest

from satbed.model import linkprofile
from satbed.report import page as report_page
from satbed.report import studies
from satbed.report.studies import base, multiflow_ber, multiflow_cells, spoofing, split_gateways
from satbed.results.store import CellRow, Store

SPOOF = "/repo/scenarios/spoofing.yaml"
SPLIT = "/repo/scenarios/split-gateways.yaml"
# What every stored cell's parameters hold besides a study's own.
BASE = {"client": "ftp", "pep": "none", "rtt": 500.0, "ber": 0.0, "direction": "download"}


def _vantage(node: str, sender_bps: float, receiver_bps: float, rexmt: int, rtt: float) -> dict:
    return {"main": {"summary": {"sender_view_bps": sender_bps, "receiver_view_bps": receiver_bps,
                                 "rexmt_pkts": rexmt, "rtt_avg_ms": rtt},
                     "data_direction": "b2a", "b2a": {"data_xmit_time_s": 12.5}}}


def _spoof_row(n: int, size: int, flows: int, spoofed: bool, rep: int) -> CellRow:
    # Spoofed: the sender sees its last ACK early (4x), the receiver 1.5x;
    # the spoofer's satellite leg retransmits 3 more packets.
    snd = 100e3 * (4 if spoofed else 1) * (1 + 0.02 * rep)
    rcv = 100e3 * (1.5 if spoofed else 1) * (1 + 0.02 * rep)
    metrics = {
        "captures": {"lan_a": {"node": "h1"}, "lan_b": {"node": "h5"}, "wan_a": {"node": "sat"},
                     "wan_b": {"node": "sat"}},
        "analysis": {"lan_b": _vantage("h5", snd, 0, 2, 90), "lan_a": _vantage("h1", 0, rcv, 0, 0.1),
                     "wan_b": _vantage("sat", 0, 0, 3, 510), "wan_a": _vantage("sat", 0, 0, 3, 1)},
        "counters": {"ports": {"r1.wan": {"dropped": 5 * flows, "sent_packets": 1000}}},
        "seconds": 10.0,
    }
    params = {**BASE, "scenario": SPOOF, "size": size, "pep": "pepd" if spoofed else "none",
              "variant": "spoofed" if spoofed else "end-to-end", spoofing.FLOWS: flows}
    return CellRow(hash=f"{n:016x}", experiment="spoofing", params=params,
                   config={"endpoints": ["h1", "h5"], "direction": "download"}, repetition=rep, status="ok",
                   goodput_bps=rcv, metrics=metrics)


def test_spoofing_tables_give_the_studys_numbers():
    rows = [_spoof_row(i, size, flows, spoofed, rep)
            for i, (size, flows, spoofed, rep) in enumerate(
                (s, f, sp, r) for s in (1448, 144800) for f in (1, 20) for sp in (False, True) for r in range(3))]
    tab = spoofing.spoofing_tables(rows)
    assert set(tab) == {(1448, 1), (1448, 20), (144800, 1), (144800, 20)}
    e = tab[(144800, 20)]
    assert e["sender_bps"]["pct"] == pytest.approx(300)
    assert e["receiver_bps"]["pct"] == pytest.approx(50)
    assert e["sender_bps"]["n_regular"] == e["sender_bps"]["n_spoofed"] == 3
    assert e["sender_bps"]["ci_spoofed"] > 0
    # End to end: the sender's retransmissions; spoofed: plus the spoofer's on the satellite leg.
    assert (e["drops"]["regular"], e["drops"]["spoofed"]) == (2, 5)
    assert e["path_drop_rate"] == pytest.approx(100 / 1100)


def test_spoofing_page_draws_the_four_figures(tmp_path):
    out = str(tmp_path)
    rows = [_spoof_row(i, size, 5, spoofed, 0)
            for i, (size, spoofed) in enumerate((s, sp) for s in (1448, 14480, 144800) for sp in (False, True))]
    # A partial matrix (one size measured only end to end) still draws.
    rows.append(_spoof_row(99, 1448000, 5, False, 0))
    with Store(os.path.join(out, "results.sqlite")) as s:
        for r in rows:
            s.put(r)
    page = open(report_page.build(out)).read()
    for name in ("spoofing_throughput_vs_size", "spoofing_percent_difference", "spoofing_drops_vs_size",
                 "spoofing_gain_vs_flows"):
        assert f"id='{name}'" in page
        assert os.path.getsize(os.path.join(out, "charts", f"{name}.png")) > 5000
    assert "Where this departs from the study" in page
    assert "id='chart1'" not in page       # the Global Hawk charts are not this study's
    assert "<h2>TCP spoofing with cross traffic" in page and "Seed" not in page
    assert "id='spoofing_spoofer_buffer'" not in page     # no buffer trace stored


def test_the_spoofers_buffer_over_time_is_drawn_and_its_peak_tabled(tmp_path):
    out = str(tmp_path)
    rows = [_spoof_row(i, 144800, flows, spoofed, 0)
            for i, (flows, spoofed) in enumerate((f, sp) for f in (0, 10) for sp in (False, True))]
    for r in rows:
        if r.params["pep"] == "none":
            continue
        d = os.path.join(out, "cells", r.hash, "pep", "h2")
        os.makedirs(d)
        with open(os.path.join(d, "buffer.jsonl"), "w") as f:
            # pepd's trace: one line per connection per interval (the control connection holds nothing).
            for i in range(30):
                t = 1000.0 + i / 10
                f.write(json.dumps({"t": t, "id": 1, "occupancy_bytes": 0}) + "\n")
                f.write(json.dumps({"t": t + 0.003, "id": 2, "occupancy_bytes": 1000 * min(i, 30 - i)}) + "\n")
    series = spoofing._spoofer_buffer(out, rows[1])
    assert series[0] == (0.0, 0.0) and len(series) == 30
    assert max(b for _, b in series) == 15000
    tab = spoofing.spoofing_tables(rows, out)
    assert tab[(144800, 10)]["buffer_peak"][0] == 15000 and tab[(144800, 10)]["buffer_peak"][2] == 1
    with Store(os.path.join(out, "results.sqlite")) as s:
        for r in rows:
            s.put(r)
    page = open(report_page.build(out)).read()
    assert "id='spoofing_spoofer_buffer'" in page and "spoofer peak KB" in page
    assert os.path.getsize(os.path.join(out, "charts", "spoofing_spoofer_buffer.png")) > 5000


def _split_row(out: str, n: int, variant: str, kbps: float, seconds: float) -> CellRow:
    d = os.path.join(out, "cells", f"{n:016x}", "emulator")
    os.makedirs(d)
    with open(os.path.join(d, "emulator_timeseries.csv"), "w") as f:
        f.write("t_s,direction,bytes_out\n")
        for i in range(1, 51):      # cumulative counters, as satemu writes them
            f.write(f"{i / 10:.1f},a_to_b,{int(kbps * 1e3 / 8 / 10 * i)}\n{i / 10:.1f},b_to_a,{40 * i}\n")
    metrics = {"captures": {"lan_a": {"node": "client"}, "lan_b": {"node": "server"}},
               "analysis": {"lan_b": _vantage("server", 0, 0, 0, 520 if variant != "gateways" else 3)},
               "seconds": seconds}
    return CellRow(hash=f"{n:016x}", experiment="split-gateways",
                   params={**BASE, "scenario": SPLIT, "variant": variant, "size": 50 << 20},
                   config={"endpoints": ["client", "server"], "direction": "download"}, repetition=0,
                   status="ok", goodput_bps=kbps * 1e3, metrics=metrics)


def test_split_gateways_page_puts_the_four_setups_side_by_side(tmp_path):
    out = str(tmp_path)
    rows = [_split_row(out, i, v, kbps, secs) for i, (v, kbps, secs) in enumerate(
        (("terrestrial", 1500, 280), ("satellite", 500, 840), ("large-windows", 850, 500), ("gateways", 1480, 290)))]
    tab = split_gateways.split_tables(out, rows)
    assert tab["satellite"]["sat_kbps"][0] == pytest.approx(500, rel=0.01)
    assert tab["gateways"]["server_rtt_ms"][0] == 3
    assert tab["large-windows"]["download_s"][0] == 500
    assert tab["terrestrial"]["server_busy_s"][0] == 12.5
    with Store(os.path.join(out, "results.sqlite")) as s:
        for r in rows:
            s.put(r)
    page = open(report_page.build(out)).read()
    assert "id='split_gateways_variants'" in page and "id='split_gateways_throughput_over_time'" in page
    assert page.index(">terrestrial<") < page.index(">satellite<") < page.index(">large-windows<") \
        < page.index(">gateways<")


MULTI = "/repo/scenarios/multiflow-ber.yaml"
QUEUE, LOAD = "topology.routers.rOU.interfaces.sat.queue", "workload.traffic.groups.0.rate"


def _multiflow_row(out: str, n: int, pep: str, util_clean: float, util_noisy: float) -> CellRow:
    """A 40 s run: 20 s at BER 1e-9, then 20 s at 1e-4; utilisation as given;
    one 100 kbit/s upload in each half; 7 router drops in the noisy half."""
    cell = os.path.join(out, "cells", f"{n:016x}")
    os.makedirs(os.path.join(cell, "emulator"))
    os.makedirs(os.path.join(cell, "traffic"))
    os.makedirs(os.path.join(cell, "counters"))
    t0 = 1_700_000_000.0
    with open(os.path.join(cell, "emulator", "emulator.json"), "w") as f:
        json.dump({"started_at": "2023-11-14T22:13:20Z"}, f)     # = t0
    with open(os.path.join(cell, "emulator", "emulator_timeseries.csv"), "w") as f:
        f.write("t_s,direction,bytes_in,bytes_out,frames_out,drop_ber,drop_queue,ber\n")
        total = 0.0
        for i in range(1, 401):
            t = i / 10
            noisy = t > 20
            total += (util_noisy if noisy else util_clean) * multiflow_cells.T1_BPS / 8 / 10
            f.write(f"{t:.1f},a_to_b,{total:.0f},{total:.0f},{total / 1000:.0f},0,0,{1e-4 if noisy else 1e-9}\n")
            f.write(f"{t:.1f},b_to_a,0,0,0,0,0,0\n")
    with open(os.path.join(cell, "traffic", "client-0-ou.jsonl"), "w") as f:
        for start, end in ((t0 + 2, t0 + 8), (t0 + 25, t0 + 35)):
            f.write(json.dumps({"flow": 1, "start": start, "end": end, "completed": True, "sender": True,
                                "goodput_bps": 100e3}) + "\n")
        f.write(json.dumps({"record": "summary", "side": "client", "flows": 2, "max_active": 300,
                            "cpu_share": 0.01}) + "\n")
    with open(os.path.join(cell, "result.json"), "w") as f:
        dirs = {"a_to_b": {"tx_late_p99_us": 9335, "tx_late_max_us": 205502},
                "b_to_a": {"tx_late_p99_us": 10000, "tx_late_max_us": 60417}}
        json.dump({"emulator": {"stats": {"totals": {"directions": dirs}}},
                   "host_cpu": {"busy_fraction": 0.3, "steal_fraction": 0.2512}}, f)
    with open(os.path.join(cell, "counters", "interfaces.jsonl"), "w") as f:
        for t, dropped in ((t0 + 10, 0), (t0 + 30, 7)):
            f.write(json.dumps({"unix": t, "node": "rOU", "port": "sat", "dropped": dropped}) + "\n")
    return CellRow(hash=f"{n:016x}", experiment="multiflow-ber",
                   params={**BASE, "client": "ping", "size": 10 << 20, "pep": pep, "scenario": MULTI,
                           QUEUE: 20, LOAD: 6},
                   config={}, repetition=0, status="ok", goodput_bps=None, metrics={})


def test_multiflow_page_classes_intervals_and_flows_by_ber(tmp_path):
    out = str(tmp_path)
    rows = [_multiflow_row(out, 1, "none", 0.8, 0.4), _multiflow_row(out, 2, "pepd", 0.9, 0.8)]
    tab = multiflow_ber.multiflow_tables(out, rows)
    none = tab[(20, 6, "none")]
    # 5 s intervals: 2 error-free after the 10 s warm-up, 4 noisy (the first
    # holds one 1e-9 sample); the last, one sample at 40 s, is cut short.
    assert none["util"]["1e-9"] == pytest.approx([0.8] * 2, rel=1e-6)
    assert none["util"]["1e-4"] == pytest.approx([0.408, 0.4, 0.4, 0.4], rel=1e-6)
    assert none["flows"] == {"1e-9": [100e3], "1e-4": [100e3]}
    drops = multiflow_ber._router_drops(none["cells"][0][0], "rOU", "sat", none["cells"][0][1])
    assert drops == [(10.0, 0.0), (30.0, 7.0)]
    # The emulator's timing: the worst direction's lateness and the host's steal.
    assert none["timing"] == [{"tx_late_p99_us": 10000, "tx_late_max_us": 205502, "steal_fraction": 0.2512}]
    with Store(os.path.join(out, "results.sqlite")) as s:
        for r in rows:
            s.put(r)
    page = open(report_page.build(out)).read()
    for fig in ("acts_utilisation_cdf", "acts_flow_throughput_cdf", "acts_over_time"):
        assert f"id='{fig}'" in page
    assert "<td>50 (1e-4)</td>" in page    # none: from 80% clean to 40% at the noisiest class
    assert "<td>10.0</td><td>206</td><td>25</td>" in page   # late p99 ms, late max ms, steal %


def _with_profile(cell: str, profile: list[dict], origin_s: float, sampled: dict[float, float]) -> None:
    """The cell's uplink ran PROFILE from ORIGIN_S on the emulator's clock;
    its 100 ms samples saw the BER SAMPLED gives by time (0 elsewhere after 20 s)."""
    path = os.path.join(cell, "uplink.csv")
    with open(path, "w") as f:
        f.write(linkprofile.render(profile))
    emu = os.path.join(cell, "emulator", "emulator.json")
    with open(emu) as f:
        doc = json.load(f)
    doc["config"] = {"a_to_b": {"effective": {"profile": path, "ber": 0, "loss": 0}}}
    with open(emu, "w") as f:
        json.dump(doc, f)
    with open(os.path.join(cell, "result.json")) as f:
        result = json.load(f)
    with open(os.path.join(cell, "result.json"), "w") as f:
        json.dump({**result, "schedule_clock_started_s": {"sat": origin_s}}, f)
    series = os.path.join(cell, "emulator", "emulator_timeseries.csv")
    lines = open(series).read().splitlines()
    with open(series, "w") as f:
        f.write(lines[0] + "\n")
        for line in lines[1:]:
            fields = line.split(",")
            t = float(fields[0])
            if fields[1] == "a_to_b" and t > 20:
                fields[-1] = str(sampled.get(t, 0.0))
            f.write(",".join(fields) + "\n")


def test_bursts_and_per_packet_figures_are_classed_by_their_mean_over_each_second(tmp_path):
    """A bursty uplink's samples see a burst or the gap after it; its class is
    the profile's mean over each second (10 ms at 1e-2 a second: 1e-4). A
    profile of per-packet losses is classed by the loss. The profile's clock
    starts when the main flow does (here 5 s into the emulator's)."""
    out = str(tmp_path)
    bursty, packets = _multiflow_row(out, 3, "none", 0.8, 0.4), _multiflow_row(out, 4, "none", 0.8, 0.4)
    burst = [{"t_s": 0, "ber": 1e-9}]
    for k in range(15, 40):
        burst += [{"t_s": k, "ber": 1e-2}, {"t_s": k + 0.01, "ber": 0.0}]
    # Every tenth sample falls in a burst: the samples alone would class the noisy half 1e-2 or clean.
    _with_profile(os.path.join(out, "cells", bursty.hash), burst, 5.0, {float(t): 1e-2 for t in range(21, 41)})
    _with_profile(os.path.join(out, "cells", packets.hash), [{"t_s": 0, "loss": 1e-9}, {"t_s": 15, "loss": 1e-4}],
                  5.0, {})
    for r in (bursty, packets):
        e = multiflow_ber.multiflow_tables(out, [r])[(20, 6, "none")]
        assert e["util"]["1e-9"] == pytest.approx([0.8] * 2, rel=1e-6), r.hash
        assert e["util"]["1e-4"] == pytest.approx([0.408, 0.4, 0.4, 0.4], rel=1e-6), r.hash
        assert e["flows"] == {"1e-9": [100e3], "1e-4": [100e3]}, r.hash
        figures = multiflow_ber._cell_figures(os.path.join(out, "cells", r.hash), r)
        assert [d for d, _, _ in figures["intervals"]] == ["1e-9", "1e-9", "1e-4", "1e-4", "1e-4", "1e-4"]


def test_a_link_sends_what_enters_it_less_its_own_queue_drops():
    s = base.EmuSample
    # 5 full frames entered, 1 dropped at the link's queue, 1 corrupted on the way.
    b = [s(0.1, 5 * 1514, 3 * 1514, 3, 1, 1, 1e-4)]
    assert multiflow_ber._transmitted(b) == 4 * 1514


def test_studies_are_found_in_their_package_and_recognise_their_scenarios(tmp_path):
    found = {s.name: s for s in studies.discover()}
    assert set(found) == {"TCP spoofing", "Split gateways", "ACTS multi-flow BER", "ACK reservation"}
    spoof = [_spoof_row(0, 1448, 1, False, 0)]
    assert studies.study_of(spoof) is found["TCP spoofing"]
    assert studies.study_of([_split_row(str(tmp_path), 1, "satellite", 500, 840)]) is found["Split gateways"]
    assert studies.study_of([_multiflow_row(str(tmp_path), 2, "none", 0.8, 0.4)]) is found["ACTS multi-flow BER"]
    outage = CellRow(hash="e" * 16, experiment="outage", params={**BASE, "scenario": "/x/scenarios/outage.yaml"},
                     config={}, repetition=0, status="limited")
    assert studies.study_of([outage]) is found["ACK reservation"]
    # No study: the Global Hawk charts are the page; two scenarios mixed are no one study's.
    other = CellRow(hash="f" * 16, experiment="gh", params={**BASE, "size": 1}, config={}, repetition=0,
                    status="ok")
    assert studies.study_of([other]) is None and studies.pages(str(tmp_path), [other]) == []
    assert studies.study_of(spoof + [other]) is None
