"""The satellite link as data: one parameter set per direction (rate, ceiling, queue, delay,
bit errors, bursts, outages, time profiles), validated whole before anything is built."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field

from satbed.core.errors import SatbedError
from satbed.core.units import frame_error_rate, parse_ber, parse_delay_ms, parse_loss, parse_rate
from satbed.model import linkprofile

BACKENDS = ("auto", "userspace", "tc", "bridge")
MTU_FRAME = 1514            # bytes HTB charges for a full 1500-byte packet (Ethernet header, no FCS)


@dataclass
class Direction:
    """One direction of the satellite link. rate_bps None means unshaped."""
    rate_bps: int | None = 8_000_000
    ceil_bps: int | None = 10_000_000
    burst_bytes: int = 0            # 0: as tc computes it
    cburst_bytes: int = 131072
    delay_ms: float = 0.0           # one way
    ber: float = 0.0                # per bit: a frame's loss grows with its length
    loss: float = 0.0               # per packet, whatever its length (netem's `loss`)
    queue_packets: int = 1000       # HTB's default leaf queue: txqueuelen packets
    queue_bytes: int = 0            # 0: no byte limit
    gilbert_elliott: dict | None = None
    outage: dict | None = None
    profile: str | None = None

    def validate(self, where: str) -> None:
        # Values come from YAML too: a string where a number belongs is an error, not a TypeError.
        for name in ("rate_bps", "ceil_bps", "burst_bytes", "cburst_bytes", "queue_packets", "queue_bytes"):
            v = getattr(self, name)
            if v is None and name in ("rate_bps", "ceil_bps"):
                continue
            if isinstance(v, bool) or not isinstance(v, int):
                raise SatbedError(f"{where}: {name} must be a whole number, got {v!r}")
        for name in ("delay_ms", "ber", "loss"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise SatbedError(f"{where}: {name} must be a number, got {v!r}")
        for name in ("gilbert_elliott", "outage"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), dict):
                raise SatbedError(f"{where}: {name} must be a mapping, got {getattr(self, name)!r}")
        if self.profile is not None and not isinstance(self.profile, str):
            raise SatbedError(f"{where}: profile must be a file name, got {self.profile!r}")
        if self.rate_bps is not None:
            parse_rate(self.rate_bps)
        if self.ceil_bps is not None:
            parse_rate(self.ceil_bps)
        if self.ceil_bps is not None and self.rate_bps is not None and self.ceil_bps < self.rate_bps:
            raise SatbedError(f"{where}: ceil ({self.ceil_bps} bit/s) is below rate ({self.rate_bps} bit/s)")
        parse_delay_ms(self.delay_ms, f"{where} delay")
        parse_ber(self.ber)
        parse_loss(self.loss)
        if self.queue_packets < 1 or self.queue_bytes < 0:
            raise SatbedError(f"{where}: queue limit must be at least one packet")
        if self.gilbert_elliott is not None:
            _check_block(self.gilbert_elliott, f"{where}.gilbert_elliott", GE_BOUNDS)
        if self.outage is not None:
            _check_block(self.outage, f"{where}.outage", OUTAGE_BOUNDS, required=("period_s",))
            if self.outage.get("down_s", 0) > self.outage["period_s"]:
                raise SatbedError(f"{where}.outage.down_s: {self.outage['down_s']!r} is longer than period_s "
                                  f"{self.outage['period_s']!r}")
        if self.profile is not None:
            if not os.access(self.profile, os.R_OK):
                raise SatbedError(f"{where}: cannot read profile {self.profile}")
            # satemu reads it only once the testbed is up: its errors belong here.
            linkprofile.check(self.profile)

    def per(self, frame_bytes: int = MTU_FRAME) -> float:
        """Frame error rate of this direction's BER for a frame size."""
        return frame_error_rate(self.ber, frame_bytes)

    def drop_rate(self, frame_bytes: int = MTU_FRAME) -> float:
        """The share of frames of this size lost to bit errors or per-packet
        loss, two independent draws."""
        return 1 - (1 - self.per(frame_bytes)) * (1 - self.loss)

    def needs_emulation(self) -> bool:
        return bool(self.delay_ms or self.ber or self.loss or self.gilbert_elliott or self.outage or self.profile)


# What satemu accepts (emulator/config/config.go): key -> (low, high, high included).
GE_BOUNDS = {"p": (0, 1, True), "r": (0, 1, True), "ber_good": (0, 1, False), "ber_bad": (0, 1, False),
             "loss_good": (0, 1, True), "loss_bad": (0, 1, True)}
OUTAGE_BOUNDS = {"period_s": (0, linkprofile.MAX_TIME_S, True), "down_s": (0, linkprofile.MAX_TIME_S, True),
                 "offset_s": (0, linkprofile.MAX_TIME_S, True)}


def _check_block(doc: dict, where: str, bounds: dict, required: tuple[str, ...] = ()) -> None:
    bad = sorted(set(map(str, doc)) - set(bounds))
    if bad:
        raise SatbedError(f"{where}: unknown key {bad[0]!r} (known: {', '.join(bounds)})")
    for k in required:
        if k not in doc:
            raise SatbedError(f"{where}: {k} missing")
    for k, v in doc.items():
        lo, hi, closed = bounds[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise SatbedError(f"{where}.{k}: a number, got {v!r}")
        if not (lo <= v <= hi if closed else lo <= v < hi) or (k == "period_s" and v == 0):
            raise SatbedError(f"{where}.{k}: {v!r} is outside {'(' if k == 'period_s' else '['}{lo:g}, "
                              f"{hi:g}{']' if closed else ')'}")


@dataclass
class LinkConfig:
    a_to_b: Direction = field(default_factory=Direction)
    b_to_a: Direction = field(default_factory=Direction)
    seed: int = 1
    backend: str = "auto"

    @classmethod
    def symmetric(cls, rate: str | int | None = None, rtt_ms: float = 0, ber: float = 0, loss: float = 0,
                  ceil: str | int | None = None, backend: str = "auto", seed: int = 1,
                  **extra) -> "LinkConfig":
        """The study's link: the same in both directions, RTT split evenly.
        With no rate given, the study's HTB (8mbit, ceil 10mbit, cburst 128k)."""
        rtt_ms = parse_delay_ms(rtt_ms, "RTT")
        ber = parse_ber(ber)
        loss = parse_loss(loss)
        if backend == "bridge":
            if rate or rtt_ms or ber or loss or ceil or "queue_packets" in extra:
                raise SatbedError("--emulator bridge is a plain bridge: it takes no --rate, --ceil, --queue, "
                                  "--rtt, --ber or --loss")
            base = Direction(rate_bps=None, ceil_bps=None)
        elif rate is None:
            base = Direction(ceil_bps=parse_rate(ceil)) if ceil else Direction()
        else:
            r = parse_rate(rate)
            base = Direction(rate_bps=r, ceil_bps=parse_rate(ceil) if ceil else r)
        base = dataclasses.replace(base, delay_ms=rtt_ms / 2, ber=ber, loss=loss, **extra)
        cfg = cls(base, dataclasses.replace(base), seed, backend)
        cfg.validate()
        return cfg

    @classmethod
    def from_dict(cls, doc: dict) -> "LinkConfig":
        try:
            cfg = cls(Direction(**doc.get("a_to_b", {})), Direction(**doc.get("b_to_a", {})),
                      int(doc.get("seed", 1)), str(doc.get("backend", "auto")))
        except (TypeError, ValueError, AttributeError) as e:
            raise SatbedError(f"bad link configuration: {e}") from None
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise SatbedError(f"seed must be a whole number from 0 to 2^63-1, got {self.seed!r}")
        if self.backend not in BACKENDS:
            raise SatbedError(f"unknown emulator backend {self.backend!r} (known: {', '.join(BACKENDS)})")
        self.a_to_b.validate("a_to_b")
        self.b_to_a.validate("b_to_a")

    @property
    def rtt_ms(self) -> float:
        return self.a_to_b.delay_ms + self.b_to_a.delay_ms

    @property
    def rate_bps(self) -> int | None:
        return self.a_to_b.rate_bps

    def to_dict(self) -> dict:
        doc = dataclasses.asdict(self)
        # Per-packet loss came after BER: left out where unused, so the
        # identity of every cell without it stays what it was.
        for direction in ("a_to_b", "b_to_a"):
            if not doc[direction]["loss"]:
                del doc[direction]["loss"]
        return doc
