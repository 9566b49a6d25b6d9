"""The node vocabulary satbed is built from, after Mininet's Node/Link/Intf:

- Node: a network stack where processes run (a network namespace here; a
  container on the Docker backend), with ports (Intf).
- Host: an end host with one port, eth0, an IP address and, beyond its
  subnet, a gateway.
- Router: several ports, an address on each, IP forwarding, static routes,
  and an optional drop-tail queue (behind an optional rate) per port.
- TransparentNode: two ports and no IP address; forwards frames between them
  (a bridge, a PEP on a bridge, or the satellite emulator).
- Link: a veth pair joining two ports.

Everything above this module (testbed, runner, clients, PEPs) uses only run(),
popen() and the names below, so a Docker-backed node can stand in for a
namespace node without anything above it changing."""

from __future__ import annotations

import ipaddress
import subprocess
from typing import Sequence

from mininet.node import Node as MininetNode

from satbed.core import proc
from satbed.core.errors import SatbedError
from satbed.core.proc import last_line
from satbed.backends.records import HeldNetns, RunRecord, tagged_env

# Off on every port, so the emulator and captures see the packets of the
# wire: tx is checksum offload (raw sockets would see partial sums);
# tx-udp-segmentation lets a veth carry a UDP GSO datagram (Saratoga's
# batches, up to 64 KB) to the emulator uncut.
OFFLOADS = ("tso", "gso", "gro", "tx", "tx-udp-segmentation")


class Intf:
    """One port of a node: `port` is its name in the topology, `name` the device."""

    def __init__(self, node: "Node", port: str, name: str):
        self.node, self.port, self.name = node, port, name

    def __str__(self) -> str:
        return self.name

    def offloads(self) -> dict[str, str]:
        out = self.node.run(["ethtool", "-k", self.name], check=False).stdout
        state = {}
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("tcp-segmentation-offload", "generic-segmentation-offload",
                               "generic-receive-offload", "tx-checksumming", "rx-checksumming",
                               "tx-udp-segmentation"):
                state[key.strip()] = value.split()[0] if value.split() else ""
        return state


class Sandbox:
    """Where a node's processes run. The namespace sandbox is a Mininet node
    (a fresh network namespace held by a shell); a container sandbox can stand
    in for it: it needs a pid inside its network namespace, popen and stop."""

    pid: int
    mininet_node: object | None = None
    # A machine of a physical test bed (satbed.backends.ansible) is neither local (no
    # pid or namespace here to record) nor wired by satbed (its NICs are
    # cabled and configured by the playbooks).
    local = True
    wired = False

    def nic(self, port: str) -> str | None:
        """The device of a topology port where the node already has one."""
        return None

    def proc_net(self, proto: str) -> str:
        """/proc/net/<proto> (tcp, udp) as the node's network stack sees it."""
        with open(f"/proc/{self.pid}/net/{proto}", encoding="ascii") as f:
            return f.read()

    def popen(self, args: list[str], **kwargs) -> subprocess.Popen:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def on_clean(self, args: list[str]) -> None:
        """A command that undoes what the run sets up in this node, for
        `satbed clean` should the run be killed before undoing it itself.
        A namespace or a container takes everything with it when removed;
        a machine keeps it (satbed.backends.ansible)."""

    def admin(self, node: "Node", args: list[str]) -> subprocess.CompletedProcess:
        """satbed's own configuration of the node's network namespace (a
        sysctl). A namespace node runs it inside; a container node, whose
        programs may not write /proc/sys, from the host."""
        return node.run(args, check=False)


class NamespaceSandbox(Sandbox):
    def __init__(self, full_name: str, role: str):
        # inNamespace: a fresh netns held by the shell; every popen joins it.
        self.mininet_node = MininetNode(full_name, inNamespace=True)
        self.pid = self.mininet_node.pid
        self.prefix = full_name.partition("-")[0]

    def popen(self, args: list[str], **kwargs) -> subprocess.Popen:
        kwargs["env"] = tagged_env(self.prefix, kwargs.get("env"))
        return self.mininet_node.popen(args, **kwargs)

    def stop(self) -> None:
        # Killing the shell drops the last reference to the namespace, and
        # with it every veth end inside.
        self.mininet_node.stop(deleteIntfs=False)


class Backend:
    """How a testbed's nodes are realized, handed to the Testbed (as Mininet
    takes its host class and containerlab its runtime). This one: network
    namespaces held by Mininet nodes. The Docker and Ansible backends
    (backends/docker.py, backends/ansible.py) are objects of their own,
    bound to one run's images, mounts or machines."""

    name = "mininet"

    def sandbox(self, full_name: str, role: str, record: RunRecord) -> Sandbox:
        return NamespaceSandbox(full_name, role)

    def describe(self, tb: object) -> dict:
        """environment.json's `testbed`."""
        return {"backend": self.name}


NAMESPACES = Backend()


class Node:
    """A network stack where processes run; processes it starts are recorded."""

    def __init__(self, name: str, short: str, prefix: str, record: RunRecord,
                 backend: Backend = NAMESPACES, role: str = "host"):
        self.name, self.short, self.prefix, self.record = name, short, prefix, record
        self.intfs: dict[str, Intf] = {}
        self.procs: list[subprocess.Popen] = []
        self.sandbox = backend.sandbox(f"{prefix}-{name}", role, record)
        self.pid: int = self.sandbox.pid
        self.netns: HeldNetns | None = None
        if self.sandbox.local:
            try:
                self.netns = HeldNetns(self.pid)
            except OSError as e:
                raise SatbedError(f"{name}: its network namespace is gone: {e.strerror}") from None
            record.netns[name] = self.netns.inode
            record.add_pid(self.pid)
        try:
            self.run(["ip", "link", "set", "lo", "up"])
            # No stray IPv6 link-local addresses or router solicitations in captures.
            self.sysctl("net.ipv6.conf.all.disable_ipv6", "1", must=False)
            self.sysctl("net.ipv6.conf.default.disable_ipv6", "1", must=False)
        except BaseException:
            self.release_netns()
            raise

    def release_netns(self) -> None:
        """Let the namespace go (the kernel frees it once nothing else holds it)."""
        if self.netns is not None:
            self.netns.close()

    @property
    def mn(self):
        """The Mininet node, for Mininet's CLI."""
        return self.sandbox.mininet_node

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def intf_name(self, port: str) -> str:
        return self.sandbox.nic(port) or f"{self.prefix}-{self.short}{port}"[:15]

    def popen(self, args: Sequence[str], **kwargs) -> subprocess.Popen:
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        try:
            proc = self.sandbox.popen(list(args), **kwargs)
        except FileNotFoundError:
            raise SatbedError(f"missing tool: {args[0]}") from None
        self.procs.append(proc)
        self.record.add_pid(proc.pid)
        return proc

    def run(self, args: Sequence[str], timeout: float = 30, check: bool = True,
            input: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """env: the process's environment, as the sandbox's popen takes it (None: its default)."""
        proc = self.popen(args, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                          text=True, env=env)
        try:
            out, err = proc.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise SatbedError(f"{self.name}: timed out after {timeout:g}s: {' '.join(args)}") from None
        finally:
            self.procs.remove(proc)
        if check and proc.returncode != 0:
            raise SatbedError(f"{self.name}: {' '.join(args)} failed: {last_line(err or out)}")
        return subprocess.CompletedProcess(list(args), proc.returncode, out, err)

    def sysctl(self, key: str, value: str, must: bool = True) -> bool:
        cp = self.sandbox.admin(self, ["sysctl", "-q", "-w", f"{key}={value}"])
        if must and cp.returncode != 0:
            raise SatbedError(f"{self.name}: cannot set {key}={value}: {last_line(cp.stderr)}")
        return cp.returncode == 0

    def set_tcp_cc(self, wanted: str) -> str:
        """Set this node's default TCP congestion control; cubic where the
        kernel lacks the one wanted. Set on every node whose sockets carry the
        transfer, so none inherits the machine's own default (a new network
        namespace starts with the root namespace's, bbr on some kernels).
        Returns what is in force, for the run record."""
        available = _read_proc("/proc/sys/net/ipv4/tcp_available_congestion_control").split()
        for cc in (wanted, "cubic"):
            if cc and cc in available:
                allow_in_namespaces(cc)
                if self.sysctl("net.ipv4.tcp_congestion_control", cc, must=False):
                    break
        return self.tcp_cc_in_force()

    def tcp_cc_in_force(self) -> str:
        """This node's default TCP congestion control, as its kernel says."""
        return self.run(["sysctl", "-n", "net.ipv4.tcp_congestion_control"]).stdout.strip()

    def add_intf(self, port: str, name: str) -> Intf:
        intf = Intf(self, port, name)
        self.intfs[port] = intf
        return intf

    def prepare_intf(self, intf: Intf, mtu: int) -> None:
        self.run(["ip", "link", "set", intf.name, "mtu", str(mtu)])
        self.run(["ethtool", "-K", intf.name, *(a for o in OFFLOADS for a in (o, "off"))])
        self.run(["ip", "link", "set", intf.name, "up"])

    def stop(self) -> None:
        for child in list(self.procs):
            if child.poll() is None:
                child.terminate()
        for child in list(self.procs):
            try:
                child.wait(timeout=3)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(timeout=3)
        self.procs.clear()
        self.sandbox.stop()


class Host(Node):
    def __init__(self, name: str, short: str, prefix: str, record: RunRecord,
                 ip: ipaddress.IPv4Interface, backend: Backend = NAMESPACES,
                 gateway: ipaddress.IPv4Address | None = None):
        super().__init__(name, short, prefix, record, backend, role="host")
        self.ip, self.gateway = ip, gateway

    @property
    def eth0(self) -> Intf:
        return self.intfs["eth0"]

    def configure(self, mtu: int) -> None:
        self.prepare_intf(self.eth0, mtu)
        self.run(["ip", "addr", "add", str(self.ip), "dev", self.eth0.name])
        if self.gateway is not None:
            self.run(["ip", "route", "add", "default", "via", str(self.gateway), "dev", self.eth0.name])

    def routes(self) -> list[str]:
        """Every route of the host, as `ip route` prints it (the TCP profile
        puts its attributes on each)."""
        out = self.run(["ip", "-o", "route", "show"]).stdout
        return [line.strip() for line in out.splitlines() if line.strip()]


def _read_proc(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def allow_in_namespaces(cc: str) -> None:
    """A namespace may only pick algorithms on the root namespace's allowed
    list; adding one there changes no default."""
    path = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
    allowed = _read_proc(path).split()
    if cc not in allowed:
        with open(path, "w", encoding="ascii") as f:
            f.write(" ".join([*allowed, cc]))


class Router(Node):
    """Forwards IP between its ports; routes and queues come from the spec."""

    def __init__(self, name: str, short: str, prefix: str, record: RunRecord,
                 addresses: dict[str, ipaddress.IPv4Interface], backend: Backend = NAMESPACES):
        super().__init__(name, short, prefix, record, backend, role="router")
        self.addresses = addresses
        self.sysctl("net.ipv4.ip_forward", "1")
        # Asymmetric paths (a PEP answering for a far host) must not be dropped as spoofed.
        self.sysctl("net.ipv4.conf.all.rp_filter", "0", must=False)
        self.sysctl("net.ipv4.conf.default.rp_filter", "0", must=False)

    def configure(self, mtu: int) -> None:
        for port, addr in self.addresses.items():
            intf = self.intfs[port]
            self.prepare_intf(intf, mtu)
            self.run(["ip", "addr", "add", str(addr), "dev", intf.name])

    def add_route(self, to: str, via: str) -> None:
        self.run(["ip", "route", "replace", to, "via", via])

    def set_queue(self, port: str, packets: int, size_bytes: int, rate_bps: int | None,
                  mtu: int) -> list[list[str]]:
        """A drop-tail FIFO on the port's egress, behind an HTB shaper when
        the port has a rate (a veth drains at memory speed, so without one
        the queue only holds bursts). Returns the commands, for the record."""
        dev = self.intfs[port].name
        fifo = ["bfifo", "limit", str(size_bytes)] if size_bytes else ["pfifo", "limit", str(packets)]
        if rate_bps is None:
            cmds = [["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", *fifo]]
        else:
            # burst: one MTU frame, so the shaper never lets a line-rate train past the queue.
            cmds = [["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
                    ["tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
                     "rate", f"{rate_bps}bit", "burst", str(mtu + 14), "cburst", str(mtu + 14)],
                    ["tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *fifo]]
        for cmd in cmds:
            self.run(cmd)
        return cmds



class TransparentNode(Node):
    """Two ports, no IP address. bridge() joins them in the kernel; the
    userspace emulator instead owns the two ports itself."""

    BRIDGE = "br0"

    def __init__(self, name: str, short: str, prefix: str, record: RunRecord,
                 kind: str, ports: tuple[str, ...], backend: Backend = NAMESPACES,
                 address: ipaddress.IPv4Interface | None = None):
        super().__init__(name, short, prefix, record, backend, role=kind)
        self.kind, self.ports = kind, ports
        self.address = address          # offered to a PEP that connects from its own address
        self.bridged = False
        self.made_bridge = False        # a bridge this run added to a machine (removed after it)
        # Frames crossing the bridge must not be fed to this namespace's
        # iptables unless a PEP asks for it.
        self.sysctl("net.bridge.bridge-nf-call-iptables", "0", must=False)

    def port(self, name: str) -> Intf:
        return self.intfs[name]

    def add_route(self, to: str, via: str) -> None:
        """A route through the bridge to a router beyond it (a PEP's own
        connections to far subnets need a next hop; the bridge has no address)."""
        self.run(["ip", "route", "replace", to, "via", via, "dev", self.bridge(), "onlink"])

    def configure(self, mtu: int) -> None:
        for port in self.ports:
            self.prepare_intf(self.intfs[port], mtu)
            # Promiscuous: frames for the far host's MAC must reach us.
            self.run(["ip", "link", "set", self.intfs[port].name, "promisc", "on"])

    def bridge(self) -> str:
        if not self.bridged and self.sandbox.wired and self.run(
                ["ip", "link", "show", "dev", self.BRIDGE], check=False).returncode == 0:
            self.bridged = True     # a machine's bridge, as its playbook made it
        if not self.bridged:
            self.run(["ip", "link", "add", self.BRIDGE, "type", "bridge",
                      "forward_delay", "0", "stp_state", "0"])
            self.made_bridge = self.sandbox.wired
            for port in self.ports:
                self.run(["ip", "link", "set", self.intfs[port].name, "master", self.BRIDGE])
            self.run(["ip", "link", "set", self.BRIDGE, "up"])
            self.bridged = True
        return self.BRIDGE

    def stop(self) -> None:
        if self.made_bridge:
            self.run(["ip", "link", "del", self.BRIDGE], check=False)
            self.made_bridge = False
        super().stop()


class Link:
    """A veth pair; each end is created directly inside its node's namespace,
    so nothing of a testbed ever sits in the root namespace. satbed creates
    it from the host: a container node cannot see another node's pid."""

    def __init__(self, a: Intf, b: Intf):
        self.a, self.b = a, b
        proc.run(["ip", "link", "add", "name", a.name, "netns", str(a.node.pid), "type", "veth",
                  "peer", "name", b.name, "netns", str(b.node.pid)])

    def __repr__(self) -> str:
        return f"<Link {self.a.node.name}.{self.a.port}={self.b.node.name}.{self.b.port}>"
