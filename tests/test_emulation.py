"""The satellite link's configuration and its tc backend."""

from __future__ import annotations

import pytest

from satbed.backends.emulation import compile_direction

from satbed.model.link import Direction, LinkConfig
from satbed.core.errors import SatbedError

from satbed_testlib import needs_root, satbed


def test_study_defaults_split_the_rtt():
    cfg = LinkConfig.symmetric(rtt_ms=600, ber=1e-5)
    for d in (cfg.a_to_b, cfg.b_to_a):
        assert (d.rate_bps, d.ceil_bps, d.cburst_bytes, d.delay_ms, d.ber) == (8_000_000, 10_000_000, 131072,
                                                                              300, 1e-5)
    assert cfg.rtt_ms == 600


# Frame error rates computed once with 40-digit decimals, not by the formula
# under test: a frame of n bytes survives only if all 8n bits do.
@pytest.mark.parametrize("ber, frame_bytes, per", [
    (1e-5, 64, 0.005106940610449956074029),
    (1e-5, 1514, 0.1140728946242804997740047),
    (1e-7, 64, 0.00005119869186223843701516),
    (1e-7, 1514, 0.001210466853816546993765),
    (1e-3, 64, 0.4008577145704783608782946),
    (1e-3, 1514, 0.9999945399905659652331202),
    (0, 1514, 0.0),
])
def test_per_follows_frame_size(ber, frame_bytes, per):
    assert Direction(ber=ber).per(frame_bytes) == pytest.approx(per, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("kwargs, message", [
    ({"rtt_ms": -1}, "RTT must be within 0"),
    ({"ber": 1}, r"BER must be in \[0, 1\)"),
    ({"ber": -0.1}, r"BER must be in \[0, 1\)"),
    ({"rate": "0"}, "rate must be positive"),
    ({"rate": "10mbit", "ceil": "8mbit"}, "ceil .* is below rate"),
    ({"backend": "warp"}, "unknown emulator backend"),
    ({"profile": "/nonexistent/profile.csv"}, "cannot read profile"),
])
def test_bad_link_configuration_is_refused(kwargs, message):
    with pytest.raises(SatbedError, match=message):
        LinkConfig.symmetric(**kwargs)


def test_tc_commands_reproduce_the_study():
    cmds = [" ".join(c) for c in compile_direction("eth1", Direction(), seed=1, netem=True)]
    assert cmds == [
        "tc qdisc add dev eth1 root handle 1: htb default 10",
        "tc class add dev eth1 parent 1: classid 1:10 htb rate 8000000bit ceil 10000000bit cburst 131072",
        "tc qdisc add dev eth1 parent 1:10 handle 10: bfifo limit 1514000",
    ]


def test_tc_netem_limit_holds_the_bandwidth_delay_product_and_the_buffer():
    d = Direction(delay_ms=300, ber=1e-5)
    netem = compile_direction("eth1", d, seed=1, netem=True)[-1]
    assert netem[:9] == ["tc", "qdisc", "add", "dev", "eth1", "parent", "1:10", "handle", "10:"]
    limit = int(netem[netem.index("limit") + 1])
    # 10 Mbit/s (ceil) x 300 ms in 1514-byte frames, plus the 1000-packet buffer
    assert limit == 248 + 1000
    assert netem[netem.index("delay") + 1] == "300ms"
    assert float(netem[netem.index("loss") + 1].rstrip("%")) == pytest.approx(100 * d.per(1514), rel=1e-4)


@pytest.mark.parametrize("ber, loss, want_percent", [
    (0, 1e-5, 0.001),                       # the study's "0.001%": netem's per-packet loss as written
    (0, 0.01, 1.0),
    (1e-5, 0, 11.40728946242805),           # bit errors alone: a full frame's PER
    (1e-5, 0.01, 100 * (1 - (1 - 0.1140728946242805) * 0.99)),   # both: two independent draws, one netem loss
])
def test_tc_netem_loss_combines_per_packet_loss_and_bit_errors(ber, loss, want_percent):
    netem = compile_direction("eth1", Direction(delay_ms=300, ber=ber, loss=loss), seed=1, netem=True)[-1]
    assert netem[netem.index("loss") + 1] == f"{want_percent:.6f}%"


def test_loss_alone_needs_the_emulator_and_is_kept_in_the_configuration():
    cfg = LinkConfig.symmetric(rtt_ms=0, loss="0.001%")
    assert cfg.a_to_b.loss == cfg.b_to_a.loss == pytest.approx(1e-5)
    assert cfg.a_to_b.needs_emulation()
    assert cfg.to_dict()["a_to_b"]["loss"] == pytest.approx(1e-5)
    assert LinkConfig.from_dict(cfg.to_dict()) == cfg
    # A link without it keeps the configuration (and so the cell identity) it had before loss existed.
    assert "loss" not in LinkConfig.symmetric(rtt_ms=600, ber=1e-5).to_dict()["a_to_b"]


@pytest.mark.parametrize("loss", [1, -0.1, "100%", "x", True, float("nan")])
def test_bad_loss_is_refused(loss):
    with pytest.raises(SatbedError, match="loss"):
        LinkConfig.symmetric(loss=loss)


@needs_root
def test_htb_shapes_for_real():
    """The tc backend's HTB part runs on this kernel (netem does not): the
    measured wire rate must match the configured 8 Mbit/s."""
    cp = satbed("check-link", "--emulator", "tc", "--seconds", "6", "--probes", "200", "--json")
    assert cp.returncode == 0, cp.stderr
    import json
    out = json.loads(cp.stdout)
    assert out["emulator"] == "tc"
    # HTB never sends above its rate; a VM's stolen CPU only lowers what it
    # passes (it cannot catch up after a stall: -2.2 % in 1 of 3 quiet runs).
    assert -0.08 < out["udp_wire_error"] < 0.02, out["udp_wire_bps"]


@needs_root
def test_tc_backend_without_netem_says_so(tmp_path):
    from satbed.model import topology
    from satbed.backends.emulation import TcEmulator, netem_available
    from satbed.backends.testbed import running
    with running(topology.load("globalhawk"), bridge_kinds=("pep",)) as tb:
        node = tb.transparent("emulator")[0]
        if netem_available(node):
            pytest.skip("this kernel has netem")
        emu = TcEmulator(node, LinkConfig.symmetric(rtt_ms=100, backend="tc"), str(tmp_path))
        with pytest.raises(SatbedError, match="no netem"):
            emu.start()


@pytest.mark.parametrize("raw, want", [("", None), ("auto", "auto"), ("tpacket", "tpacket"), ("socket", "socket")])
def test_satemu_packet_path_from_the_environment(monkeypatch: pytest.MonkeyPatch, raw: str, want: str | None) -> None:
    from satbed.backends.emulation import io_path
    monkeypatch.setenv("SATBED_EMULATOR_IO", raw)
    assert io_path() == want


def test_bad_satemu_packet_path_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from satbed.backends.emulation import io_path
    monkeypatch.setenv("SATBED_EMULATOR_IO", "xdp")
    with pytest.raises(SatbedError, match="SATBED_EMULATOR_IO"):
        io_path()
