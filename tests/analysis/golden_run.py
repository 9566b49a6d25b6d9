"""The golden run directory's stored files, shaped as the runner writes them.

The golden capture (tests/data/make_golden.sh) is a 2,000,000-byte nuttcp
upload from 10.99.99.1 to 10.99.99.2 at 16 Mbit/s. config.json is built by
the runner's own config_document for that configuration, so it follows the
code; environment.json and result.json are those of a real `satbed run` of
the same configuration (tests/data/golden_run_*.json), not of the captured
transfer itself."""

from __future__ import annotations

import json
from pathlib import Path

from satbed.execution import session

from satbed.model import config

from satbed.model import topology
from satbed.model.link import LinkConfig

DATA = Path(__file__).resolve().parent.parent / "data"
GOLDEN = DATA / "golden.pcap"


def golden_config() -> dict:
    cfg = config.RunConfig(client="nuttcp-tcp", direction="upload", size_bytes=2_000_000,
                           link=LinkConfig.symmetric(rate="16mbit", ceil="16mbit", rtt_ms=0),
                           topology_overrides={"hosts.clientA.ip": "10.99.99.1/24",
                                               "hosts.clientB.ip": "10.99.99.2/24"})
    spec = topology.load(cfg.topology, cfg.topology_overrides)
    return session.config_document(cfg, spec, session.plan(cfg, spec))


def golden_result() -> dict:
    return json.loads((DATA / "golden_run_result.json").read_text())
