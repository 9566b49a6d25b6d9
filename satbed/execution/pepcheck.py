"""`satbed pep-check IMAGE`: test any PEP image against the image contract
(pep/CONTRACT.md, "The image contract").

The image runs as a lab would run it: its own entrypoint, `--network none`,
NET_ADMIN and NET_RAW, the SATBED_* environment. Two end hosts (namespaces,
10.99.99.2 and 10.99.99.254) are wired to its LAN and WAN ports, then:

  labels     org.satbed.contract=1, org.satbed.pep.name, org.satbed.pep.splits
             (true|false)
  ready      the entrypoint bridges the ports and starts the PEP (ready file)
  health     `ENTRYPOINT health` exits 0 with one line
  bridging   ICMP crosses it (transparent bridge, no address, no gateway)
  tcp        a 1 MB TCP transfer arrives intact (the server answers with its
             digest, then the client closes)
  splitting  the SYN seen on the WAN side differs from the client's (the PEP
             opened its own connection): must match org.satbed.pep.splits
  half-close the client half-closes after its 1 MB and still gets the
             server's digest; an image labelled org.satbed.pep.limits=
             no-half-close must instead show that limit (no answer)
  stats      `ENTRYPOINT stats` prints one JSON object with every required
             field of the right type, its name and `splitting` as the labels
             declare; a splitting PEP counts the connection and its bytes
  stop       `ENTRYPOINT stop` exits 0
  clean      after stop: no nft or iptables rules, no policy rules, no routes
             but the kernel's own (and `stats` still answers)
  options    `start` with an unknown option fails with one line naming it,
             and leaves nothing behind
  shutdown   `docker stop` ends it with exit status 0 within the grace time

The container runs as satbed's Docker backend runs a PEP node: Docker's
default capabilities plus NET_ADMIN and NET_RAW, the contract's sysctls set
with --sysctl, /proc/sys read-only.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

from satbed.backends import docker, records

from satbed.core import proc
from satbed.core.errors import SatbedError, error_line
from satbed.backends.net import Host
from satbed.core.proc import last_line, require_root, require_tools
from satbed.backends.tcpcheck import CLIENT, SERVER, client_answer

LAN, WAN = "lan0", "wan0"          # port names inside the PEP container
STATE = "/run/satbed/pep"          # SATBED_STATE_DIR inside it
PEP_ADDR = "10.99.99.3/24"           # for a PEP that connects from its own address (PEPsal)
TRANSFER_BYTES = 1 << 20
PORT = 5201
STOP_GRACE_S = 20
STATS_SETTLE_S = 5

# Limitations an image may declare (label org.satbed.pep.limits, comma
# separated): pep-check then verifies the PEP has it, and says so, instead
# of failing the check it concerns (pep/CONTRACT.md).
LIMITS = {"no-half-close": "the first FIN from either side ends the whole connection: a half-close is not relayed"}
SYN_FILTER = "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn"


@dataclass
class Report:
    image: str
    limits: list[str] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.checks.append((name, ok, detail))
        return ok

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for _, ok, _ in self.checks)

    def lines(self) -> list[str]:
        out = [f"{'ok  ' if ok else 'FAIL'} {name:<10} {detail}" for name, ok, detail in self.checks]
        out.append(f"{'PASS' if self.passed else 'FAIL'} {self.image}"
                   + (f" (declared limits, verified: {', '.join(self.limits)})" if self.limits else ""))
        return out


# Required stats fields and their types (pep/CONTRACT.md, "stats JSON").
STATS_FIELDS = {"name": str, "connections_split": int, "connections_active": int,
                "bytes_lan_to_wan": int, "bytes_wan_to_lan": int, "splitting": bool}
BOGUS_OPTION = "satbed_check_no_such_option"


def stats_problems(stats, name: str | None, splits: bool | None) -> list[str]:
    """What a stats object lacks against the contract (empty: it meets it)."""
    if not isinstance(stats, dict):
        return ["not a JSON object"]
    out = []
    for key, typ in STATS_FIELDS.items():
        v = stats.get(key)
        # bool is an int in Python: a count must not be true/false.
        if key not in stats:
            out.append(f"no {key}")
        elif not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
            out.append(f"{key} is {type(v).__name__}, not {typ.__name__}")
        elif typ is int and v < 0:
            out.append(f"{key} is negative")
    if name is not None and stats.get("name") != name:
        out.append(f"name {stats.get('name')!r} is not the label's {name!r}")
    if splits is not None and isinstance(stats.get("splitting"), bool) and stats["splitting"] != splits:
        out.append(f"splitting {str(stats['splitting']).lower()} but the label says {str(splits).lower()}")
    return out


def label_problems(labels: dict) -> list[str]:
    out = []
    if labels.get("org.satbed.contract") != "1":
        out.append("org.satbed.contract is not 1")
    if not labels.get("org.satbed.pep.name"):
        out.append("no org.satbed.pep.name")
    if labels.get("org.satbed.pep.splits") not in ("true", "false"):
        out.append("org.satbed.pep.splits is not true or false")
    unknown = [x for x in declared_limits(labels) if x not in LIMITS]
    if unknown:
        out.append(f"org.satbed.pep.limits names {', '.join(unknown)} (known: {', '.join(LIMITS)})")
    return out


def declared_limits(labels: dict) -> list[str]:
    return [x.strip() for x in labels.get("org.satbed.pep.limits", "").split(",") if x.strip()]


def half_close_check(got: dict, server_said: str, limits: list[str]) -> tuple[str, bool, str]:
    """The half-close check: the client's FIN is relayed and the server's
    answer still comes back; or, for an image declaring no-half-close, the
    answer does not come back (the declaration must be true)."""
    relayed = got.get("reply") == got.get("sent")
    if "no-half-close" not in limits:
        return ("half-close", relayed, "the client half-closed and still got the server's answer" if relayed
                else f"the client half-closed and got no answer (its reading ended by {got.get('end', '?')}, "
                     f"the server: {server_said or 'nothing'}); {got.get('error', '')}".rstrip("; "))
    if relayed:
        return ("half-close", False, "the image declares no-half-close but relayed a half-close: "
                                     "the client half-closed and still got the server's answer")
    return ("half-close", True, f"not relayed, as declared (org.satbed.pep.limits=no-half-close): "
                                f"the client half-closed, its reading ended by {got.get('end', '?')} "
                                f"with no answer; the server: {server_said or 'nothing'}")


def _transfer(a: Host, b: Host, mode: str) -> tuple[dict, str]:
    """TRANSFER_BYTES from a to b (mode close or half-close, see CLIENT):
    the client's JSON line (with "error" when it failed) and the server's
    last line."""
    server = b.popen(["/usr/bin/python3", "-c", SERVER, str(PORT), "eof" if mode == "half-close" else "count",
                      str(TRANSFER_BYTES)], text=True)
    try:
        server.stdout.readline()
        cp = a.run(["/usr/bin/python3", "-c", CLIENT, str(b.ip.ip), str(PORT), str(TRANSFER_BYTES), mode],
                   check=False, timeout=90)
        try:
            out, _ = server.communicate(timeout=65)
        except subprocess.TimeoutExpired:
            server.kill()
            out, _ = server.communicate()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return client_answer(cp), last_line(out or "")


def leftovers(pid: int) -> list[str]:
    """Rules and routes in a PEP's network namespace beyond what a fresh one
    with a bridge has, read from the host (the image needs no tools for it)."""
    def ns(*args: str) -> str:
        return proc.run(["nsenter", "-t", str(pid), "-n", "--", *args], check=False).stdout
    out = []
    if ns("nft", "list", "ruleset").strip():
        out.append("nft rules")
    if shutil.which("iptables-legacy-save") and "-A " in ns("iptables-legacy-save"):
        out.append("iptables (legacy) rules")
    rules = [ln.split(":", 1)[0] for ln in ns("ip", "-4", "rule", "show").splitlines() if ln.strip()]
    if sorted(rules) != ["0", "32766", "32767"]:
        out.append(f"policy rules {', '.join(r for r in rules if r not in ('0', '32766', '32767'))}")
    # The kernel's own: loopback's local and broadcast routes.
    routes = [ln for ln in ns("ip", "-4", "route", "show", "table", "all").splitlines()
              if ln.strip() and not (" 127." in f" {ln}" and "table local" in ln and "proto kernel" in ln)]
    if routes:
        out.append(f"routes ({routes[0].strip()}{', ...' if len(routes) > 1 else ''})")
    return out


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
    require_tools("ip", "ethtool", "tcpdump", "mnexec", "nsenter", "nft")
    reason = docker.available()
    if reason:
        raise SatbedError(reason)
    if docker.image_id(image) is None:
        raise SatbedError(f"no image {image} (build it, or `make images` for satbed's own)")
    entry = docker.entrypoint(image)
    labels = docker.image_labels(image)
    declared = labels.get("org.satbed.pep.splits")
    splits = {"true": True, "false": False}.get(declared or "")
    limits = declared_limits(labels)
    report = Report(image, limits)
    bad = label_problems(labels)
    report.add("labels", not bad, "; ".join(bad) if bad else
               f"contract 1, name {labels['org.satbed.pep.name']}, splits {declared}"
               + (f", limits {','.join(limits)}" if limits else ""))
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
        args = ["run", "-d", "--name", name, "--network", "none",
                "--label", f"{docker.LABEL}.prefix={prefix}", "--label", f"{docker.LABEL}.node=pep"]
        for cap in docker.CAPS:
            args += ["--cap-add", cap]
        for key, value in docker.node_sysctls("pep").items():
            args += ["--sysctl", f"{key}={value}"]
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

        def verb(*v: str, opts: str | None = None) -> subprocess.CompletedProcess:
            extra = ["-e", f"SATBED_PEP_OPTS={opts}"] if opts is not None else []
            return docker.docker("exec", *extra, name, *entry, *v, check=False, timeout=60)

        cp = verb("health")
        lines = (cp.stdout or cp.stderr).strip().splitlines()
        report.add("health", cp.returncode == 0 and len(lines) == 1,
                   (lines[-1] if lines else f"exit {cp.returncode}, no line")
                   + (f" ({len(lines)} lines, want one)" if len(lines) > 1 else ""))

        cp = a.run(["ping", "-c", "3", "-i", "0.2", "-W", "2", str(b.ip.ip)], check=False, timeout=20)
        got = re.search(r"(\d+) received", cp.stdout)
        report.add("bridging", cp.returncode == 0, f"{got.group(1) if got else 0}/3 pings answered across it")

        cap_a, cap_b = _start_capture(a), _start_capture(b)
        got, _ = _transfer(a, b, "close")
        intact = got.get("reply") == got.get("sent")
        report.add("tcp", intact, f"{TRANSFER_BYTES} bytes intact" if intact
                   else f"transfer failed: {got.get('error') or got}"[:240])
        syn_a, syn_b = _syn(cap_a), _syn(cap_b)
        if syn_a is None or syn_b is None:
            report.add("splitting", False, "no SYN captured on both sides")
        else:
            split = syn_a["seq"] != syn_b["seq"]
            seen = (f"client SYN seq {syn_a['seq']}, WAN SYN seq {syn_b['seq']}: "
                    f"{'split' if split else 'end to end'}")
            report.add("splitting", splits is not None and split == splits, f"{seen} (declared splits={declared})")

        report.add(*half_close_check(*_transfer(a, b, "half-close"), limits))

        # A PEP may refresh its counters periodically (pepd: every second).
        deadline = time.monotonic() + STATS_SETTLE_S
        while True:
            cp = verb("stats")
            try:
                stats = json.loads(cp.stdout)
            except ValueError:
                stats = None
                break
            bad = stats_problems(stats, labels.get("org.satbed.pep.name"), splits)
            if not bad and splits and intact:
                if stats["connections_split"] < 1:
                    bad.append("connections_split 0 after a split transfer")
                if stats["bytes_lan_to_wan"] < TRANSFER_BYTES:
                    bad.append(f"bytes_lan_to_wan {stats['bytes_lan_to_wan']} < the {TRANSFER_BYTES} relayed")
            if not bad or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if stats is None:
            report.add("stats", False, f"not JSON: {(cp.stdout or cp.stderr).strip()[:120]}")
        else:
            if len(cp.stdout.strip().splitlines()) != 1:
                bad.append("not on one line")
            report.add("stats", not bad, "; ".join(bad) if bad else
                       f"name={stats['name']}, connections_split={stats['connections_split']}, "
                       f"bytes_lan_to_wan={stats['bytes_lan_to_wan']}")

        cp = verb("stop")
        report.add("stop", cp.returncode == 0, f"exit {cp.returncode}"
                   + (f": {last_line(cp.stderr or cp.stdout)}" if cp.returncode else ""))
        left = leftovers(pid)
        after = verb("stats")
        try:
            json.loads(after.stdout)
        except ValueError:
            left.append("stats after stop is not JSON")
        report.add("clean", not left, "left: " + ", ".join(left) if left else
                   "no rules, policy rules or routes left; stats still answers")

        cp = verb("start", opts=f"{BOGUS_OPTION}=1")
        lines = cp.stderr.strip().splitlines()
        problems = []
        if cp.returncode == 0:
            problems.append("start accepted it")
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr, want one")
        elif BOGUS_OPTION not in lines[0]:
            problems.append(f"the line does not name it: {lines[0][:120]}")
        if cp.returncode == 0:
            verb("stop")
        problems += [f"left {x}" for x in leftovers(pid)]
        report.add("options", not problems, "; ".join(problems) if problems else f"rejected: {lines[0][:120]}")

        started = time.monotonic()
        docker.docker("stop", "-t", str(STOP_GRACE_S), name, check=False, timeout=STOP_GRACE_S + 30)
        code = docker.docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        took = time.monotonic() - started
        report.add("shutdown", code == "0",
                   f"exit {code} after {took:.1f} s" + (" (killed at the grace time)" if code == "137" else ""))
        return report
    finally:
        docker.docker("rm", "-f", name, check=False, timeout=60)
        for h in hosts:
            h.stop()
        # The hosts' namespaces are still held: their inodes are theirs (records.HeldNetns).
        records.kill_pids(records.processes_in_netns({h.netns.inode for h in hosts if h.netns}))
        for h in hosts:
            h.release_netns()
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
        return error_line(e)
    print("\n".join(report.lines()))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
