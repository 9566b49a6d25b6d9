"""Client adapters are found by looking, as PEP adapters are: the package's
modules, and a lab's own directory in SATBED_CLIENT_PATH."""

from __future__ import annotations

import os
import subprocess

from satbed_testlib import REPO

LAB_ADAPTER = '''
from satbed.backends.clients.base import Client

class Echo(Client):
    name = "lab-echo"
    def run(self, ctx):
        return {"client": self.name}
'''


def registry(env_path: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO}
    env.pop("SATBED_CLIENT_PATH", None)
    if env_path:
        env["SATBED_CLIENT_PATH"] = env_path
    return subprocess.run(["/usr/bin/python3", "-c", "from satbed.backends import clients; print(' '.join(sorted(clients.REGISTRY)))"],
                          capture_output=True, text=True, env=env, timeout=60)


def test_shipped_clients_are_discovered():
    names = registry(None).stdout.split()
    assert {"ftp", "scp", "sftp", "rsync", "saratoga", "nuttcp-tcp", "ping", "telnet", "ssh"} <= set(names)


def test_a_labs_adapter_directory_adds_its_client(tmp_path):
    (tmp_path / "echo.py").write_text(LAB_ADAPTER)
    assert "lab-echo" in registry(str(tmp_path)).stdout.split()


def test_a_clashing_name_is_one_line(tmp_path):
    (tmp_path / "ftp2.py").write_text(LAB_ADAPTER.replace("lab-echo", "ftp"))
    cp = registry(str(tmp_path))
    assert cp.returncode != 0 and "two client adapters are named 'ftp'" in cp.stderr
