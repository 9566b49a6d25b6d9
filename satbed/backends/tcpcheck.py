"""The one TCP check that pep-check and the compose test bed share: a Python
server and client run inside nodes, moving a seeded payload and comparing its
SHA-256, so a PEP that splits the connection is seen to deliver it whole."""

from __future__ import annotations

import json
import subprocess

from satbed.core.proc import last_line

# Server on Client B: receive TRANSFER_BYTES (mode "count") or until EOF
# (mode "eof"), answer with the byte count and sha256 on one line, then wait
# for the client's close. Says whether its answer could be sent (sent is not
# received: a PEP may reset it on the way).
SERVER = r"""
import hashlib, socket, sys
port, mode, want = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port)); s.listen(1); s.settimeout(60)
print("listening", flush=True)
c, _ = s.accept(); c.settimeout(60); h = hashlib.sha256(); n = 0
while mode == "eof" or n < want:
    b = c.recv(min(65536, want - n) if mode == "count" else 65536)
    if not b: break
    h.update(b); n += len(b)
try:
    c.sendall(f"{n} {h.hexdigest()}\n".encode())
    while c.recv(65536): pass
    print("it sent its answer", flush=True)
except OSError as e:
    print(f"its answer failed: {e}", flush=True)
c.close()
"""


# Client on Client A: send the data; mode "close": read the answer line,
# then close; mode "half-close": shut its sending side first (FIN), then read
# until EOF. Prints a JSON line: the answer, what ended the reading, and
# "length sha256" of what it sent.
CLIENT = r"""
import hashlib, json, random, socket, sys
host, port, size, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
data = random.Random(7).randbytes(size)
c = socket.create_connection((host, port), timeout=60)
c.sendall(data)
if mode == "half-close": c.shutdown(socket.SHUT_WR)
reply, end = b"", "eof"
try:
    while mode == "half-close" or not reply.endswith(b"\n"):
        b = c.recv(4096)
        if not b: break
        reply += b
    else: end = "answered"
except OSError as e:
    end = type(e).__name__
c.close()
print(json.dumps({"reply": reply.decode(errors="replace").strip(), "end": end,
                  "sent": f"{len(data)} {hashlib.sha256(data).hexdigest()}"}))
"""


def client_answer(cp: subprocess.CompletedProcess) -> dict:
    """CLIENT's JSON line, or {"error": its last words} when it printed none."""
    try:
        got = json.loads(last_line(cp.stdout))
    except ValueError:
        got = None
    if not isinstance(got, dict):
        got = {"error": last_line(cp.stderr or cp.stdout) or f"client exit {cp.returncode}"}
    return got
