"""The file a transfer sends: seeded random bytes whose SHA-256 is known
before the transfer starts, and the copies a matrix's cells share."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import random
from dataclasses import dataclass

CHUNK = 1 << 20
# Names make_payload's byte stream in the cache: a cached file of another
# stream (were the generator ever changed) is never taken for this one.
STREAM = "mt1"


@dataclass
class Payload:
    path: str
    size: int
    sha256: str


def make_payload(path: str, size: int, seed: int, cache: PayloadCache | None = None) -> Payload:
    """Seeded random bytes: the same seed and size give the same file, so a
    run can be repeated byte for byte; random so no link compresses it.
    With a cache, a file made before is linked instead of made again."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # Never written through: the path may be a link to a cached file.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    if cache is not None and (found := cache.take(path, size, seed)) is not None:
        return found
    rng, digest, left = random.Random(seed), hashlib.sha256(), size
    with open(path, "wb") as f:
        while left:
            block = rng.randbytes(min(CHUNK, left))
            digest.update(block)
            f.write(block)
            left -= len(block)
    os.chmod(path, 0o644)
    made = Payload(path, size, digest.hexdigest())
    if cache is not None:
        cache.keep(made, seed)
    return made


def sha256_file(path: str) -> str | None:
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(CHUNK), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError:
        return None


@dataclass
class PayloadCache:
    """Payloads made by earlier cells of a matrix, in a directory on the
    results' filesystem. Every cell of one size and seed sends the same
    bytes, and making 100 MB of them (generating, hashing and writing them
    through the page cache, 40 cells' worth at once at a Global Hawk
    matrix's start) is work no cell needs twice. A cell takes a hard link
    to the cached file, whose name carries the digest taken as it was made,
    and hashes it again before using it (a fifth of making it): a damaged
    copy is replaced, never sent. The senders only read their payload;
    make_payload unlinks a path before writing one."""
    dir: str

    def _prefix(self, size: int, seed: int) -> str:
        return os.path.join(self.dir, f"payload-{STREAM}-{size}-{seed}-")

    def take(self, path: str, size: int, seed: int) -> Payload | None:
        """Link the cached payload to path, checked whole; None when there is none."""
        prefix = self._prefix(size, seed)
        for cached in glob.glob(glob.escape(prefix) + "*.bin"):
            want = cached[len(prefix):-len(".bin")]
            try:
                os.link(cached, path)
            except OSError:
                continue
            if os.path.getsize(path) == size and sha256_file(path) == want:
                return Payload(path, size, want)
            os.unlink(path)
            with contextlib.suppress(OSError):
                os.unlink(cached)
        return None

    def keep(self, made: Payload, seed: int) -> None:
        """Offer a payload just made to the cells after this one. Best
        effort: where no link can be made (another filesystem), each cell
        makes its own."""
        final = f"{self._prefix(made.size, seed)}{made.sha256}.bin"
        part = f"{final}.{os.getpid()}.part"
        try:
            os.makedirs(self.dir, exist_ok=True)
            os.link(made.path, part)
            os.replace(part, final)     # atomic: another cell sees all of it or nothing
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(part)
