"""Router and interface counters over time: queue drops, backlog, packets and
bytes of chosen ports, sampled every N ms into a JSONL time series.

    sampler = CounterSampler(router_ports(testbed), run_dir, interval_ms=100)
    sampler.start()
    ...
    totals = sampler.stop()          # per-port totals, for result.json

writes RUN/counters/interfaces.jsonl, one line per port per sample:

    {"t_s": 0.1, "unix": 1795430850.12, "node": "r1", "port": "eth1", "dev": "sb12-r1eth1",
     "kind": "pfifo", "sent_packets": .., "sent_bytes": .., "dropped": .., "overlimits": ..,
     "requeues": .., "backlog_packets": .., "backlog_bytes": ..,
     "tx_packets": .., "tx_bytes": .., "tx_dropped": .., "rx_packets": .., "rx_bytes": ..,
     "rx_dropped": ..}

As in satemu's emulator_timeseries.csv, counters are cumulative (here since
the interface was made) and backlog_* are instantaneous; t_s counts from the
sampler's start, unix lets the series be laid beside per-flow records. The
qdisc fields are the port's root qdisc (tc -s qdisc): an HTB root counts the
drops and backlog of the queue beneath it; the tx_/rx_ fields are the
device's own (ip -s link).

No process is spawned per sample: one netlink socket (pyroute2) per node is
opened inside the node's network namespace once, from a short-lived thread
that joins the namespace, and then read from the sampler thread. That works
for a namespace node and for a container alike (both have a pid inside).
Cost, measured on the two routers (six ports) of topologies/spoofing.yaml
at 100 ms: 0.04 cores of this 2-core VM, nearly all of it pyroute2 decoding
(a full link dump instead of RTM_GETSTATS cost twice that); a longer
interval costs proportionally less.

read_series and summarize work on a stored file only (the run's totals come
from them); analysis/counters.py draws the stored series for reports."""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from satbed.core.errors import SatbedError
from satbed.core.files import jsonl_records

if TYPE_CHECKING:   # the analysis half must load where Mininet is absent
    from satbed.backends.net import Intf

SERIES = os.path.join("counters", "interfaces.jsonl")
CLONE_NEWNET = 0x40000000
TC_H_ROOT = 0xFFFFFFFF
QDISC_FIELDS = ("sent_packets", "sent_bytes", "dropped", "overlimits", "requeues", "backlog_packets",
                "backlog_bytes")
LINK_FIELDS = ("tx_packets", "tx_bytes", "tx_dropped", "rx_packets", "rx_bytes", "rx_dropped")


def netlink_in(pid: int):
    """A pyroute2 IPRoute socket in the network namespace of `pid`. The
    socket belongs to the namespace it was made in, so a thread joins the
    namespace, makes it and ends; this process's own threads never move."""
    from pyroute2 import IPRoute

    libc = ctypes.CDLL(None, use_errno=True)
    box: dict = {}

    def make() -> None:
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            box["error"] = f"cannot open the network namespace of pid {pid}: {e.strerror}"
            return
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                box["error"] = f"setns into pid {pid}'s network namespace: {os.strerror(ctypes.get_errno())}"
                return
            box["socket"] = IPRoute()
        except Exception as e:  # reported as one line below
            box["error"] = f"netlink socket in pid {pid}'s namespace: {e}"
        finally:
            os.close(fd)

    t = threading.Thread(target=make, name=f"netns-{pid}")
    t.start()
    t.join()
    if "error" in box:
        raise SatbedError(box["error"])
    return box["socket"]


@dataclass(frozen=True)
class Port:
    node: str
    port: str
    dev: str


def link_indexes(ipr, names: set[str]) -> dict[int, str]:
    """ifindex -> name of the named devices (looked up once: a device keeps
    its index while it lives)."""
    found = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
    found = {i: n for i, n in found.items() if n in names}
    missing = names - set(found.values())
    if missing:
        raise SatbedError(f"counter sampler: no device {', '.join(sorted(missing))}")
    return found


def sample_node(ipr, ports: dict[int, Port]) -> list[dict]:
    """One sample of the given devices (by ifindex) through one node's
    socket: two netlink dumps, link statistics (RTM_GETSTATS, 64-bit
    counters only: a full link dump costs ten times more to parse) and
    qdiscs."""
    from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST
    from pyroute2.netlink.rtnl import RTM_GETSTATS
    from pyroute2.netlink.rtnl.ifstatsmsg import ifstatsmsg

    rows: dict[int, dict] = {}
    req = ifstatsmsg()
    req["filter_mask"] = 1      # IFLA_STATS_LINK_64
    for msg in ipr.nlm_request(req, msg_type=RTM_GETSTATS, msg_flags=NLM_F_REQUEST | NLM_F_DUMP):
        p = ports.get(msg["ifindex"])
        if p is None:
            continue
        st = msg.get_attr("IFLA_STATS_LINK_64") or {}
        rows[msg["ifindex"]] = {"node": p.node, "port": p.port, "dev": p.dev, "kind": None,
                                **{f: 0 for f in QDISC_FIELDS}, **{f: st.get(f, 0) for f in LINK_FIELDS}}
    for q in ipr.get_qdiscs():
        row = rows.get(q["index"])
        if row is None or q["parent"] != TC_H_ROOT:
            continue
        row["kind"] = q.get_attr("TCA_KIND")
        stats = q.get_attr("TCA_STATS2")
        basic = (stats.get_attr("TCA_STATS_BASIC") if stats else None) or {}
        queue = (stats.get_attr("TCA_STATS_QUEUE") if stats else None) or {}
        row.update(sent_packets=basic.get("packets", 0), sent_bytes=basic.get("bytes", 0),
                   dropped=queue.get("drops", 0), overlimits=queue.get("overlimits", 0),
                   requeues=queue.get("requeues", 0), backlog_packets=queue.get("qlen", 0),
                   backlog_bytes=queue.get("backlog", 0))
    return list(rows.values())


def router_ports(testbed) -> list["Intf"]:
    """Every port of every router of a testbed, in topology order: what a
    run samples by default."""
    return [intf for router in testbed.routers.values() for intf in router.intfs.values()]


class CounterSampler:
    """Samples the counters of `ports` every interval_ms on a background
    thread until stop(). Use as a context manager or call start()/stop()."""

    def __init__(self, ports: Iterable["Intf"], run_dir: str, interval_ms: float = 100):
        if not interval_ms >= 10:
            raise SatbedError(f"counter sampling interval must be at least 10 ms, got {interval_ms!r}")
        self.ports = list(ports)
        if not self.ports:
            raise SatbedError("counter sampler: no ports to sample")
        self.run_dir = os.path.abspath(run_dir)
        self.path = os.path.join(self.run_dir, SERIES)
        self.interval = interval_ms / 1000
        self.samples = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sockets: list = []

    def __enter__(self) -> "CounterSampler":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        wanted: dict[int, dict[str, Port]] = {}
        for intf in self.ports:
            wanted.setdefault(intf.node.pid, {})[intf.name] = Port(intf.node.name, intf.port, intf.name)
        nodes = []
        try:
            for pid, by_name in wanted.items():
                ipr = netlink_in(pid)
                self._sockets.append(ipr)
                index = link_indexes(ipr, set(by_name))
                nodes.append((ipr, {i: by_name[name] for i, name in index.items()}))
        except BaseException:
            self._close()
            raise
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        out = open(self.path, "a", encoding="utf-8")
        self._thread = threading.Thread(target=self._run, args=(nodes, out),
                                        name="counter-sampler", daemon=True)
        self._thread.start()

    def _run(self, nodes: list, out) -> None:
        t0 = time.monotonic()
        next_at = t0

        def sample() -> None:
            now = time.time()
            t_s = round(time.monotonic() - t0, 3)
            lines = [json.dumps({"t_s": t_s, "unix": round(now, 3), **row})
                     for ipr, ports in nodes for row in sample_node(ipr, ports)]
            out.write("\n".join(lines) + "\n")
            out.flush()
            self.samples += 1

        try:
            while True:
                sample()
                # An absolute schedule: a slow sample does not stretch the series.
                next_at += self.interval
                delay = next_at - time.monotonic()
                if delay < 0:
                    next_at = time.monotonic()
                    delay = 0
                if self._stop.wait(delay):
                    sample()    # the state at the stop, so totals cover the whole run
                    break
        except Exception as e:  # a vanished namespace ends the series, not the run
            self.error = f"{type(e).__name__}: {e}"
        finally:
            out.close()

    def stop(self) -> dict:
        """Stop sampling (one last sample is taken first) and return per-port
        totals over the run; safe to call twice."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None
        self._close()
        result: dict = {"series": os.path.relpath(self.path, self.run_dir),
                        "interval_ms": round(self.interval * 1000, 3), "samples": self.samples,
                        "ports": summarize(read_series(self.path)) if os.path.exists(self.path) else {}}
        if self.error:
            result["error"] = self.error
        return result

    def _close(self) -> None:
        for s in self._sockets:
            try:
                s.close()
            except Exception:
                pass
        self._sockets.clear()


def read_series(path: str) -> list[dict]:
    """The samples of a stored series (a torn last line is skipped)."""
    try:
        return list(jsonl_records(path))
    except OSError as e:
        raise SatbedError(f"cannot read counter series {path}: {e.strerror}") from None


def by_port(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        out[f"{r['node']}.{r['port']}"].append(r)
    return dict(out)


def summarize(rows: list[dict]) -> dict[str, dict]:
    """Per port: what its counters moved by over the series, and its backlog."""
    out = {}
    for key, rs in by_port(rows).items():
        first, last = rs[0], rs[-1]
        out[key] = {
            "dev": last["dev"], "kind": last.get("kind"), "seconds": round(last["t_s"] - first["t_s"], 3),
            **{f: last[f] - first[f] for f in ("sent_packets", "sent_bytes", "dropped", "overlimits",
                                                "tx_packets", "tx_bytes", "tx_dropped", "rx_packets",
                                                "rx_bytes", "rx_dropped")},
            "backlog_packets_max": max(r["backlog_packets"] for r in rs),
            "backlog_packets_mean": round(sum(r["backlog_packets"] for r in rs) / len(rs), 2),
            "backlog_bytes_max": max(r["backlog_bytes"] for r in rs),
        }
    return out
