"""Property tests for everything satbed reads that a user, a killed run or
another tool may have written: topologies, experiment files, YAML bytes,
testbed records, pcap captures and tcptrace output. Whatever the input, a
loader returns a value or raises its one documented error, never anything
else (an unexpected exception is a traceback in front of the user)."""

from __future__ import annotations

import json
import os
import struct
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import satbed_testlib  # noqa: F401  (puts the repository on sys.path)
from satbed.core.errors import SatbedError
from satbed.core.files import jsonl_records

PROFILE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=20), st.sampled_from(["10.9.0.1/24", "a.eth0", "em.a", "8mbit", "600",
                                                           "1e-5", "pep", "emulator", "scp", "none"]))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=12) | st.sampled_from(
        ["name", "subnet", "hosts", "transparent", "routers", "links", "ip", "kind", "ports", "short",
         "fixed", "axes", "repetitions", "client", "pep", "rtt", "ber", "link", "size", "timeout"]),
        inner, max_size=6)), max_leaves=30)

# Shapes near the valid ones reach deeper into the validators than noise does.
host = st.fixed_dictionaries({"ip": st.sampled_from(["10.9.0.1/24", "10.9.0.2/24", "10.9.0.0/24", "x", None])},
                             optional={"short": st.sampled_from(["a", "b", "zz", "A", ""]),
                                       "gateway": st.sampled_from(["10.9.0.254", "1.2.3.4", "nope"])})
topologies = st.fixed_dictionaries({
    "name": st.text(max_size=5),
    "hosts": st.dictionaries(st.sampled_from(["a", "b", "c", "9x"]), host, max_size=3),
    "transparent": st.dictionaries(st.sampled_from(["em", "pa", "br"]), st.fixed_dictionaries(
        {"kind": st.sampled_from(["pep", "emulator", "bridge", "toaster"]),
         "ports": st.sampled_from([["a", "b"], ["lan", "wan"], ["a"], ["a", "a"], "ab"])}), max_size=2),
    "links": st.lists(st.lists(st.sampled_from(["a.eth0", "b.eth0", "c.eth0", "em.a", "em.b", "pa.lan",
                                                "pa.wan", "br.a", "zz.q", 5]), min_size=1, max_size=3),
                      max_size=4)})
experiments = st.fixed_dictionaries({}, optional={
    "fixed": st.dictionaries(st.sampled_from(["client", "pep", "rtt", "ber", "size", "queue", "rate", "link",
                                              "time_limit", "direction", "seed"]), scalars, max_size=5),
    "axes": st.dictionaries(st.sampled_from(["client", "pep", "rtt", "ber", "size"]),
                            st.lists(scalars, max_size=3) | scalars, max_size=3),
    "repetitions": scalars, "timeout": scalars})


@PROFILE
@given(st.one_of(documents, topologies))
def test_topology_parse_returns_a_spec_or_one_error(doc):
    from satbed.model import topology
    try:
        topology.parse(doc, source="fuzz")
    except SatbedError as e:
        assert "\n" not in str(e)


@PROFILE
@given(st.one_of(documents, experiments))
def test_experiment_build_returns_cells_or_one_error(doc):
    from satbed.backends import clients
    from satbed.model import experiment
    try:
        experiment._build(doc, "fuzz.yaml", "mininet", clients.REGISTRY)
    except SatbedError as e:
        assert "\n" not in str(e)


@PROFILE
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_yaml_bytes_load_or_one_error(data):
    from satbed.core import yamlfile
    with tempfile.NamedTemporaryFile(suffix=".yaml") as f:
        f.write(data)
        f.flush()
        try:
            yamlfile.load(f.name, "fuzz file")
        except SatbedError as e:
            assert "\n" not in str(e)


def test_a_yaml_file_is_read_again_when_its_text_changes_and_each_caller_gets_its_own_copy(tmp_path):
    """yamlfile.load parses each text once: a caller's change to its document
    must not reach the next caller, and a file rewritten at once with text
    of the same length (the same size, and a modification time the kernel
    may not tell apart) must be read anew."""
    from satbed.core import yamlfile
    path = tmp_path / "a.yaml"
    path.write_text("a: [1]\n")
    first = yamlfile.load(str(path), "test file")
    first["a"].append(2)
    assert yamlfile.load(str(path), "test file") == {"a": [1]}
    path.write_text("a: [3]\n")
    assert yamlfile.load(str(path), "test file") == {"a": [3]}


@PROFILE
@given(st.binary(max_size=300) | documents.map(lambda d: __import__("json").dumps(d).encode()))
def test_records_scan_never_raises(data):
    from satbed.backends import records
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "sb12ab.json"), "wb") as f:
            f.write(data)
        old, records.RECORD_DIR = records.RECORD_DIR, d
        try:
            found = records.scan()
        finally:
            records.RECORD_DIR = old
        assert len(found) == 1
        assert isinstance(found[0], (records.RunRecord, str))


objects = documents.filter(lambda d: isinstance(d, dict)).map(lambda d: ("object", d))
# Anything that is not one whole JSON object on its line: JSON objects start with "{".
noise = st.binary(max_size=80).filter(lambda b: not (set(b) & {10, 13}) and not b.lstrip().startswith(b"{")) \
    | documents.filter(lambda d: not isinstance(d, dict)).map(lambda d: json.dumps(d).encode()) \
    | objects.map(lambda o: json.dumps(o[1]).encode()[:-1])          # a torn object: its last byte lost
noise = noise.map(lambda b: ("noise", b))


@PROFILE
@given(st.lists(objects | noise, max_size=8))
def test_jsonl_records_yield_every_whole_object_line_and_skip_the_rest(lines):
    """A file the testbed's programs write while running, torn or garbled
    anywhere: every line that is a JSON object comes back, in order, nothing
    else does, and no line raises."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "records.jsonl")
        with open(path, "wb") as f:
            f.write(b"\n".join(json.dumps(v).encode() if kind == "object" else v for kind, v in lines))
        got = list(jsonl_records(path))
    # Compared as JSON text: NaN is not equal to itself.
    assert [json.dumps(r) for r in got] == [json.dumps(v) for kind, v in lines if kind == "object"]


def _pcap(frames: list[bytes], linktype: int) -> bytes:
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)
    return head + b"".join(struct.pack("<IIII", 1, i, len(fr), len(fr)) + fr for i, fr in enumerate(frames))


@PROFILE
@given(st.lists(st.binary(max_size=120), max_size=6), st.sampled_from([1, 113, 276, 101, 0]),
       st.integers(0, 40))
def test_pcap_reader_returns_packets_or_a_pcap_error(frames, linktype, cut):
    from analysis.pcap import PcapError, read_tcp
    data = _pcap(frames, linktype)
    data = data[:len(data) - cut] if cut else data
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.pcap"
        p.write_bytes(data)
        try:
            summary = read_tcp(p)
        except PcapError:
            return
        assert summary.records <= len(frames)


@PROFILE
@given(st.lists(st.one_of(st.text(max_size=60), st.sampled_from([
    "TCP connection 1:", "	host a:        10.99.99.2:40000", "	host b:        10.99.99.254:22",
    "	complete conn: yes", "	first packet:  Mon Nov 23 10:00:00.000000 2026",
    "	elapsed time:  0:00:10.000000", "	total packets: 100",
    "     total packets:          50           total packets:          50",
    "     RTT avg:             600.1 ms          RTT avg:               0.0 ms",
    "     throughput:        100000 Bps          throughput:           1 Bps",
    "================================"])), max_size=30))
def test_tcptrace_long_output_parses_or_yields_nothing(lines):
    from analysis.tcptrace import main_connection, parse_long
    conns = parse_long("\n".join(lines))
    main_connection(conns)


tcp_frames = st.builds(
    lambda etype, vihl, total_len, frag, proto, addrs, ports, seq, ack, doff, flags, win, opts, tail, caplen:
    (struct.pack(">12xH", etype) + struct.pack(">BBHHHBBH4s4s", vihl, 0, total_len, 0, frag, 64, proto, 0,
                                               addrs[0], addrs[1])
     + struct.pack(">HHIIHH4x", ports[0], ports[1], seq, ack, (doff << 12) | flags, win) + opts + tail)[:caplen],
    st.sampled_from([0x0800, 0x86DD, 0x8100]), st.sampled_from([0x45, 0x46, 0x44, 0x55]),
    st.integers(0, 65535), st.sampled_from([0, 0x4000, 0x2000, 0x0001]), st.sampled_from([6, 17, 1]),
    st.tuples(st.binary(min_size=4, max_size=4), st.binary(min_size=4, max_size=4)),
    st.tuples(st.integers(0, 65535), st.integers(0, 65535)), st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1), st.integers(0, 15), st.integers(0, 63), st.integers(0, 65535),
    st.one_of(st.binary(max_size=40), st.builds(
        lambda blocks, after: (b"\x01\x01\x05" + bytes([2 + 8 * len(blocks)])
                               + b"".join(struct.pack(">II", *b) for b in blocks) + after),
        st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)), max_size=4),
        st.binary(max_size=16))),
    st.binary(max_size=8), st.integers(0, 120))


@PROFILE
@given(st.lists(tcp_frames, max_size=8))
def test_pcap_array_reader_reads_what_the_general_decoder_reads(frames):
    """read_tcp's array path for Ethernet/IPv4 TCP and UDP agrees field for
    field, and in capture order, with the general decoder frame by frame,
    which reads every frame the array path leaves to it."""
    from analysis.pcap import TcpPacket, _decode, read_tcp
    want = [_decode(frame, 1, 1 + i / 1e6) for i, frame in enumerate(frames)]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.pcap"
        p.write_bytes(_pcap(frames, 1))
        got = read_tcp(p)
    assert got.records == len(frames) and not got.truncated
    assert got.packets == [w for w in want if isinstance(w, TcpPacket)]
    assert got.udp == [w for w in want if w is not None and not isinstance(w, TcpPacket)]
    assert got.tcp.sack.tolist() == [len(w.sack) for w in want if isinstance(w, TcpPacket)]


_options = st.lists(st.one_of(
    st.sampled_from([b"\x01", b"\x00", b"\x02\x04\x05\xb4", b"\x08\x0a" + bytes(8), b"\x05\x01", b"\x05\x00"]),
    st.builds(lambda n, junk: b"\x05" + bytes([2 + 8 * n]) + junk,
              st.integers(0, 4), st.binary(min_size=0, max_size=40))), max_size=8).map(b"".join)


@PROFILE
@given(st.lists(st.tuples(_options, st.integers(0, 44)), max_size=12))
def test_sack_block_counts_on_arrays_match_the_option_parser(segments):
    """The array walk over every segment's options counts the blocks
    _sack_blocks finds in each, with options cut anywhere (a snap length)."""
    import numpy as np
    from analysis.pcap import _sack_blocks, _sack_counts
    buf, lo, hi = b"", [], []
    for opts, cut in segments:
        lo.append(len(buf))
        buf += opts[:cut]
        hi.append(len(buf))
    b = np.frombuffer(buf + bytes(64), dtype=np.uint8)
    got = _sack_counts(b, np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64))
    assert got.tolist() == [len(_sack_blocks(buf[a:z])) for a, z in zip(lo, hi)]
