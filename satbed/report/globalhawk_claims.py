"""The Global Hawk paper's claims as data: each statement of its results
section and Figures 2-9 with the number from satbed's cells that tests it, the
verdict, and the explanation. The page (globalhawk.py) lays them out; the
conditions are the matrix's variants: `today` (this kernel's TCP, errors per
bit), `study` (the study's hosts, errors per bit) and `study-errors` (the
study's hosts, the study's figure applied per packet, as netem reads a loss
percentage). A cell without errors is the same network in the last two, so
`study-errors` at BER 0 reads the `study` cell."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

from satbed.report.common import fmt_value
from satbed.results.store import CellRow


CONDITIONS = (("today", "today's hosts, errors per bit"),
              ("study", "the study's hosts, errors per bit"),
              ("study-errors", "the study's hosts, the study's error model (per packet)"))
PAPER_FTP_BPS = 730e3
NCFTP_WINDOW = 65_535        # NcFTP's fixed receive buffer: no window scaling


@dataclass
class Cells:
    """The stored cells of one or more matrix runs, looked up by condition."""
    rows: list[CellRow]
    unavailable: list[CellRow] = field(default_factory=list)   # their PEP is not installed where they ran
    dirs: dict[str, str] = field(default_factory=dict)         # a cell's hash: the results directory it is in
    # Read where rows have no cell of a condition: the whole grid's table
    # answers from the grid, and from the smaller experiments what it has not.
    fallback: list[CellRow] = field(default_factory=list)

    def find(self, variant: str, client: str, pep: str, rtt: float, ber: float,
             options: str = "") -> list[CellRow]:
        if variant == "study-errors" and ber == 0:
            variant = "study"       # no errors: the same network, one cell

        def matching(rows: list[CellRow]) -> list[CellRow]:
            return [r for r in rows
                    if r.params.get("variant", "") == variant and r.params["client"] == client
                    and r.params["pep"] == pep and r.params["rtt"] == rtt and r.params["ber"] == ber
                    and (r.params.get("pep_options") or "") == options]
        return matching(self.rows) or matching(self.fallback)

    def goodput(self, variant: str, client: str, pep: str, rtt: float, ber: float,
                options: str = "") -> float | None:
        """Mean goodput (bit/s) of the measured cells, None where there are none."""
        values = [r.goodput_bps for r in self.find(variant, client, pep, rtt, ber, options) if r.goodput_bps]
        return statistics.fmean(values) if values else None

    def vantage(self, variant: str, client: str, pep: str, rtt: float, ber: float, where: str) -> dict:
        """The main connection at one capture point: the data sender's and the
        receiver's (ACK side's) tcptrace figures, or {} without a capture."""
        for r in self.find(variant, client, pep, rtt, ber):
            main = ((r.metrics.get("analysis") or {}).get(where) or {}).get("main")
            if main:
                data = main["data_direction"]
                return {"data": main[data], "acks": main["b2a" if data == "a2b" else "a2b"]}
        return {}


@dataclass
class Claim:
    where: str                   # the paper's place: "Chart 2", "Figure 8", ...
    says: str                    # what the paper says, in our words
    value: Callable[[Cells, str], float | None]
    unit: str                    # how value is printed
    holds: Callable[[float], bool]
    why: str                     # the explanation, tested by the conditions beside each other
    tested: Callable[[Cells], str] = lambda cells: ""   # what an experiment beside the matrix found, read from it


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _mbps(v: float | None) -> str:
    return "-" if v is None else f"{v / 1e6:.2f} Mbit/s"


def _pep_gain(client: str, rtt: float, ber: float) -> Callable[[Cells, str], float | None]:
    return lambda c, v: _ratio(c.goodput(v, client, "pepd", rtt, ber), c.goodput(v, client, "none", rtt, ber))


def _worst_pep_gain_at_zero_delay(c: Cells, v: str) -> float | None:
    gains = [g for client in ("ftp", "scp") for ber in (0.0, 1e-5)
             if (g := _pep_gain(client, 0.0, ber)(c, v)) is not None]
    return max(gains) if gains else None


def _ftp_spread(c: Cells, v: str) -> float | None:
    """NcFTP at 600 ms: its goodput with errors as a share of without."""
    return _ratio(c.goodput(v, "ftp", "none", 600.0, 1e-5), c.goodput(v, "ftp", "none", 600.0, 0.0))


def _saratoga_flatness(c: Cells, v: str) -> float | None:
    values = [c.goodput(v, "saratoga", "none", rtt, ber) for rtt in (0.0, 600.0) for ber in (0.0, 1e-5)]
    values = [x for x in values if x is not None]
    return min(values) / max(values) if len(values) > 1 else None


def _saratoga_lead(c: Cells, v: str) -> float | None:
    """Saratoga's goodput over the best TCP transfer's, with or without pepd, at 600 ms and 1e-5."""
    tcp = [c.goodput(v, client, pep, 600.0, 1e-5) for client in ("ftp", "scp") for pep in ("none", "pepd")]
    tcp = [x for x in tcp if x is not None]
    return _ratio(c.goodput(v, "saratoga", "none", 600.0, 1e-5), max(tcp) if tcp else None)


def _window(client: str, pep: str, where: str, key: str, side: str = "acks",
            ber: float = 1e-5) -> Callable[[Cells, str], float | None]:
    def value(c: Cells, v: str) -> float | None:
        figures = c.vantage(v, client, pep, 600.0, ber, where).get(side) or {}
        return figures.get(key)
    return value


def _wan_over_lan(client: str) -> Callable[[Cells, str], float | None]:
    def value(c: Cells, v: str) -> float | None:
        lan = _window(client, "pepd", "lan_a", "win_max")(c, v)
        wan = _window(client, "pepd", "wan_a", "win_max")(c, v)
        return _ratio(wan, lan)
    return value


def _scp_over_ftp_window(c: Cells, v: str) -> float | None:
    return _ratio(_window("scp", "none", "lan_a", "win_max")(c, v), _window("ftp", "none", "lan_a", "win_max")(c, v))


CLAIMS = (
    Claim("Section 7, UDP baseline", "nuttcp UDP sustains 8.0069 Mbit/s through the 8 Mbit/s HTB link",
          lambda c, v: c.goodput(v, "nuttcp-udp", "none", 0.0, 0.0), "Mbit/s",
          lambda x: abs(x / 8.0069e6 - 1) < 0.03,
          "The shaper is the study's HTB (8mbit, ceil 10mbit, cburst 128k); nuttcp's goodput counts UDP "
          "payload, the link's rate counts frames."),
    Claim("Chart 1", "at zero delay a PEP is no better than none (it only adds processing): pepd's goodput "
          "over no PEP's, the largest over FTP and SCP at BER 0 and 1e-5",
          _worst_pep_gain_at_zero_delay, "x", lambda x: x <= 1.05,
          "Per packet the link is clean at zero delay: end-to-end TCP fills it and the PEP only adds a hop."
          " Per bit, 11% of frames are lost even without delay: end-to-end CUBIC backs off at every "
          "loss while pepd's WAN leg (BBR and 8x buffers, satbed's settings for links with bit errors) "
          "does not, so the PEP wins, as the paper's Chart 1 never shows.",
          lambda c: cubic_leg(c, 0.0)),
    Claim("Chart 2", "at 600 ms without errors the PEP shows no improvement (SCP, pepd over none)",
          _pep_gain("scp", 600.0, 0.0), "x", lambda x: x <= 1.1,
          "Linux autotunes the receive buffer to the bandwidth-delay product (600 KB here) and SACK keeps "
          "the window open: a modern TCP needs no proxy on a clean long link."),
    Claim("Chart 2", "at 600 ms and BER 1e-5 a PEP helps TCP transfers 'ever so slightly' (SCP, pepd over "
          "none)", _pep_gain("scp", 600.0, 1e-5), "x", lambda x: 0.9 <= x <= 1.5,
          "The experiment that settles the disagreement: the same cells with the figure per bit (11% of "
          "1500-byte frames lost: end-to-end TCP collapses and the PEP wins over 40 times) and per packet "
          "(1 frame in 100,000: the PEP's gain is as slight as the paper says). The paper's numbers fit "
          "the second, which is how netem, its channel emulator, reads a loss percentage.",
          lambda c: cubic_leg(c, 600.0)),
    Claim("Figure 2", "NcFTP 3.2.2 reaches about 730 kbit/s at 600 ms whatever the BER: goodput at BER 1e-5",
          lambda c, v: c.goodput(v, "ftp", "none", 600.0, 1e-5), "kbit/s",
          lambda x: abs(x / PAPER_FTP_BPS - 1) < 0.3,
          "NcFTP fixes its receive buffer, so the window never passes 65,535 bytes: at most 874 kbit/s at "
          "600 ms. 'Whatever the BER' holds only if errors are rare enough that a window-limited flow "
          "rarely loses a packet: true per packet, false per bit."),
    Claim("Figure 2", "NcFTP's goodput with errors is the same as without (1e-5 over 0, at 600 ms)",
          _ftp_spread, "x", lambda x: x >= 0.8,
          "A window-limited flow moves one window per round trip; a loss costs it a round trip or a "
          "timeout. At 1 loss in 100,000 packets that is nothing; at 11% it is everything."),
    Claim("Chart 3", "a PEP improves FTP (at 600 ms and 1e-5, pepd over none)",
          _pep_gain("ftp", 600.0, 1e-5), "x", lambda x: x >= 1.5,
          "The PEP ends NcFTP's connection a LAN round trip away, so its 64 KB window no longer has to "
          "cover 600 ms; the PEP's own WAN window does."),
    Claim("Chart 3", "a PEP has little effect on SCP, or worsens it, up to BER 1e-5 (pepd over none at 600 ms)",
          _pep_gain("scp", 600.0, 1e-5), "x", lambda x: x <= 1.2,
          "As in Chart 2: per packet, SCP's autotuned window already fills the link; per bit, end-to-end "
          "SCP collapses and the PEP is far better."),
    Claim("Chart 3", "Saratoga is nearly flat across delay and BER (its lowest goodput over its highest, 0 and "
          "600 ms, BER 0 and 1e-5)", _saratoga_flatness, "x", lambda x: x >= 0.85,
          "Saratoga paces at the link's rate and asks again only for what is missing, so delay costs it "
          "nothing and a lost frame costs one frame. Per bit that is 11% of its frames, a fall of about a "
          "tenth, at the edge of the paper's 'little fall off'; per packet nothing falls. Part of its time "
          "grows with the RTT and not with the size (the request, and the last repair rounds, a round trip "
          "each), so at 600 ms a 20 MB transfer falls further below its 0 ms goodput than the paper's "
          "100 MB one: the claims experiment's smaller cells read lower on this row than the grid's."),
    Claim("Section 8", "a NACK-based protocol (Saratoga) outperforms TCP, with or without a PEP (its goodput "
          "over the best TCP transfer at 600 ms and 1e-5)", _saratoga_lead, "x", lambda x: x >= 1.0,
          "pepd's TCP WAN leg still halves its window on a loss; Saratoga does not."),
    Claim("Figures 2-3", "FTP's advertised window is far below the 600,000-byte bandwidth-delay product, "
          "without a PEP (largest window Client A advertised, at 600 ms and 1e-5)",
          _window("ftp", "none", "lan_a", "win_max"), "bytes", lambda x: x <= NCFTP_WINDOW,
          "The study's NcFTP fixes its buffer: 65,535 bytes at most (the paper reads about 12,000 bytes "
          "off its Figure 2, an instant's value). Today's FTP client on today's host advertises more than "
          "64 KB, whatever the run (the section 'One run or several'): the disagreement is the host's, not "
          "the network's."),
    Claim("Figures 3-4", "with a PEP the client's window stays small and the WAN window is much larger "
          "(FTP: the window advertised on the WAN after the PEP over the client's)",
          _wan_over_lan("ftp"), "x", lambda x: x >= 4,
          "The PEP's WAN leg advertises its own buffer, sized to the link, whatever the client's; the FTP "
          "client's own window, on the LAN leg, stays what its buffer allows, on either host."),
    Claim("Figure 5", "SCP's window is much larger than FTP's without a PEP (largest advertised, SCP over "
          "FTP)", _scp_over_ftp_window, "x", lambda x: x >= 4,
          "OpenSSH's receiver leaves the buffer to the kernel, which autotunes it; NcFTP fixes it. With "
          "errors per bit on today's host, how far SCP's window grows is a matter of the run (the section "
          "'One run or several'), and so is this verdict."),
    Claim("Figures 6-7", "with a PEP, SCP's client-side window stays small and the WAN window is large "
          "(SCP: WAN over client side)", _wan_over_lan("scp"), "x", lambda x: x >= 1.5,
          "As for FTP: the WAN leg's window is the PEP's. The study's kernel keeps SCP's autotuned window "
          "on the short LAN leg small; today's kernel grows it to megabytes there as well, larger than the "
          "WAN's or as large in every run (the section 'One run or several'), so under today's hosts the paper's "
          "picture does not appear."),
    Claim("Figure 8", "without a PEP, SCP's receive window grows to about 1,000,000 bytes at 600 ms and "
          "0.001% BER (largest window Client A advertised)",
          _window("scp", "none", "lan_a", "win_max"), "bytes", lambda x: x >= 900_000,
          "Autotuning grows the window while the flow is limited by it. At 1 loss in 100,000 packets (per "
          "packet) the flow is window-limited and the window grows to megabytes, as the paper's Figure 8 "
          "shows. At 11% frame loss (per bit) the flow is loss-limited: the study's host stays well below "
          "1 MB, and today's passes it in some runs and not in others (the section 'One run or several')."),
    Claim("Figure 9", "SCP uses SACK: the receiver sends SACK blocks (ACKs carrying them, 600 ms, 1e-5, no PEP)",
          _window("scp", "none", "lan_a", "sack_pkts"), "", lambda x: x > 0,
          "SACK is on in every host profile here, as in the study's kernels; blocks appear whenever a "
          "segment is missing, errors or queue drops alike."),
)


# pepd's WAN leg as satbed runs it on a lossy link (its defaults) and as a
# loss-based PEP would (experiments/globalhawk-pepd-cc.yaml).
PEPD_LEGS = (("none", "", "no PEP"), ("pepd", "", "pepd, BBR and 8x buffers (satbed's defaults with errors)"),
             ("pepd", "cc=cubic", "pepd, CUBIC and 8x buffers"),
             ("pepd", "cc=cubic buffer_factor=1", "pepd, CUBIC and the hosts' buffers"))


def cubic_leg(cells: Cells, rtt: float) -> str:
    """What pepd with a loss-based WAN leg did against no PEP at BER 1e-5 per
    bit (experiments/globalhawk-pepd-cc.yaml), in words, from its cells."""
    cubic, bbr = [], []
    for client in ("ftp", "scp"):
        none = cells.goodput("", client, "none", rtt, 1e-5)
        for options, into in (("", bbr), ("cc=cubic", cubic), ("cc=cubic buffer_factor=1", cubic)):
            gain = _ratio(cells.goodput("", client, "pepd", rtt, 1e-5, options), none)
            if gain is not None:
                into.append(gain)
    if not cubic or not bbr:
        return "The cause is untested here: no stored run of `experiments/globalhawk-pepd-cc.yaml`."
    found = ("so the congestion control is the cause, not the split connection or the buffers"
             if max(cubic) <= 1.1 < min(bbr) else "so the congestion control alone does not explain it")
    return (f"Tested per bit at {rtt:g} ms (the table of pepd's WAN leg below): with the leg on CUBIC, pepd "
            f"over no PEP is {min(cubic):.2f}-{max(cubic):.2f}x for FTP and SCP, against "
            f"{min(bbr):.2f}-{max(bbr):.2f}x on BBR, {found}.")



def agreement(cells: Cells) -> dict[str, int]:
    return {variant: sum(1 for c in CLAIMS if (v := c.value(cells, variant)) is not None and c.holds(v))
            for variant, _ in CONDITIONS}


def read_again(table: Cells, other: Cells, what: str) -> list[str]:
    """The claims read again from other cells (what: which, in words): the
    claims that hold there, and each verdict that differs from the table's."""
    differ = []
    for i, claim in enumerate(CLAIMS, 1):
        for variant, label in CONDITIONS:
            a, b = claim.value(table, variant), claim.value(other, variant)
            if a is not None and b is not None and claim.holds(a) != claim.holds(b):
                differ.append(f"row {i} under {label} ({fmt_value(a, claim.unit)} in the table, "
                              f"{fmt_value(b, claim.unit)} there)")
    agree = agreement(other)
    counted = ", ".join(f"{agree[v]} of {len(CLAIMS)} {label}" for v, label in CONDITIONS)
    return [f"Read again from {what}, the claims that hold are {counted}. "
            + (f"Verdicts that differ from the table's: {'; '.join(differ)}." if differ
               else "No verdict differs from the table's.")]
