"""`satbed pep-check IMAGE`: test any PEP image against the image contract
(pep/CONTRACT.md, "The image contract").

The image runs as a lab would run it: its own entrypoint, `--network none`,
NET_ADMIN and NET_RAW, the SATBED_* environment. Two end hosts (namespaces,
10.99.99.2 and 10.99.99.254) are wired to its LAN and WAN ports, then:

  ready      the entrypoint bridges the ports and starts the PEP (ready file)
  health     `ENTRYPOINT health` exits 0
  bridging   ICMP crosses it (transparent bridge, no address, no gateway)
  tcp        a 1 MB TCP transfer arrives intact
  splitting  the SYN seen on the WAN side differs from the client's (the PEP
             opened its own connection) -- must match the image's declaration
             (label org.satbed.pep.splits), or is reported when undeclared
  stats      `ENTRYPOINT stats` prints a JSON object with a name
  stop       `docker stop` ends it with exit status 0 within the grace time
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field

from satbed import docker, records
from satbed.errors import SatbedError
from satbed.net import Host
from satbed.proc import require_root, require_tools

LAN, WAN = "lan0", "wan0"          # port names inside the PEP container
STATE = "/run/satbed/pep"          # SATBED_STATE_DIR inside it
PEP_ADDR = "10.99.99.3/24"           # for a PEP that connects from its own address (PEPsal)
TRANSFER_BYTES = 1 << 20
PORT = 5201
STOP_GRACE_S = 20

# Server on Client B: receive until EOF, answer with the byte count and sha256.
SERVER = r"""
import hashlib, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1)
print("listening", flush=True)
c, _ = s.accept(); h = hashlib.sha256(); n = 0
while True:
    b = c.recv(65536)
    if not b: break
    h.update(b); n += len(b)
c.sendall(f"{n} {h.hexdigest()}".encode()); c.close()
"""
# Client on Client A: send seeded bytes, half-close, print the server's answer and ours.
CLIENT = r"""
import hashlib, random, socket, sys
data = random.Random(7).randbytes(int(sys.argv[3]))
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
c.sendall(data); c.shutdown(socket.SHUT_WR)
reply = b""
while True:
    b = c.recv(4096)
    if not b: break
    reply += b
print(reply.decode(), len(data), hashlib.sha256(data).hexdigest())
"""
SYN_FILTER = "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn"


@dataclass
class Report:
    image: str
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.checks.append((name, ok, detail))
        return ok

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for _, ok, _ in self.checks)

    def lines(self) -> list[str]:
        out = [f"{'ok  ' if ok else 'FAIL'} {name:<10} {detail}" for name, ok, detail in self.checks]
        out.append(f"{'PASS' if self.passed else 'FAIL'} {self.image}")
        return out


def _entrypoint(image: str) -> list[str]:
    cp = docker.docker("image", "inspect", "--format", "{{json .Config.Entrypoint}}", image, timeout=30)
    ep = json.loads(cp.stdout or "null")
    if not ep:
        raise SatbedError(f"{image} has no ENTRYPOINT (the image contract needs one)")
    return ep


def _syn(proc: subprocess.Popen) -> dict | None:
    """The first SYN tcpdump printed: its sequence number and options."""
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    m = re.search(r"Flags \[S\], seq (\d+).*?options \[([^\]]*)\]", out or "")
    return {"seq": int(m.group(1)), "options": m.group(2)} if m else None


def _start_capture(host: Host) -> subprocess.Popen:
    proc = host.popen(["tcpdump", "-i", host.eth0.name, "-n", "-S", "-l", "-c", "1", SYN_FILTER], text=True)
    deadline = time.monotonic() + 10
    line = ""
    while "listening on" not in line:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SatbedError(f"tcpdump on {host.eth0.name} did not start")
        line = proc.stderr.readline()
    return proc


def check(image: str, rate_bps: int = 8_000_000, rtt_ms: float = 600, log=None) -> Report:
    """Run every check; the testbed is removed whatever happens."""
    require_root()
    require_tools("ip", "ethtool", "tcpdump", "mnexec")
    reason = docker.available()
    if reason:
        raise SatbedError(reason)
    if docker.image_id(image) is None:
        raise SatbedError(f"no image {image} (build it, or `make images` for satbed's own)")
    entry = _entrypoint(image)
    labels = docker.image_labels(image)
    declared = labels.get("org.satbed.pep.splits")
    report = Report(image)
    prefix = records.new_prefix()
    record = records.RunRecord(prefix, os.getpid(), records.start_time(os.getpid()))
    record.save()
    name = f"{prefix}-pep"
    hosts: list[Host] = []
    try:
        a = Host("clientA", "ca", prefix, record, ipaddress.IPv4Interface("10.99.99.2/24"))
        hosts.append(a)
        b = Host("clientB", "cb", prefix, record, ipaddress.IPv4Interface("10.99.99.254/24"))
        hosts.append(b)
        record.containers.append(name)
        record.save()
        env = {"SATBED_PEP_LAN": LAN, "SATBED_PEP_WAN": WAN, "SATBED_PEP_BRIDGE": "br0",
               "SATBED_RATE_BPS": str(rate_bps), "SATBED_RTT_MS": f"{rtt_ms:g}", "SATBED_BER": "0",
               "SATBED_BUFFER_BYTES": str(1000 * 1514), "SATBED_STATE_DIR": STATE, "SATBED_PEP_ROLE": "a",
               "SATBED_WAIT_S": "60", "SATBED_PEP_ADDR": PEP_ADDR}
        args = ["run", "-d", "--name", name, "--network", "none", "--security-opt", "systempaths=unconfined",
                "--label", f"{docker.LABEL}.prefix={prefix}", "--label", f"{docker.LABEL}.node=pep"]
        for cap in docker.CAPS:
            args += ["--cap-add", cap]
        args += docker.pep_device_args()
        for k, v in env.items():
            args += ["-e", f"{k}={v}"]
        docker.docker(*args, image, timeout=120)
        pid = int(docker.docker("inspect", "--format", "{{.State.Pid}}", name).stdout.strip() or 0)
        if not pid:
            raise SatbedError(f"{image} exited at once: {_logs(name)}")
        # Each veth is created inside the end host with its peer in the PEP's
        # namespace, as satbed's Link does: nothing passes the root namespace.
        for host, port in ((a, LAN), (b, WAN)):
            intf = host.add_intf("eth0", host.intf_name("eth0"))
            host.run(["ip", "link", "add", "name", intf.name, "type", "veth", "peer", "name", port,
                      "netns", str(pid)])
            host.configure(1500)
        ready = f"/proc/{pid}/root{STATE}/ready"
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if docker.docker("inspect", "--format", "{{.State.Running}}", name).stdout.strip() != "true":
                report.add("ready", False, f"the container exited: {_logs(name)}")
                return report
            if time.monotonic() > deadline:
                report.add("ready", False, f"no {STATE}/ready after 60 s: {_logs(name)}")
                return report
            time.sleep(0.2)
        report.add("ready", True, f"ports {LAN}/{WAN} bridged, PEP started")

        cp = docker.docker("exec", name, *entry, "health", check=False, timeout=30)
        report.add("health", cp.returncode == 0,
                   (cp.stdout or cp.stderr).strip().splitlines()[-1] if (cp.stdout or cp.stderr).strip()
                   else f"exit {cp.returncode}")

        cp = a.run(["ping", "-c", "3", "-i", "0.2", "-W", "2", str(b.ip.ip)], check=False, timeout=20)
        got = re.search(r"(\d+) received", cp.stdout)
        report.add("bridging", cp.returncode == 0, f"{got.group(1) if got else 0}/3 pings answered across it")

        server = b.popen(["/usr/bin/python3", "-c", SERVER, str(PORT)], text=True)
        server.stdout.readline()
        cap_a, cap_b = _start_capture(a), _start_capture(b)
        cp = a.run(["/usr/bin/python3", "-c", CLIENT, str(b.ip.ip), str(PORT), str(TRANSFER_BYTES)],
                   check=False, timeout=60)
        server.wait(timeout=10)
        fields = cp.stdout.split()
        intact = len(fields) == 4 and fields[0] == fields[2] and fields[1] == fields[3]
        report.add("tcp", intact, f"{TRANSFER_BYTES} bytes intact" if intact
                   else f"transfer failed: {(cp.stderr or cp.stdout).strip()[-200:]}")
        syn_a, syn_b = _syn(cap_a), _syn(cap_b)
        if syn_a is None or syn_b is None:
            report.add("splitting", False, "no SYN captured on both sides")
        else:
            split = syn_a["seq"] != syn_b["seq"]
            seen = (f"client SYN seq {syn_a['seq']}, WAN SYN seq {syn_b['seq']}: "
                    f"{'split' if split else 'end to end'}")
            if declared in ("true", "false"):
                report.add("splitting", split == (declared == "true"), f"{seen} (declared splits={declared})")
            else:
                report.add("splitting", True, f"{seen} (undeclared: label org.satbed.pep.splits)")

        cp = docker.docker("exec", name, *entry, "stats", check=False, timeout=30)
        try:
            stats = json.loads(cp.stdout)
            ok = isinstance(stats, dict) and "name" in stats
            detail = (f"name={stats.get('name')}, connections_split={stats.get('connections_split', 'absent')}"
                      if ok else "no name field")
            report.add("stats", ok, detail)
        except ValueError:
            report.add("stats", False, f"not JSON: {(cp.stdout or cp.stderr).strip()[:120]}")

        started = time.monotonic()
        docker.docker("stop", "-t", str(STOP_GRACE_S), name, check=False, timeout=STOP_GRACE_S + 30)
        code = docker.docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        took = time.monotonic() - started
        report.add("stop", code == "0",
                   f"exit {code} after {took:.1f} s" + (" (killed at the grace time)" if code == "137" else ""))
        return report
    finally:
        docker.docker("rm", "-f", name, check=False, timeout=60)
        for h in hosts:
            h.stop()
        records.kill_pids(records.processes_in_netns(set(record.netns.values())))
        record.remove()


def _logs(name: str) -> str:
    cp = docker.docker("logs", "--tail", "3", name, check=False)
    text = (cp.stderr + cp.stdout).strip()
    return text.splitlines()[-1] if text else "no output"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: satbed pep-check IMAGE", file=sys.stderr)
        return 2
    try:
        report = check(argv[0])
    except SatbedError as e:
        print(f"satbed: error: {e}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
