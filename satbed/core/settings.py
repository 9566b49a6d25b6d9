"""Every environment knob satbed reads, in one object: read once from the
environment by the process's entry point, handed to what needs it, and
recorded in each run's environment.json so a result says how it was made.

A matrix's cells run in child processes; they inherit the environment, so the
parent's settings reach them unchanged (the CLI's --inventory is put there
as SATBED_INVENTORY for that reason)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

from satbed.core.errors import SatbedError

EMULATOR_IO_PATHS = ("auto", "tpacket", "socket")

# name in the environment -> (field, what it means)
KNOBS = {
    "SATBED_RECORD_DIR": ("record_dir", "where run records for `satbed clean` are kept"),
    "SATBED_CLIENT_PATH": ("client_path", "directories of a lab's own client adapters (colon-separated)"),
    "SATBED_TRANSFER_TIMEOUT": ("transfer_timeout_s", "seconds a transfer may take, over the client's estimate"),
    "SATBED_KEEP_FILES": ("keep_files", "keep the payload files after a verified transfer (1, yes, true)"),
    "SATBED_DOCKER_MOUNTS": ("docker_mounts", "more host directories container nodes mount (colon-separated)"),
    "SATBED_RUNC_ROOT": ("runc_root", "runc's state directory when dockerd uses another"),
    "SATBED_PEPSAL_BIN": ("pepsal_bin", "a lab's own PEPsal build"),
    "SATBED_SCPS_BIN": ("scps_bin", "a lab's own SCPS gateway build"),
    "SATBED_EMULATOR_SPIN_US": ("emulator_spin_us", "satemu's busy-wait before a packet's due time (µs)"),
    "SATBED_EMULATOR_IO": ("emulator_io", "satemu's packet I/O: auto, tpacket or socket"),
    "SATBED_INVENTORY": ("inventory", "the Ansible inventory of the physical test bed"),
}


@dataclass(frozen=True)
class Settings:
    record_dir: str = "/run/satbed"
    client_path: tuple[str, ...] = ()
    transfer_timeout_s: float | None = None
    keep_files: bool = False
    docker_mounts: tuple[str, ...] = ()
    runc_root: str = ""
    pepsal_bin: str = ""
    scps_bin: str = ""
    emulator_spin_us: int | None = None
    emulator_io: str | None = None
    inventory: str = ""

    @classmethod
    def from_environ(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """The settings an environment gives, each checked (one line naming a bad one)."""
        env = os.environ if env is None else env

        def get(name: str) -> str:
            return env.get(name, "").strip()

        def number(name: str, kind: type) -> float | int | None:
            raw = get(name)
            if not raw:
                return None
            try:
                value = kind(raw) if raw.isascii() else None
            except ValueError:
                value = None
            if value is None or not 0 <= value < float("inf"):
                raise SatbedError(f"{name}={raw!r}: a non-negative number")
            return value

        io_path = get("SATBED_EMULATOR_IO") or None
        if io_path is not None and io_path not in EMULATOR_IO_PATHS:
            raise SatbedError(f"SATBED_EMULATOR_IO={io_path!r}: one of {', '.join(EMULATOR_IO_PATHS)}")
        timeout = number("SATBED_TRANSFER_TIMEOUT", float)
        if timeout == 0:
            raise SatbedError("SATBED_TRANSFER_TIMEOUT=0: give a positive number of seconds")
        spin = number("SATBED_EMULATOR_SPIN_US", int)
        if spin is not None and spin > 100_000:
            raise SatbedError(f"SATBED_EMULATOR_SPIN_US={spin}: at most 100000 microseconds")
        return cls(
            record_dir=get("SATBED_RECORD_DIR") or cls.record_dir,
            client_path=tuple(p for p in get("SATBED_CLIENT_PATH").split(os.pathsep) if p),
            transfer_timeout_s=timeout,
            keep_files=get("SATBED_KEEP_FILES").lower() in ("1", "yes", "true"),
            docker_mounts=tuple(p for p in get("SATBED_DOCKER_MOUNTS").split(":") if p),
            runc_root=get("SATBED_RUNC_ROOT"),
            pepsal_bin=os.path.abspath(get("SATBED_PEPSAL_BIN")) if get("SATBED_PEPSAL_BIN") else "",
            scps_bin=os.path.abspath(get("SATBED_SCPS_BIN")) if get("SATBED_SCPS_BIN") else "",
            emulator_spin_us=spin,
            emulator_io=io_path,
            inventory=os.path.abspath(get("SATBED_INVENTORY")) if get("SATBED_INVENTORY") else "",
        )

    def to_dict(self) -> dict:
        """For environment.json: every knob, set or not."""
        return dataclasses.asdict(self)
