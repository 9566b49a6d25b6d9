"""Parsing of the quantities users type: sizes, rates, delays, error rates."""

from __future__ import annotations

import math
import re

from satbed.core.errors import SatbedError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.I)
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bit|bps|b)?(/s)?\s*$", re.I)
# A rate in bytes (8MB/s, 8MBps, 8MB): a capital B is bytes wherever it is written.
_BYTE_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(B|Bps|B/s|byte/s|bytes/s)\s*$", re.I)
_MULT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SI = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
MAX_RATE_BPS = 100 * 10**9          # far beyond what either emulator backend shapes
MAX_DELAY_MS = 3_600_000            # one hour each way: satemu's own bound


def parse_size(text: str | int) -> int:
    """Bytes from '100M', '64K', '1G', '1500' (binary multiples, as file sizes go)."""
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        # YAML's true is an int to Python: `size: true` would be one byte.
        raise SatbedError(f"bad size {text!r}: use a number with an optional K, M or G suffix")
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE.match(str(text))
        if not m:
            raise SatbedError(f"bad size {text!r}: use a number with an optional K, M or G suffix")
        value = int(float(m.group(1)) * _MULT[m.group(2).upper()])
    if value <= 0:
        raise SatbedError(f"size must be positive, got {text!r}")
    return value


def parse_rate(text: str | int | float) -> int:
    """Bits per second from '8mbit', '8M', '100Mbit', '8Mbps', '1G', '8000000'
    (SI multiples, as tc does). A lowercase b is bits. A rate in bytes (a capital
    B: 8MB/s, 8MBps) is refused with the same rate in bits to write instead,
    since tc reads 'mbps' as bytes and most people as bits: one spelling for
    each, never a guess."""
    if isinstance(text, bool) or (isinstance(text, float) and not math.isfinite(text)):
        raise SatbedError(f"bad rate {text!r}: use e.g. 8mbit, 100M or 8000000")
    if isinstance(text, (int, float)):
        value = int(text)
    else:
        m = _RATE.match(str(text))
        b = _BYTE_RATE.match(str(text))
        if b and "B" in b.group(3):
            bits = float(b.group(1)) * 8 * _SI[b.group(2).upper()]
            raise SatbedError(f"rate {text!r} is in bytes per second: write it in bits, "
                              f"{_bits_text(bits)} (satbed's rates are bits per second)")
        if not m:
            raise SatbedError(f"bad rate {text!r}: use e.g. 8mbit, 100M or 8000000")
        value = int(float(m.group(1)) * _SI[m.group(2).upper()])
    if value <= 0:
        raise SatbedError(f"rate must be positive, got {text!r}")
    if value > MAX_RATE_BPS:
        raise SatbedError(f"rate {text!r} is above {MAX_RATE_BPS // 10**9} Gbit/s")
    return value


def _bits_text(bps: float) -> str:
    for unit, div in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= div:
            return f"{bps / div:g}{unit}"
    return f"{bps:g}bit"


def _number(text: str | int | float, bad: str) -> float:
    """A YAML or command-line value as a float; `bad` is the error's line
    (True is not 1 here, nor a string with digits of another script)."""
    try:
        if isinstance(text, bool) or (isinstance(text, str) and not text.strip().isascii()):
            raise TypeError
        return float(text)
    except (TypeError, ValueError):
        raise SatbedError(bad) from None


def parse_delay_ms(text: str | int | float, what: str = "delay") -> float:
    value = _number(text, f"bad {what} {text!r}: give milliseconds")
    if not 0 <= value <= MAX_DELAY_MS:
        raise SatbedError(f"{what} must be within 0..{MAX_DELAY_MS} milliseconds, got {text!r}")
    return value


def parse_ber(text: str | int | float) -> float:
    value = _number(text, f"bad BER {text!r}: give a number such as 1e-5")
    if not 0 <= value < 1:
        raise SatbedError(f"BER must be in [0, 1), got {text!r}")
    return value


def parse_loss(text: str | int | float) -> float:
    """A per-packet loss probability in [0, 1), as netem's `loss` means it:
    a fraction (1e-5), or a percentage with its sign (0.001%)."""
    percent = isinstance(text, str) and text.strip().endswith("%")
    value = _number(text.strip()[:-1] if percent else text,
                    f"bad loss {text!r}: give a probability such as 1e-5, or a percentage such as 0.001%")
    if percent:
        value /= 100
    if not 0 <= value < 1:
        raise SatbedError(f"loss must be a probability in [0, 1), got {text!r}")
    return value


def frame_error_rate(ber: float, frame_bytes: int) -> float:
    """The share of frames of this size that independent bit errors at this
    BER damage: the one PER formula (emulators, link checks, cost model)."""
    return 1 - (1 - ber) ** (8 * frame_bytes)


def human_bps(bps: float) -> str:
    for unit, div in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= div:
            return f"{bps / div:.3g} {unit}"
    return f"{bps:.0f} bit/s"
