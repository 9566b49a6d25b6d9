"""The satellite link: one parameter set per direction, realized on the
Emulator node by one of three backends.

- userspace: satemu (our Go emulator) owns the Emulator's two ports and does
  queue -> HTB-style shaper -> bit errors -> delay per direction. Runs anywhere.
- tc: a kernel bridge with HTB (+ bfifo) and netem on each port; needs netem.
- bridge: a plain bridge, no emulation (RTT 0, BER 0, unshaped).

`auto` picks tc where the kernel has netem, else userspace. result.json
records which backend ran and its exact settings."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import socket
import subprocess
import time
from typing import Iterable

from satbed.backends import records
from satbed.core.errors import SatbedError
from satbed.backends.net import TransparentNode
from satbed.core.proc import our_binary
from satbed.model.link import Direction, LinkConfig, MTU_FRAME
from satbed.core.settings import Settings


def netem_available(node: TransparentNode) -> bool:
    """Try netem on the node's loopback: the only honest test of a kernel."""
    cp = node.run(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"], check=False)
    if cp.returncode == 0:
        node.run(["tc", "qdisc", "del", "dev", "lo", "root"], check=False)
        return True
    return False


def choose_backend(cfg: LinkConfig, node: TransparentNode) -> str:
    if cfg.backend != "auto":
        return cfg.backend
    return "tc" if netem_available(node) else "userspace"


class Emulator:
    """Common face of the backends: start on the Emulator node, report, stop."""
    backend = ""

    def __init__(self, node: TransparentNode, cfg: LinkConfig, run_dir: str, stats_dir: str = ""):
        self.node, self.cfg, self.run_dir = node, cfg, run_dir
        # One emulator keeps RUN/emulator/; several get RUN/emulator/<node>/ each.
        self.stats_dir = stats_dir or os.path.join(run_dir, "emulator")

    def start(self) -> None: ...

    def stop(self) -> dict:
        """Stop and return what goes under result.json's `emulator` key."""
        return {"backend": self.backend, "config": self.cfg.to_dict()}

    def set(self, direction: str, **params) -> None:
        raise SatbedError(f"the {self.backend} backend cannot change parameters mid-run")

    def down(self) -> str:
        """'' while the emulator works, else one line saying why not."""
        return ""

    def start_clock(self) -> float | None:
        """Start outage and profile schedules now (backends without them: nothing to start)."""
        return None


class BridgeEmulator(Emulator):
    backend = "bridge"

    def start(self) -> None:
        for d in (self.cfg.a_to_b, self.cfg.b_to_a):
            if d.needs_emulation() or d.rate_bps is not None:
                raise SatbedError("the bridge backend does no emulation: use --emulator userspace or tc")
        self.node.bridge()


def spin_us() -> int | None:
    """satemu busy-waits up to 200 us before each departure (its default) for
    sub-0.5 ms timing; SATBED_EMULATOR_SPIN_US overrides it. A parallel matrix
    sets 0: with a dozen cells on two cores the spinning takes the CPU the
    other cells need, and at 8 Mbit/s a frame lasts 1.5 ms anyway."""
    return Settings.from_environ().emulator_spin_us


def io_path() -> str | None:
    """satemu's packet path (-io): auto (its default: the TPACKET_V3 ring,
    else plain sockets), tpacket or socket; SATBED_EMULATOR_IO picks one.
    satemu records the path it used in emulator.json ("io")."""
    return Settings.from_environ().emulator_io


def control_request(path: str, req: dict) -> dict:
    """One request on a satemu control socket, one JSON reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(path)
        s.sendall(json.dumps(req).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf or b"{}")


# control_request run on the emulator's machine: the request on stdin, the reply on stdout.
_REMOTE_CONTROL = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(5); s.connect(sys.argv[1])\n"
    "s.sendall(sys.stdin.read().encode() + b'\\n'); buf = b''\n"
    "while not buf.endswith(b'\\n'):\n"
    "    chunk = s.recv(65536)\n"
    "    if not chunk: break\n"
    "    buf += chunk\n"
    "sys.stdout.write(buf.decode())\n")


class Satemu(Emulator):
    """satemu on the Emulator's ports; control socket for mid-run changes."""
    backend = "userspace"

    def __init__(self, node: TransparentNode, cfg: LinkConfig, run_dir: str, captured: bool = False,
                 stats_dir: str = ""):
        super().__init__(node, cfg, run_dir, stats_dir)
        # satemu bypasses the ports' qdiscs for speed, which hides the frames
        # it sends from tcpdump on those ports; a WAN capture needs them.
        self.captured = captured
        # Local nodes: in the run's own 0700 directory, the only part of the
        # record directory an emulator container sees (docker.node_mounts).
        self.control = (os.path.join(records.control_dir(node.prefix, node.name), "satemu.sock")
                        if node.sandbox.local else f"/run/satbed/{node.prefix}-{node.short}-satemu.sock")
        self.proc: subprocess.Popen | None = None
        self.spin_us = spin_us()
        self.io = io_path()

    def config_doc(self) -> dict:
        def direction(d: Direction) -> dict:
            doc = {k: v for k, v in dataclasses.asdict(d).items() if v is not None}
            return doc
        # Outages and profiles count from the transfer's start (start_clock), not
        # from satemu's: an outage at offset 0 would otherwise hit the testbed's setup.
        return {"seed": self.cfg.seed, "sample_ms": 100, "clock": "control",
                "a_to_b": direction(self.cfg.a_to_b), "b_to_a": direction(self.cfg.b_to_a)}

    def start(self) -> None:
        binary = our_binary("satemu")
        os.makedirs(self.stats_dir, exist_ok=True)
        if self.node.sandbox.local:
            records.make_control_dir(self.node.prefix, self.node.name)
        conf = os.path.join(self.stats_dir, "satemu.json")
        with open(conf, "w", encoding="utf-8") as f:
            json.dump(self.config_doc(), f, indent=2)
        log = open(os.path.join(self.stats_dir, "satemu.log"), "w", encoding="utf-8")
        self.proc = self.node.popen([binary, "-a", self.node.port("a").name, "-b", self.node.port("b").name,
                                     "-config", conf, "-control", self.control, "-stats-dir", self.stats_dir,
                                     *(["-no-qdisc-bypass"] if self.captured else []),
                                     *([f"-spin-us={self.spin_us}"] if self.spin_us is not None else []),
                                     *([f"-io={self.io}"] if self.io is not None else [])],
                                    stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SatbedError(f"satemu exited: {self._log_tail()}")
            try:
                self.request({"op": "stats"})
                return
            except OSError:
                time.sleep(0.05)
        raise SatbedError(f"satemu did not become ready in 10 s: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            with open(os.path.join(self.stats_dir, "satemu.log"), encoding="utf-8") as f:
                lines = [ln.strip() for ln in f if ln.strip()]
            return lines[-1] if lines else "no output"
        except OSError:
            return "no log"

    def request(self, req: dict) -> dict:
        if self.node.sandbox.local:
            return control_request(self.control, req)
        # The control socket is on the emulator machine: asked there.
        cp = self.node.run(["/usr/bin/python3", "-c", _REMOTE_CONTROL, self.control], input=json.dumps(req),
                           check=False, timeout=15)
        if cp.returncode != 0:
            raise ConnectionError(cp.stderr.strip() or f"exit {cp.returncode}")
        return json.loads(cp.stdout or "{}")

    def down(self) -> str:
        if self.proc is not None and self.proc.poll() is not None:
            return f"emulator satemu on {self.node.name} exited (code {self.proc.returncode}): {self._log_tail()}"
        return ""

    def start_clock(self) -> float | None:
        reply = self.request({"op": "clock"})
        if not reply.get("ok"):
            raise SatbedError(f"satemu on {self.node.name} did not start its schedule clock: {reply.get('error')}")
        return reply.get("clock_started_s", 0.0)

    def set(self, direction: str, **params) -> None:
        reply = self.request({"op": "set", "dir": direction, "params": params})
        if reply.get("error"):
            raise SatbedError(f"satemu refused {params}: {reply['error']}")

    def stop(self) -> dict:
        result = super().stop()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            with open(os.path.join(self.stats_dir, "emulator.json"), encoding="utf-8") as f:
                result["stats"] = json.load(f)
        except (OSError, ValueError) as e:
            result["stats_error"] = f"no emulator.json: {e}"
        result["timeseries"] = os.path.relpath(os.path.join(self.stats_dir, "emulator_timeseries.csv"),
                                               self.run_dir)
        return result


class TcEmulator(Emulator):
    """tc HTB (+ bfifo buffer) and netem on each port of a kernel bridge.

    Egress on port b carries a->b traffic, egress on port a carries b->a."""
    backend = "tc"

    def commands(self, netem: bool = True) -> list[list[str]]:
        a, b = self.node.port("a").name, self.node.port("b").name
        cmds: list[list[str]] = []
        for dev, d in ((b, self.cfg.a_to_b), (a, self.cfg.b_to_a)):
            cmds += compile_direction(dev, d, self.cfg.seed, netem)
        return cmds

    def start(self) -> None:
        netem = any(d.needs_emulation() for d in (self.cfg.a_to_b, self.cfg.b_to_a))
        if netem and not netem_available(self.node):
            raise SatbedError("this kernel has no netem (CONFIG_NET_SCH_NETEM): use --emulator userspace")
        for d in (self.cfg.a_to_b, self.cfg.b_to_a):
            if d.gilbert_elliott or d.outage or d.profile:
                raise SatbedError("the tc backend has no outages, profiles or Gilbert-Elliott here: "
                                  "use --emulator userspace")
        self.node.bridge()
        for p in self.node.ports:
            self.node.sandbox.on_clean(["tc", "qdisc", "del", "dev", self.node.port(p).name, "root"])
        self.applied = self.commands(netem)
        for cmd in self.applied:
            self.node.run(cmd)

    def stop(self) -> dict:
        result = super().stop()
        result["tc_commands"] = [" ".join(c) for c in getattr(self, "applied", [])]
        result["per_1500"] = {"a_to_b": self.cfg.a_to_b.per(), "b_to_a": self.cfg.b_to_a.per()}
        stats = {}
        for p in self.node.ports:
            dev = self.node.port(p).name
            stats[dev] = self.node.run(["tc", "-s", "qdisc", "show", "dev", dev], check=False).stdout
        result["tc_stats"] = stats
        if self.node.sandbox.wired:
            # A machine outlives the run: its ports get their qdiscs back.
            for p in self.node.ports:
                self.node.run(["tc", "qdisc", "del", "dev", self.node.port(p).name, "root"], check=False)
        return result


def compile_direction(dev: str, d: Direction, seed: int, netem: bool) -> list[list[str]]:
    """The study's tc, generalised: HTB root 1: default class 1:10 shaping to
    rate/ceil with the bursts, then netem (delay and per-packet loss from the
    BER at 1514-byte frames) with a limit holding rate x delay + buffer,
    or a bfifo buffer when no netem stage is needed."""
    cmds: list[list[str]] = []
    parent = "root"
    if d.rate_bps is not None:
        klass = ["tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
                 "rate", f"{d.rate_bps}bit", "ceil", f"{d.ceil_bps or d.rate_bps}bit"]
        if d.burst_bytes:
            klass += ["burst", str(d.burst_bytes)]
        if d.cburst_bytes:
            klass += ["cburst", str(d.cburst_bytes)]
        cmds += [["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"], klass]
        parent = "parent 1:10"
    needs = d.needs_emulation()
    if netem and needs:
        rate = d.ceil_bps or d.rate_bps or 10**9
        in_flight = math.ceil(rate * d.delay_ms / 1000 / 8 / MTU_FRAME)
        limit = in_flight + d.queue_packets
        cmd = ["tc", "qdisc", "add", "dev", dev, *parent.split(), "handle", "10:", "netem",
               "limit", str(limit), "delay", f"{d.delay_ms:g}ms"]
        if d.ber or d.loss:
            # netem has one independent per-packet draw: bit errors on a
            # full frame and per-packet loss combined into it.
            cmd += ["loss", f"{100 * d.drop_rate():.6f}%"]
        cmds.append(cmd)
    elif d.rate_bps is not None:
        limit = d.queue_bytes or d.queue_packets * MTU_FRAME
        cmds.append(["tc", "qdisc", "add", "dev", dev, *parent.split(), "handle", "10:", "bfifo",
                     "limit", str(limit)])
    return cmds


def profile_files(links: Iterable[LinkConfig]) -> tuple[str, ...]:
    """The profile files the links' emulators read (a container emulator
    gets them mounted read-only)."""
    return tuple(sorted({d.profile for link in links for d in (link.a_to_b, link.b_to_a) if d.profile}))


def make(node: TransparentNode, cfg: LinkConfig, run_dir: str, captured: bool = False,
         stats_dir: str = "") -> Emulator:
    backend = choose_backend(cfg, node)
    if backend == "userspace":
        return Satemu(node, cfg, run_dir, captured, stats_dir)
    return {"tc": TcEmulator, "bridge": BridgeEmulator}[backend](node, cfg, run_dir, stats_dir)
