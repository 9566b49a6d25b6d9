"""Run tcptrace on a capture and parse its long output into dataclasses.

tcptrace 6.6.7 quirks handled here:

* The long output (-l) prints each connection as a header ("host a:", "complete
  conn:", ...) followed by a two-column block: every line holds the a->b value
  and then the b->a value with the label repeated ("total packets: 807
  total packets: 641").  Values carry units ("Bps" = bytes/s, "ms", "secs",
  "bytes", "pkts", "times") or are "NA"; "initial window" appears twice (bytes,
  then pkts).
* Some statistics sit in the column of the *data sender* even though the other
  side generated the packets: "duplicate acks", "triple dupacks", "segs cum
  acked" and the RTT block describe the ACKs that came back for that column's
  data.  "sacks sent"/"sack pkts sent" sit in the column of the host that sent
  the SACKs (the receiver of the data).
* The CSV output (--csv) prints epoch times as "%lu.%lu" without zero padding
  (05:54:55.082605 comes out as "...895.82605"), so only its integer seconds are
  trusted; the fraction comes from the long output's ctime-style timestamp.
* A truncated capture still exits 0: libpcap's complaint ("PCAP error:
  'truncated dump file...'") only appears on stderr, after partial results.
* A non-pcap file also exits 0 with "0 packets seen ... no traced TCP packets".
"""

from __future__ import annotations

import datetime as _dt
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

TCPTRACE = "/usr/bin/tcptrace"
DEFAULT_TIMEOUT_S = 300.0


class TcptraceError(Exception):
    """tcptrace could not be run or produced nothing usable."""


@dataclass
class DirectionMetrics:
    """One direction (src -> dst) of a connection, as tcptrace reports it.

    Byte counts are TCP payload bytes; throughput_bps is bits per second
    (tcptrace prints bytes per second, "Bps").  RTT and window fields describe
    this direction's data and the ACKs/windows that came back for it, except
    win_* which are the windows *advertised by src*.
    """

    src: str
    dst: str
    total_pkts: int | None = None
    ack_pkts: int | None = None
    pure_acks: int | None = None
    sack_pkts: int | None = None  # packets from src that carried SACK blocks
    dsack_pkts: int | None = None
    max_sack_blocks_per_ack: int | None = None
    sacks_sent: int | None = None
    unique_bytes: int | None = None
    data_pkts: int | None = None
    data_bytes: int | None = None
    rexmt_pkts: int | None = None
    rexmt_bytes: int | None = None
    zwnd_probe_pkts: int | None = None
    zwnd_probe_bytes: int | None = None
    outoforder_pkts: int | None = None
    pushed_pkts: int | None = None
    syn_pkts: int | None = None
    fin_pkts: int | None = None
    window_scale: int | None = None
    mss_requested: int | None = None
    max_segment: int | None = None
    min_segment: int | None = None
    avg_segment: int | None = None
    win_max: int | None = None
    win_min: int | None = None
    win_avg: int | None = None
    zero_win_adv: int | None = None
    initial_window_bytes: int | None = None
    initial_window_pkts: int | None = None
    stream_length: int | None = None
    missed_data: int | None = None
    truncated_data: int | None = None
    data_xmit_time_s: float | None = None
    idletime_max_ms: float | None = None
    throughput_bps: float | None = None
    rtt_samples: int | None = None
    rtt_min_ms: float | None = None
    rtt_max_ms: float | None = None
    rtt_avg_ms: float | None = None
    rtt_stdev_ms: float | None = None
    rtt_3whs_ms: float | None = None
    post_loss_acks: int | None = None
    segs_cum_acked: int | None = None
    dup_acks: int | None = None  # duplicate ACKs received for src's data
    triple_dupacks: int | None = None
    max_retrans: int | None = None
    # Filled from the capture itself (tcptrace only has per-connection times).
    first_packet: float | None = None
    last_packet: float | None = None
    raw: dict[str, str] = field(default_factory=dict)

    def to_dict(self, with_raw: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not with_raw:
            d.pop("raw")
        return d


@dataclass
class Connection:
    index: int
    host_a: str  # "ip:port"
    host_b: str
    complete: bool
    syns: int | None
    fins: int | None
    first_packet: float | None  # epoch seconds
    last_packet: float | None
    elapsed_s: float | None
    total_pkts: int | None
    a2b: DirectionMetrics
    b2a: DirectionMetrics

    @property
    def data_bytes(self) -> int:
        return (self.a2b.data_bytes or 0) + (self.b2a.data_bytes or 0)

    def data_direction(self) -> tuple[DirectionMetrics, DirectionMetrics]:
        """(data direction, reverse direction): the one carrying more unique bytes."""
        if (self.b2a.unique_bytes or 0) > (self.a2b.unique_bytes or 0):
            return self.b2a, self.a2b
        return self.a2b, self.b2a

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "host_a": self.host_a,
            "host_b": self.host_b,
            "complete": self.complete,
            "syns": self.syns,
            "fins": self.fins,
            "first_packet": self.first_packet,
            "last_packet": self.last_packet,
            "elapsed_s": self.elapsed_s,
            "total_pkts": self.total_pkts,
            "a2b": self.a2b.to_dict(),
            "b2a": self.b2a.to_dict(),
        }


@dataclass
class TcptraceRun:
    """Raw outputs of one tcptrace invocation set, kept on disk."""

    pcap: Path
    outdir: Path
    long_txt: Path
    csv: Path
    stderr: str
    packets_seen: int
    truncated: bool

    @property
    def long_text(self) -> str:
        return self.long_txt.read_text(errors="replace")


def _run(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, cwd=cwd, capture_output=True, text=True,
                              errors="replace", timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        raise TcptraceError(f"tcptrace timed out after {timeout:.0f}s") from e
    except OSError as e:
        raise TcptraceError(f"cannot run {args[0]}: {e}") from e


def run_tcptrace(pcap: Path, outdir: Path, timeout: float = DEFAULT_TIMEOUT_S,
                 tcptrace: str = TCPTRACE) -> TcptraceRun:
    """Run `tcptrace -n -l -r` (and --csv) on pcap, saving outputs in outdir.

    Files written: long.txt, long.csv, tcptrace.stderr.  Raises TcptraceError
    when tcptrace fails outright or traces no TCP packet.
    """
    pcap = Path(pcap).resolve()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    if not pcap.is_file():
        raise TcptraceError(f"capture not found: {pcap}")
    long_txt = outdir / "long.txt"
    csv = outdir / "long.csv"
    res = _run([tcptrace, "-n", "-l", "-r", str(pcap)], outdir, timeout)
    long_txt.write_text(res.stdout)
    res_csv = _run([tcptrace, "-n", "-l", "-r", "--csv", str(pcap)], outdir, timeout)
    csv.write_text(res_csv.stdout)
    stderr = res.stderr.strip()
    (outdir / "tcptrace.stderr").write_text(res.stderr)
    if res.returncode != 0:
        last = stderr.splitlines()[-1] if stderr else f"exit status {res.returncode}"
        raise TcptraceError(f"tcptrace failed: {last}")
    m = re.search(r"^(\d+) packets seen, (\d+) TCP packets traced", res.stdout, re.M)
    seen = int(m.group(2)) if m else 0
    truncated = "truncated" in stderr.lower()
    return TcptraceRun(pcap=pcap, outdir=outdir, long_txt=long_txt, csv=csv,
                       stderr=stderr, packets_seen=seen, truncated=truncated)


# ---------------------------------------------------------------- parsing

_NUM = re.compile(r"^-?\d+(?:\.\d+)?$")


def _number(raw: str) -> float | None:
    """'1880030 Bps' -> 1880030.0, '10.8 ms' -> 10.8, 'NA' -> None."""
    tok = raw.split()[0] if raw.split() else ""
    if not _NUM.match(tok):
        return None
    return float(tok)


def _int(raw: str) -> int | None:
    v = _number(raw)
    return None if v is None else int(v)


def _float(raw: str) -> float | None:
    return _number(raw)


def _bps(raw: str) -> float | None:
    v = _number(raw)
    if v is None:
        return None
    unit = raw.split()[1] if len(raw.split()) > 1 else "Bps"
    return v * 8 if unit == "Bps" else v


def _first_of_pair(raw: str) -> int | None:
    """'1/0' (SYN/FIN) -> 1."""
    parts = raw.split("/")
    return _int(parts[0]) if parts and parts[0].strip() else None


def _second_of_pair(raw: str) -> int | None:
    parts = raw.split("/")
    return _int(parts[1]) if len(parts) > 1 else None


# normalized tcptrace label -> (DirectionMetrics field, converter)
_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "total_packets": ("total_pkts", _int),
    "ack_pkts_sent": ("ack_pkts", _int),
    "pure_acks_sent": ("pure_acks", _int),
    "sack_pkts_sent": ("sack_pkts", _int),
    "dsack_pkts_sent": ("dsack_pkts", _int),
    "max_sack_blks_ack": ("max_sack_blocks_per_ack", _int),
    "sacks_sent": ("sacks_sent", _int),
    "unique_bytes_sent": ("unique_bytes", _int),
    "actual_data_pkts": ("data_pkts", _int),
    "actual_data_bytes": ("data_bytes", _int),
    "rexmt_data_pkts": ("rexmt_pkts", _int),
    "rexmt_data_bytes": ("rexmt_bytes", _int),
    "zwnd_probe_pkts": ("zwnd_probe_pkts", _int),
    "zwnd_probe_bytes": ("zwnd_probe_bytes", _int),
    "outoforder_pkts": ("outoforder_pkts", _int),
    "pushed_data_pkts": ("pushed_pkts", _int),
    "adv_wind_scale": ("window_scale", _int),
    "mss_requested": ("mss_requested", _int),
    "max_segm_size": ("max_segment", _int),
    "min_segm_size": ("min_segment", _int),
    "avg_segm_size": ("avg_segment", _int),
    "max_win_adv": ("win_max", _int),
    "min_win_adv": ("win_min", _int),
    "avg_win_adv": ("win_avg", _int),
    "zero_win_adv": ("zero_win_adv", _int),
    "initial_window_bytes": ("initial_window_bytes", _int),
    "initial_window_pkts": ("initial_window_pkts", _int),
    "ttl_stream_length": ("stream_length", _int),
    "missed_data": ("missed_data", _int),
    "truncated_data": ("truncated_data", _int),
    "data_xmit_time": ("data_xmit_time_s", _float),
    "idletime_max": ("idletime_max_ms", _float),
    "throughput": ("throughput_bps", _bps),
    "rtt_samples": ("rtt_samples", _int),
    "rtt_min": ("rtt_min_ms", _float),
    "rtt_max": ("rtt_max_ms", _float),
    "rtt_avg": ("rtt_avg_ms", _float),
    "rtt_stdev": ("rtt_stdev_ms", _float),
    "rtt_from_3whs": ("rtt_3whs_ms", _float),
    "post_loss_acks": ("post_loss_acks", _int),
    "segs_cum_acked": ("segs_cum_acked", _int),
    "duplicate_acks": ("dup_acks", _int),
    "triple_dupacks": ("triple_dupacks", _int),
    "max_retrans": ("max_retrans", _int),
}

# "label: value [unit]" twice on one line.  A unit is separated by exactly one
# space; the gap between the two columns is always wider.
_PAIR = re.compile(
    r"^\s*(?P<l1>[^\s:][^:]*?):\s+(?P<v1>\S+(?: [A-Za-z]+)?)"
    r"\s{2,}(?P<l2>[^\s:][^:]*?):\s+(?P<v2>\S+(?: [A-Za-z]+)?)\s*$")
_DIRS = re.compile(r"^\s*([a-z]+)->([a-z]+):\s+([a-z]+)->([a-z]+):\s*$")
_CONN = re.compile(r"^TCP connection (\d+):\s*$")
_HDR = re.compile(r"^\s+([a-z ]+):\s+(.*?)\s*$")


def normalize_label(label: str, value: str = "") -> str:
    """'max sack blks/ack' -> 'max_sack_blks_ack'; unit-qualified for
    'initial window' which tcptrace prints twice (bytes, pkts)."""
    key = re.sub(r"[^a-z0-9]+", "_", label.strip().lower()).strip("_")
    key = key.replace("_#_", "_")
    if key == "initial_window":
        parts = value.split()
        key += "_" + (parts[1] if len(parts) > 1 else "bytes")
    return key


def _fill(dm: DirectionMetrics, label: str, value: str) -> None:
    key = normalize_label(label, value)
    dm.raw[key] = value
    if key == "syn_fin_pkts_sent":
        dm.syn_pkts = _first_of_pair(value)
        dm.fin_pkts = _second_of_pair(value)
        return
    spec = _FIELDS.get(key)
    if spec is not None:
        setattr(dm, spec[0], spec[1](value))


def _parse_ctime(text: str) -> float | None:
    """'Sun Nov 22 05:54:55.082605 2026' (local time) -> epoch seconds."""
    try:
        t = _dt.datetime.strptime(text.strip(), "%a %b %d %H:%M:%S.%f %Y")
    except ValueError:
        return None
    return t.timestamp()


def _parse_elapsed(text: str) -> float | None:
    m = re.match(r"^(\d+):(\d+):(\d+(?:\.\d+)?)$", text.strip())
    if not m:
        return None
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))


def parse_long(text: str) -> list[Connection]:
    """Parse `tcptrace -l [-r]` output into connections."""
    conns: list[Connection] = []
    cur: dict[str, Any] | None = None

    def finish() -> None:
        if cur is not None:
            conns.append(_build(cur))

    for line in text.splitlines():
        m = _CONN.match(line)
        if m:
            finish()
            cur = {"index": int(m.group(1)), "hdr": {}, "pairs": []}
            continue
        if cur is None:
            continue
        if _DIRS.match(line):
            cur["in_block"] = True
            continue
        if not cur.get("in_block"):
            h = _HDR.match(line)
            if h:
                cur["hdr"][h.group(1).strip()] = h.group(2)
            continue
        p = _PAIR.match(line)
        if p and p.group("l1").strip() == p.group("l2").strip():
            cur["pairs"].append((p.group("l1"), p.group("v1"), p.group("v2")))
    finish()
    return conns


def _build(cur: dict[str, Any]) -> Connection:
    hdr: dict[str, str] = cur["hdr"]
    # Connection n is labelled with letters 2n-1/2n ("host c:", "host d:" for
    # the second one, "host aa:" ... beyond z); take the two in order.
    hosts = [v.split()[0] for k, v in hdr.items() if k.startswith("host ") and v.split()]
    host_a = hosts[0] if hosts else "?"
    host_b = hosts[1] if len(hosts) > 1 else "?"
    a2b = DirectionMetrics(src=host_a, dst=host_b)
    b2a = DirectionMetrics(src=host_b, dst=host_a)
    for label, v1, v2 in cur["pairs"]:
        _fill(a2b, label, v1)
        _fill(b2a, label, v2)
    complete_raw = hdr.get("complete conn", "")
    syns = re.search(r"SYNs:\s*(\d+)", complete_raw)
    fins = re.search(r"FINs:\s*(\d+)", complete_raw)
    total = hdr.get("total packets")
    return Connection(
        index=cur["index"],
        host_a=host_a,
        host_b=host_b,
        complete=complete_raw.strip().lower().startswith("yes"),
        syns=int(syns.group(1)) if syns else None,
        fins=int(fins.group(1)) if fins else None,
        first_packet=_parse_ctime(hdr.get("first packet", "")),
        last_packet=_parse_ctime(hdr.get("last packet", "")),
        elapsed_s=_parse_elapsed(hdr.get("elapsed time", "")),
        total_pkts=_int(total) if total else None,
        a2b=a2b,
        b2a=b2a,
    )


def apply_csv_seconds(conns: list[Connection], csv_text: str) -> None:
    """Re-anchor first/last packet times on the CSV's epoch seconds.

    The long output's times are local-time strings; the CSV has epoch seconds
    (with a broken fraction, see module doc).  Keeping the CSV's integer
    seconds and the long output's fraction is exact and timezone-proof.
    """
    header: list[str] | None = None
    by_index = {c.index: c for c in conns}
    for line in csv_text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        cells = [c.strip() for c in line.split(",")]
        if header is None:
            header = cells
            continue
        row = dict(zip(header, cells))
        try:
            conn = by_index.get(int(row.get("conn_#", "")))
        except ValueError:
            continue
        if conn is None:
            continue
        for key, attr in (("first_packet", "first_packet"), ("last_packet", "last_packet")):
            sec_txt = row.get(key, "").split(".")[0]
            cur = getattr(conn, attr)
            if sec_txt.isdigit() and cur is not None:
                setattr(conn, attr, int(sec_txt) + (cur - int(cur)))


def main_connection(conns: list[Connection]) -> Connection | None:
    """The connection that carried the most data bytes (ties: lowest index)."""
    if not conns:
        return None
    return max(conns, key=lambda c: (c.data_bytes, -c.index))
