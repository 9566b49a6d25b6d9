"""Shared fixtures; helpers live in satbed_testlib."""

from __future__ import annotations

import pytest

import satbed_testlib  # noqa: F401  (puts the repository on sys.path)


@pytest.fixture
def globalhawk():
    from satbed.model import topology
    return topology.load("globalhawk")
