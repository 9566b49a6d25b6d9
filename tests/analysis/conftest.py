"""Shared fixtures: run directories built around the golden capture, shaped
as the runner writes them (golden_run.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from golden_run import DATA, GOLDEN, golden_config, golden_result


@pytest.fixture(scope="session")
def expected() -> dict:
    return json.loads((DATA / "golden_expected.json").read_text())


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    """A run with a good lan_a, a truncated wan_a and a garbage lan_b capture."""
    if not shutil.which("tcptrace"):
        pytest.skip("tcptrace not installed")
    run = tmp_path / "run"
    cap = run / "captures"
    cap.mkdir(parents=True)
    shutil.copy(GOLDEN, cap / "lan_a.pcap")
    blob = GOLDEN.read_bytes()
    (cap / "wan_a.pcap").write_bytes(blob[: len(blob) // 2])
    (cap / "lan_b.pcap").write_bytes(b"this is not a capture\n" * 200)
    (run / "config.json").write_text(json.dumps(golden_config()))
    shutil.copy(DATA / "golden_run_environment.json", run / "environment.json")
    (run / "result.json").write_text(json.dumps(golden_result()))
    return run
