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

read_series, summarize and plot work on a stored file only, so a report can
redraw them anywhere."""

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
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
    except OSError as e:
        raise SatbedError(f"cannot read counter series {path}: {e.strerror}") from None
    return rows


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


def intervals(rows: list[dict], port: str, interval_s: float) -> list[dict]:
    """One port's series cut into intervals of interval_s (from its first
    sample): per interval its start, egress bits/s, queue drops and packets
    sent, from the cumulative counters at the samples nearest each boundary
    (the link-utilisation-per-interval view of the ACTS multi-flow study)."""
    rs = by_port(rows).get(port, [])
    if len(rs) < 2 or not interval_s > 0:
        return []
    t0 = rs[0]["t_s"]
    out, start = [], rs[0]
    edge = t0 + interval_s
    for r in rs[1:]:
        if r["t_s"] + 1e-9 >= edge:
            dt = r["t_s"] - start["t_s"]
            out.append({"t_s": round(start["t_s"] - t0, 3), "seconds": round(dt, 3),
                        "tx_bps": (r["tx_bytes"] - start["tx_bytes"]) * 8 / dt if dt > 0 else 0.0,
                        "dropped": r["dropped"] - start["dropped"],
                        "sent_packets": r["sent_packets"] - start["sent_packets"]})
            start = r
            while edge <= r["t_s"] + 1e-9:
                edge += interval_s
    return out


def plot(rows: list[dict], title: str = "Router interface counters") -> bytes:
    """PNG: per port, egress rate, queue drops per second and backlog over
    time (rates from the cumulative counters between samples)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rate, ax_drop, ax_q) = plt.subplots(3, 1, figsize=(7.5, 7.2), dpi=110, sharex=True)
    ports = by_port(rows)
    for key, rs in sorted(ports.items()):
        ts = [r["t_s"] for r in rs]
        mid, rate, drops = [], [], []
        for a, b in zip(rs, rs[1:]):
            dt = b["t_s"] - a["t_s"]
            if dt <= 0:
                continue
            mid.append(b["t_s"])
            rate.append(max(0, b["tx_bytes"] - a["tx_bytes"]) * 8 / dt / 1e6)
            drops.append(max(0, b["dropped"] - a["dropped"]) / dt)
        line, = ax_rate.plot(mid, rate, linewidth=1.2, label=key)
        ax_drop.plot(mid, drops, linewidth=1.2, color=line.get_color())
        ax_q.step(ts, [r["backlog_packets"] for r in rs], where="post", linewidth=1.2, color=line.get_color())
    if not ports:
        ax_rate.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax_rate.transAxes)
    ax_rate.set_ylabel("egress (Mbit/s)")
    ax_drop.set_ylabel("queue drops / s")
    ax_q.set_ylabel("backlog (packets)")
    ax_q.set_xlabel("time since sampling began (s)")
    for ax in (ax_rate, ax_drop, ax_q):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    if ports:
        ax_rate.legend(fontsize=8, loc="best")
    ax_rate.set_title(title, fontsize=11)
    fig.tight_layout()
    from satbed.report.charts import png
    return png(fig)


def report_section(run_dir: str) -> str:
    """The run report's HTML section for RUN/counters/, or "" when the run
    has none. Drawn from the stored series only."""
    import base64
    import html

    path = os.path.join(run_dir, SERIES)
    if not os.path.exists(path):
        return ""
    try:
        rows = read_series(path)
        png = plot(rows)
    except Exception as e:  # a broken series must not lose the report
        return f'<h2>Router interface counters</h2><p class="error">{html.escape(str(e))}</p>'
    head = ("<tr><th>port</th><th>device</th><th>qdisc</th><th>sent packets</th><th>dropped</th>"
            "<th>backlog max (packets)</th><th>backlog mean (packets)</th><th>egress bytes</th></tr>")
    body = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(v['dev'])}</td><td>{html.escape(str(v['kind']))}</td>"
        f"<td class=num>{v['sent_packets']:,}</td><td class=num>{v['dropped']:,}</td>"
        f"<td class=num>{v['backlog_packets_max']}</td><td class=num>{v['backlog_packets_mean']}</td>"
        f"<td class=num>{v['tx_bytes']:,}</td></tr>"
        for k, v in sorted(summarize(rows).items()))
    img = base64.b64encode(png).decode("ascii")
    return ("<h2>Router interface counters</h2>\n"
            f"<p>From <code>{html.escape(SERIES)}</code>: the root qdisc and device counters of each "
            "sampled port; changes over the series.</p>\n"
            f"<table>{head}{body}</table>\n"
            f'<figure><img alt="counters" src="data:image/png;base64,{img}"><figcaption>Egress rate, '
            "queue drops per second and backlog per port.</figcaption></figure>\n")
