"""Physical test beds deployed with Ansible (playbooks/), and the `ansible`
testbed backend that runs experiments on them.

`satbed run|matrix --backend ansible --inventory FILE` drives the machines
the site playbook prepared. Each topology node is a machine of the
inventory (named by its node, or by `satbed_node`); a node's processes run
over SSH with the inventory's connection details (one multiplexed
connection per machine), on the machine's own NICs (`satbed_ports`), which
the roles wired and configured. Everything above satbed.backends.net (runner,
clients, PEP adapters, emulator control, captures) is unchanged: the
machine is a Sandbox like a namespace or a container.

Two things a lab provides (docs/testbed/physical.md): satbed at the
controller's checkout path on every machine (the satbed_host role puts it
there), and the results directory at the same path on every machine
(shared storage), since payloads, captures and PEP logs are written where
they run and read where the controller analyses them.

`python3 -m satbed.backends.ansible plan [--topology NAME]` prints, as JSON, what the
roles lay onto each machine, resolved by satbed's own topology and TCP
profile code (so the playbooks never parse those files a second way): each
node's kind and ports, an end host's address, gateway, congestion control
choices and TCP profile sysctls, a PEP node's side and address."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field

from satbed.backends import records
from satbed.model import profiles

from satbed.model import topology

from satbed.model import topology_spec
from satbed.core.errors import SatbedError, one_line_errors
from satbed.backends.net import Backend, Sandbox
from satbed.core.proc import REPO_ROOT, last_line

INVENTORY_ENV = "SATBED_INVENTORY"
# The roles each kind of node needs (each role leaves /etc/satbed/role.NAME).
ROLES = {"host": ("satbed_host", "end_host"), "pep": ("satbed_host", "transparent_bridge", "pep"),
         "emulator": ("satbed_host", "transparent_bridge", "satemu"),
         "bridge": ("satbed_host", "transparent_bridge")}
SSH_TIMEOUT_S = 10
# On each machine: a run's pid files (PREFIX-NODE-*.pid) and the commands
# that undo what it set up (PREFIX-NODE.clean), for `satbed clean`.
RUN_FILES = "/run/satbed"
# The satemu role's standing link (tc script, satemu configuration).
STANDING = ("/usr/local/sbin/satbed-link", "/etc/satbed/satemu.json")
# Variables of the controller's environment that mean nothing on a machine.
_LOCAL_ENV = ("SSH_", "DISPLAY", "PWD", "OLDPWD", "SHLVL", "_", "TERM", "XDG_", "LS_COLORS", "MAIL")


@dataclass(frozen=True)
class Machine:
    """One machine of the inventory: how to reach it and its NICs."""
    host: str                   # inventory name
    node: str                   # topology node
    address: str
    user: str = "root"
    port: int | None = None
    key: str = ""
    ssh_args: tuple[str, ...] = ()
    nics: dict[str, str] = field(default_factory=dict)     # topology port -> NIC

    def ssh(self, control: str = "") -> list[str]:
        """ssh's command line; control: a multiplexed connection's socket
        (a run's, closed by its teardown), or none."""
        cmd = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_TIMEOUT_S}", "-o", "ServerAliveInterval=15"]
        if control:
            cmd += ["-o", "ControlMaster=auto", "-o", f"ControlPath={control}", "-o", "ControlPersist=120"]
        if self.port:
            cmd += ["-p", str(self.port)]
        if self.key:
            cmd += ["-i", self.key]
        return [*cmd, *self.ssh_args, f"{self.user}@{self.address}"]


def _hostvars(path: str) -> dict[str, dict]:
    """Every host of an inventory with its variables, through
    `ansible-inventory` (any inventory Ansible reads: INI, YAML, a script)."""
    if not path:
        raise SatbedError("--backend ansible needs --inventory FILE (docs/testbed/physical.md)")
    if not os.path.isfile(path):
        raise SatbedError(f"no inventory file {path}")
    try:
        cp = subprocess.run(["ansible-inventory", "-i", path, "--list"], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    except FileNotFoundError:
        raise SatbedError("ansible-inventory is missing (apt-get install ansible-core)") from None
    except subprocess.TimeoutExpired:
        raise SatbedError(f"ansible-inventory -i {path} timed out") from None
    warn = [ln for ln in cp.stderr.splitlines() if "WARNING" in ln or "ERROR" in ln]
    if cp.returncode != 0 or any("Unable to parse" in ln or "ERROR" in ln for ln in warn):
        raise SatbedError(f"bad inventory {path}: {last_line(' '.join(warn) or cp.stderr) or 'unreadable'}")
    try:
        return json.loads(cp.stdout).get("_meta", {}).get("hostvars", {})
    except ValueError:
        raise SatbedError(f"bad inventory {path}: ansible-inventory printed no JSON") from None


def _machine(path: str, host: str, hv: dict) -> Machine:
    nics = hv.get("satbed_ports") or {}
    if not isinstance(nics, dict):
        raise SatbedError(f"bad inventory {path}: {host}: satbed_ports must map ports to NICs")
    port = hv.get("ansible_port") or hv.get("ansible_ssh_port")
    if port is not None and port != "":
        text = str(port).strip()
        if not (text.isascii() and text.isdigit() and 0 < int(text) < 65536):
            raise SatbedError(f"bad inventory {path}: {host}: ansible_port {port!r} is not a TCP port (1-65535)")
        port = int(text)
    args: list[str] = []
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        try:
            args += shlex.split(str(hv.get(key, "")))
        except ValueError as e:     # an unclosed quote
            raise SatbedError(f"bad inventory {path}: {host}: {key}: {e}") from None
    return Machine(host, str(hv.get("satbed_node", host)), str(hv.get("ansible_host", host)),
                   str(hv.get("ansible_user") or hv.get("ansible_ssh_user") or "root"),
                   port or None, str(hv.get("ansible_ssh_private_key_file", "")), tuple(args),
                   {str(k): str(v) for k, v in nics.items()})


def load_inventory(path: str, spec: topology_spec.TopologySpec) -> dict[str, Machine]:
    """node -> Machine. One clear line when the inventory is unreadable or a
    node has no machine."""
    machines: dict[str, Machine] = {}
    for host, hv in _hostvars(path).items():
        node = str(hv.get("satbed_node", host))
        if node not in spec.node_names():
            continue
        if node in machines:
            raise SatbedError(f"bad inventory {path}: two machines for node {node} "
                              f"({machines[node].host} and {host})")
        machines[node] = _machine(path, host, hv)
    missing = [n for n in spec.node_names() if n not in machines]
    if missing:
        raise SatbedError(f"bad inventory {path}: no machine for node {', '.join(missing)} of topology "
                          f"{spec.name} (name hosts by their node, or set satbed_node)")
    for node, m in machines.items():
        ports = node_ports(spec, node)
        lacking = [p for p in ports if p not in m.nics]
        if lacking:
            raise SatbedError(f"bad inventory {path}: {m.host}: satbed_ports has no NIC for "
                              f"{', '.join(lacking)}")
    return machines


def node_ports(spec: topology_spec.TopologySpec, node: str) -> list[str]:
    if node in spec.hosts:
        return ["eth0"]
    if node in spec.transparent:
        return list(spec.transparent[node].ports)
    return list(spec.routers[node].addresses)


def node_kind(spec: topology_spec.TopologySpec, node: str) -> str:
    if node in spec.hosts:
        return "host"
    if node in spec.transparent:
        return spec.transparent[node].kind
    return "router"


def control_path(prefix: str, node: str) -> str:
    return os.path.join(records.RECORD_DIR, f"{prefix}-{node}.ssh")


def ssh_run(m: Machine, control: str, script: str, timeout: float = 30,
            input: str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([*m.ssh(control), script], capture_output=True, text=True, timeout=timeout,
                              input=input, stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SatbedError(f"{m.host} ({m.address}): no answer over SSH in {timeout:g} s") from None


def check_machines(spec: topology_spec.TopologySpec, machines: dict[str, Machine], run_dir: str) -> None:
    """Every machine answers over SSH, has the roles its node needs applied,
    and sees the run directory (one line naming the first that does not)."""
    token = uuid.uuid4().hex
    marker = os.path.join(run_dir, ".shared")
    with open(marker, "w", encoding="ascii") as f:
        f.write(token)
    probes = {}
    for node, m in machines.items():
        # Four lines: the roles applied, the run directory's token, satbed, a standing link.
        script = (f"ls /etc/satbed 2>/dev/null | tr '\\n' ' '; echo; cat {shlex.quote(marker)} 2>/dev/null; "
                  f"echo; test -f {shlex.quote(REPO_ROOT)}/satbed/backends/probe.py && printf satbed; "
                  f"echo; test -e {STANDING[0]} -o -e {STANDING[1]} && printf standing; echo")
        probes[node] = subprocess.Popen([*m.ssh(), script], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        for node, proc in probes.items():
            m = machines[node]
            try:
                out, err = proc.communicate(timeout=SSH_TIMEOUT_S + 20)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise SatbedError(f"{m.host} ({m.address}): unreachable over SSH (no answer)") from None
            if proc.returncode == 255:
                raise SatbedError(f"{m.host} ({m.address}): unreachable over SSH: {last_line(err) or 'exit 255'}")
            lines = (out.splitlines() + ["", "", "", ""])[:4]
            have = {n[len("role."):] for n in lines[0].split() if n.startswith("role.")}
            lacking = [r for r in ROLES.get(node_kind(spec, node), ("satbed_host",)) if r not in have]
            if lacking:
                raise SatbedError(f"{m.host}: role {', '.join(lacking)} not applied (run playbooks/site.yml "
                                  f"on this inventory)")
            if lines[2].strip() != "satbed":
                raise SatbedError(f"{m.host}: no satbed at {REPO_ROOT} (the satbed_host role installs it)")
            if lines[3].strip() == "standing":
                raise SatbedError(f"{m.host}: a standing link is installed (satemu_standing: true), which "
                                  f"would hold the ports the run's emulator needs: apply the satemu role "
                                  f"with satemu_standing: false first")
            if lines[1].strip() != token:
                raise SatbedError(f"{m.host}: does not see the run directory {run_dir} (mount the results "
                                  f"directory at the same path on every machine)")
    finally:
        for proc in probes.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        os.unlink(marker)


@dataclass(frozen=True)
class AnsibleBackend(Backend):
    """Testbed nodes on the machines of an inventory (a physical test bed),
    bound to one run: the machines, checked to answer and to see the run
    directory. Handed to the Testbed like the namespace backend."""

    name = "ansible"
    inventory: str = ""
    machines: dict[str, Machine] = field(default_factory=dict)

    @classmethod
    def for_run(cls, inventory: str, spec: topology_spec.TopologySpec, run_dir: str) -> "AnsibleBackend":
        machines = load_inventory(inventory, spec)
        check_machines(spec, machines, run_dir)
        return cls(inventory, machines)

    def sandbox(self, full_name: str, role: str, record: records.RunRecord) -> "SshSandbox":
        return SshSandbox(full_name, role, self.machines)

    def describe(self, tb) -> dict:
        """environment.json's `testbed`: which machine ran each node."""
        return {"backend": "ansible", "inventory": self.inventory,
                "machines": {name: {"host": node.sandbox.machine.host, "address": node.sandbox.machine.address,
                                    "nics": node.sandbox.machine.nics}
                             for name, node in tb.nodes.items() if isinstance(node.sandbox, SshSandbox)}}


class RemoteProcess(subprocess.Popen):
    """A program on a machine, run by a local ssh client. Signals go to the
    remote program's process group (the program and what it forked), not
    only to the local ssh client, which would leave the program running."""

    sandbox: "SshSandbox"
    pidfile: str

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        script = (f"p=$(cat {self.pidfile} 2>/dev/null) || exit 0; "
                  f"g=$(ps -o pgid= -p \"$p\" | tr -d ' '); kill -{int(sig)} -- -\"${{g:-$p}}\" 2>/dev/null "
                  f"|| kill -{int(sig)} \"$p\" 2>/dev/null; true")
        try:
            ssh_run(self.sandbox.machine, self.sandbox.control, script, timeout=15)
        except SatbedError:
            pass
        if sig == signal.SIGKILL:
            super().send_signal(sig)


class SshSandbox(Sandbox):
    """A testbed node on a machine of the inventory (see the module docstring)."""

    local = False
    wired = True

    def __init__(self, full_name: str, role: str, machines: dict[str, Machine]):
        prefix, _, node = full_name.partition("-")
        if node not in machines:
            raise SatbedError(f"--backend ansible: no machine for node {node} (give --inventory FILE)")
        self.machine = machines[node]
        self.control = control_path(prefix, node)
        self.prefix, self.node = prefix, node
        self.pid = 0
        self.count = 0

    def nic(self, port: str) -> str | None:
        return self.machine.nics.get(port)

    def popen(self, args: list[str], **kwargs) -> subprocess.Popen:
        env = kwargs.pop("env", None) or {}
        cwd = kwargs.pop("cwd", None) or os.getcwd()
        self.count += 1
        pidfile = f"{RUN_FILES}/{self.prefix}-{self.node}-{os.getpid()}-{self.count}.pid"
        assigns = [f"{k}={v}" for k, v in env.items() if not k.startswith(_LOCAL_ENV)]
        script = (f"mkdir -p {RUN_FILES}; echo $$ > {pidfile}; cd {shlex.quote(cwd)} 2>/dev/null || cd /; "
                  f"exec {shlex.join(['env', *assigns, *args]) if assigns else shlex.join(args)}")
        kwargs.setdefault("stdin", subprocess.DEVNULL)     # never the controller's terminal
        proc = RemoteProcess([*self.machine.ssh(self.control), shlex.join(["sh", "-c", script])], **kwargs)
        proc.sandbox, proc.pidfile = self, pidfile
        return proc

    def proc_net(self, proto: str) -> str:
        cp = ssh_run(self.machine, self.control, f"cat /proc/net/{proto}", timeout=15)
        return cp.stdout

    def on_clean(self, args: list[str]) -> None:
        # Kept on the machine, where `satbed clean --backend ansible` finds it.
        ssh_run(self.machine, self.control, f"mkdir -p {RUN_FILES} && printf '%s\\n' {shlex.quote(shlex.join(args))} "
                                            f">> {RUN_FILES}/{self.prefix}-{self.node}.clean", timeout=15)

    def stop(self) -> None:
        # The run's pid files and undo commands, then the multiplexed connection.
        ssh_run(self.machine, self.control, f"rm -f {RUN_FILES}/{self.prefix}-{self.node}-*.pid "
                                            f"{RUN_FILES}/{self.prefix}-{self.node}.clean", timeout=15)
        subprocess.run([*self.machine.ssh(self.control)[:-1], "-O", "exit", self.machine.ssh(self.control)[-1]],
                       capture_output=True, timeout=15)



# Run on each machine by `satbed clean --backend ansible`: what runs of no
# live prefix left. A pid file's process is killed with its group only if it
# is as old as the file (a pid since reused by another program is not);
# then the run's undo commands (a PEP adapter's stop, a port's qdisc); then
# the rest of its files.
_CLEAN_SCRIPT = r"""
cd %(dir)s 2>/dev/null || { echo 0 0; exit 0; }
live=" $1 "; killed=0; undone=0; now=$(date +%%s)
for f in *.pid; do
  [ -e "$f" ] || continue
  case "$live" in *" ${f%%%%-*} "*) continue ;; esac
  pid=$(cat "$f" 2>/dev/null)
  age=$((now - $(stat -c %%Y "$f")))
  et=$(ps -o etimes= -p "$pid" 2>/dev/null | tr -d ' ')
  if [ -n "$pid" ] && [ -n "$et" ] && [ "$et" -ge $((age - 2)) ]; then
    g=$(ps -o pgid= -p "$pid" | tr -d ' ')
    kill -KILL -- "-${g:-$pid}" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    killed=$((killed + 1))
  fi
  rm -f "$f"
done
for f in *.clean; do
  [ -e "$f" ] || continue
  case "$live" in *" ${f%%%%-*} "*) continue ;; esac
  while IFS= read -r cmd; do
    sh -c "$cmd" </dev/null >/dev/null 2>&1
    undone=$((undone + 1))
  done < "$f"
  rm -f "$f"
done
# What else those runs left here (satemu's control socket).
for f in *-*; do
  [ -e "$f" ] || continue
  case "$live" in *" ${f%%%%-*} "*) continue ;; esac
  rm -f "$f"
done
echo "$killed $undone"
""" % {"dir": RUN_FILES}


def clean(inventory: str, live: set[str]) -> list[str]:
    """Stop on every machine of the inventory what killed runs left there
    (runs whose prefix is not in live): their processes (clients, servers,
    satemu, tcpdump), then their undo commands (PEP adapters' stop, which
    removes the interception rules, and tc qdiscs). Unreachable machines are
    named in one line after the others are done."""
    machines = [_machine(inventory, host, hv) for host, hv in _hostvars(inventory).items()]
    procs = {m.host: subprocess.Popen([*m.ssh(), shlex.join(["sh", "-s", " ".join(sorted(live))])],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
             for m in machines}
    done, unreachable = [], []
    for m in machines:
        proc = procs[m.host]
        try:
            out, err = proc.communicate(_CLEAN_SCRIPT, timeout=SSH_TIMEOUT_S + 50)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            out, err = "", "no answer"
        counts = out.split()
        if proc.returncode != 0 or len(counts) != 2:
            unreachable.append(f"{m.host} ({m.address}): {last_line(err) or 'exit ' + str(proc.returncode)}")
        elif counts != ["0", "0"]:
            done.append(f"{m.host}: {counts[0]} process(es) stopped, {counts[1]} undo command(s) run")
    if unreachable:
        raise SatbedError("clean: " + "; ".join(unreachable) + (f" (done: {'; '.join(done)})" if done else ""))
    return done


def plan(spec: topology_spec.TopologySpec) -> dict:
    nodes: dict[str, dict] = {}
    for h in spec.hosts.values():
        prof = profiles.load(h.profile) if h.profile else None
        cc = list(prof.congestion_control) if prof and prof.congestion_control else \
            [c for c in (h.tcp_cc, "cubic") if c]
        nodes[h.name] = {"kind": "host", "ports": ["eth0"], "ip": str(h.ip),
                         "gateway": str(h.gateway or ""), "role": h.role,
                         "congestion_control": list(dict.fromkeys(cc)), "profile": h.profile,
                         "sysctls": dict(prof.sysctls) if prof else {}}
    for t in spec.transparent.values():
        nodes[t.name] = {"kind": t.kind, "ports": list(t.ports), "side": t.side,
                         "ip": str(t.ip or "")}
    for r in spec.routers.values():
        nodes[r.name] = {"kind": "router", "ports": list(r.addresses)}
    return {"topology": spec.name, "mtu": spec.mtu, "subnet": str(spec.subnet or ""), "nodes": nodes}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python3 -m satbed.backends.ansible")
    sub = p.add_subparsers(dest="command", required=True)
    pl = sub.add_parser("plan", help="what the playbooks lay onto each machine, as JSON")
    pl.add_argument("--topology", default="globalhawk")
    args = p.parse_args(argv)

    def body() -> int:
        print(json.dumps(plan(topology.load(args.topology)), sort_keys=True))
        return 0
    return one_line_errors(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
