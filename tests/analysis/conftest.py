"""Shared fixtures: run directories built around the golden capture."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "data"
GOLDEN = DATA / "golden.pcap"


@pytest.fixture(scope="session")
def expected() -> dict:
    return json.loads((DATA / "golden_expected.json").read_text())


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    """A run with a good lan_a, a truncated wan and a garbage lan_b capture."""
    if not shutil.which("tcptrace"):
        pytest.skip("tcptrace not installed")
    run = tmp_path / "run"
    cap = run / "captures"
    cap.mkdir(parents=True)
    shutil.copy(GOLDEN, cap / "lan_a.pcap")
    blob = GOLDEN.read_bytes()
    (cap / "wan_a.pcap").write_bytes(blob[: len(blob) // 2])
    (cap / "lan_b.pcap").write_bytes(b"this is not a capture\n" * 200)
    (run / "config.json").write_text(json.dumps({
        "client": "nuttcp", "pep": "none", "rtt_ms": 600, "ber": 1e-5,
        "rate_bps": 8_000_000, "size": 2_000_000, "direction": "a2b"}))
    (run / "environment.json").write_text(json.dumps({
        "kernel": "6.18.44", "tools": {"tcptrace": "6.6.7", "tcpdump": "4.99"},
        "git_revision": "24ec452", "qdisc": {"wan": "htb rate 8mbit ceil 10mbit"},
        "offloads": {"veth0": {"tso": "off", "gso": "off"}}}))
    (run / "result.json").write_text(json.dumps({"throughput_bps": 14_900_000, "ok": True}))
    return run
