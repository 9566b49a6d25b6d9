"""The Docker backend: testbed nodes as containers.

A container node stands in for a namespace node (satbed.backends.net.Sandbox):

- it starts with `--network none`, so its network namespace is empty until
  satbed wires veths into it exactly as for a namespace node (Link creates
  each veth from the host straight into the two nodes' namespaces);
- processes run in it as `docker exec` runs them: `runc exec` into the
  container, so they have the container's capabilities, seccomp profile,
  cgroup and pid namespace, and see the image's filesystem (its PEP, its
  servers). Unlike the docker CLI, runc forwards signals (SIGINT ends a
  capture cleanly) and returns the exit status; the caller's stdin, stdout
  and stderr are passed through as they are (pipes, files, a pty);
- satbed itself configures the node's network namespace from the host, as it
  wires the veths: the host's ip, ethtool, tc and sysctl through `nsenter -n`
  (NETNS_TOOLS). /proc/sys stays read-only to the node's own programs, and no
  program in it can write a host-wide sysctl;
- each node mounts of the host only what its own programs need, at the
  same paths (backends/mounts.py): a PEP node its RUN/pep/<node>/ alone,
  and no node the run records or another run's files or sockets;
- capabilities: Docker's default set plus NET_ADMIN and NET_RAW, never
  --privileged; the sysctls a PEP needs (pep/CONTRACT.md) are set with
  Docker's namespaced --sysctl. (satemu's SCHED_FIFO transmit threads are
  refused in a container: Docker gives its cgroups no real-time budget.)

A PEP node runs the PEP image and drives the PEP through that image's own
ENTRYPOINT verbs (start|stop|health|stats), so any image meeting the image
contract works, satbed's or a lab's.

Images are built from the Dockerfiles in the repository by build_images()
(`make images`, docker/build-images.sh), tagged with a hash of everything
that goes into them, so an image is rebuilt only when an input changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from satbed.backends import records
from satbed.backends.mounts import node_mounts
from satbed.core.errors import SatbedError, error_line, one_line_errors
from satbed.backends.net import Backend, Sandbox
from satbed.core.proc import REPO_ROOT, cli_reason, last_line
from satbed.core.proc import run as proc_run
from satbed.core.settings import Settings

REPO = "satbed"                  # image repository prefix: satbed/<name>
LABEL = "org.satbed"             # container and image label namespace
BOOTSTRAP_TAG = "debian:bookworm-slim"
DEBIAN_SOURCES = "/etc/apt/sources.list.d/debian.sources"
# Capabilities beyond Docker's default set (which already has CHOWN, SETUID,
# SETGID, SYS_CHROOT, NET_BIND_SERVICE, KILL... for sshd and vsftpd).
CAPS = ("NET_ADMIN", "NET_RAW")
# Where dockerd keeps runc's state of its containers (`runc --root`).
RUNC_ROOT = "/run/docker/runtime-runc/moby"
# Host devices a PEP container gets where the host has them: the SCPS
# gateway's TAP build opens /dev/net/tun.
PEP_DEVICES = ("/dev/net/tun",)


def pep_device_args() -> list[str]:
    return [a for d in PEP_DEVICES if os.path.exists(d) for a in ("--device", d)]


@dataclass(frozen=True)
class ImageSpec:
    """One image: its Dockerfile and the repository files its build needs
    (the staged build context keeps their relative paths, so the same
    Dockerfile also builds with the repository root as context)."""
    name: str
    dockerfile: str
    files: tuple[str, ...]
    parent: str | None = "base"             # another ImageSpec, or None for the Debian base
    requires: tuple[str, ...] = ()           # files a lab must supply; absent: skipped
    build_args: tuple[str, ...] = ()         # environment variables passed as --build-arg
    default: bool = True                     # built by `make images` (False, a Slurm node: only when named)

    @property
    def repo(self) -> str:
        return f"{REPO}/{self.name}"


# Files every PEP image takes from the repository.
PEP_FILES = ("pep/adapters", "docker/pep-entrypoint.sh", "docker/wait-ports.sh")

IMAGES: tuple[ImageSpec, ...] = (
    ImageSpec("base", "docker/base/Dockerfile", ("docker/base/Dockerfile", "docker/base/apt"), None),
    ImageSpec("host", "clients/Dockerfile", ("clients/Dockerfile", "bin/saratoga", "bin/satquic")),
    ImageSpec("emulator", "emulator/Dockerfile",
              ("emulator/Dockerfile", "bin/satemu", "docker/emulator-entrypoint.sh", "docker/wait-ports.sh")),
    ImageSpec("pep-none", "pep/images/none/Dockerfile", ("pep/images/none/Dockerfile", *PEP_FILES)),
    ImageSpec("pep-pepd", "pep/images/pepd/Dockerfile", ("pep/images/pepd/Dockerfile", *PEP_FILES, "bin/pepd")),
    ImageSpec("pep-pepsal", "pep/images/pepsal/Dockerfile",
              ("pep/images/pepsal/Dockerfile", *PEP_FILES, "pep/images/pepsal/pepsal"),
              requires=("pep/images/pepsal/pepsal",), build_args=("PEPSAL_DEBS",)),
    ImageSpec("pep-scps", "pep/images/scps/Dockerfile",
              ("pep/images/scps/Dockerfile", *PEP_FILES, "pep/images/scps/gateway"),
              requires=("pep/images/scps/gateway",), build_args=("SCPS_DEBS",)),
    ImageSpec("slurm", "docker/slurm/Dockerfile", ("docker/slurm/Dockerfile", "docker/slurm/node.sh"), default=False),
)


def spec(name: str) -> ImageSpec:
    for s in IMAGES:
        if s.name == name:
            return s
    raise SatbedError(f"unknown image {name!r} (known: {', '.join(s.name for s in IMAGES)})")


# ---------------------------------------------------------------- docker CLI

def docker(*args: str, timeout: float = 120, check: bool = True, input: str | None = None,
           env: dict | None = None) -> subprocess.CompletedProcess:
    try:
        cp = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                            input=input, env=env)
    except FileNotFoundError:
        raise SatbedError("docker is not installed (the Docker backend needs docker)") from None
    except subprocess.TimeoutExpired:
        raise SatbedError(f"docker {args[0]} timed out after {timeout:g}s") from None
    if check and cp.returncode != 0:
        raise SatbedError(f"docker {' '.join(args[:2])} failed: {cli_reason(cp.stderr or cp.stdout)}")
    return cp


def available() -> str | None:
    """None when the Docker daemon answers, else why not (for test skips)."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    try:
        cp = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                            text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "the Docker daemon does not answer"
    if cp.returncode != 0:
        return f"the Docker daemon is unavailable: {last_line(cp.stderr)}"
    return None


def image_id(ref: str) -> str | None:
    cp = docker("image", "inspect", "--format", "{{.Id}}", ref, check=False, timeout=30)
    return cp.stdout.strip() if cp.returncode == 0 else None


def image_labels(ref: str) -> dict[str, str]:
    cp = docker("image", "inspect", "--format", "{{json .Config.Labels}}", ref, check=False, timeout=30)
    if cp.returncode != 0:
        return {}
    return json.loads(cp.stdout or "null") or {}


# ---------------------------------------------------------------- images

def _host_apt(dest: str) -> None:
    """The host's Debian mirror and apt settings, when the host runs bookworm:
    images then install from the same mirror the host does (a lab mirror, a
    frozen snapshot). Elsewhere the image keeps its own sources."""
    os.makedirs(os.path.join(dest, "sources.list.d"), exist_ok=True)
    os.makedirs(os.path.join(dest, "apt.conf.d"), exist_ok=True)
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            bookworm = "VERSION_CODENAME=bookworm" in f.read()
    except OSError:
        bookworm = False
    if not bookworm or not os.path.exists(DEBIAN_SOURCES):
        return
    shutil.copy(DEBIAN_SOURCES, os.path.join(dest, "sources.list.d", "debian.sources"))
    # Only the settings that decide whether the mirror's indexes are accepted.
    cp = subprocess.run(["apt-config", "dump"], capture_output=True, text=True, timeout=10)
    keep = [ln for ln in cp.stdout.splitlines()
            if ln.startswith(("Acquire::Check-Valid-Until ", "Acquire::Check-Date "))]
    if keep:
        with open(os.path.join(dest, "apt.conf.d", "99satbed-host"), "w", encoding="utf-8") as f:
            f.write("\n".join(keep) + "\n")


def stage(s: ImageSpec, dest: str) -> None:
    """Copy the files an image needs into a fresh build context."""
    for rel in s.files:
        src = os.path.join(REPO_ROOT, rel)
        dst = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.isdir(src):
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*_test.go"))
        elif os.path.exists(src):
            shutil.copy2(src, dst)
        else:
            hint = " (run `make build`)" if rel.startswith("bin/") else ""
            raise SatbedError(f"image {s.repo}: missing {rel}{hint}")
    if s.name == "base":
        _host_apt(os.path.join(dest, "docker", "base", "apt"))


def context_hash(ctx: str, parent_id: str, build_args: dict[str, str]) -> str:
    """Hash of everything that decides an image: every staged file (path,
    mode, contents), the parent image's id and the build arguments."""
    h = hashlib.sha256()
    h.update(f"parent {parent_id}\n".encode())
    for k in sorted(build_args):
        h.update(f"arg {k}={build_args[k]}\n".encode())
    for root, dirs, files in os.walk(ctx):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, ctx)
            h.update(f"file {rel} {os.stat(path).st_mode & 0o777:o}\n".encode())
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()[:16]


def bootstrap_debian(log=print) -> str:
    """debian:bookworm-slim from the registry, or else built locally: a
    minbase bookworm from the host's mirror with mmdebstrap, imported."""
    if image_id(BOOTSTRAP_TAG):
        return BOOTSTRAP_TAG
    log(f"{BOOTSTRAP_TAG}: pulling")
    if docker("pull", BOOTSTRAP_TAG, check=False, timeout=300).returncode == 0:
        return BOOTSTRAP_TAG
    if shutil.which("mmdebstrap") is None:
        raise SatbedError(f"cannot pull {BOOTSTRAP_TAG} and mmdebstrap is not installed to build it "
                          "(apt-get install mmdebstrap)")
    mirror = host_mirror()
    log(f"{BOOTSTRAP_TAG}: no registry; bootstrapping it with mmdebstrap from {mirror}")
    lines = [f"deb {mirror} bookworm main", f"deb {mirror} bookworm-updates main"]
    security = host_mirror(security=True)
    if security:
        lines.append(f"deb {security} bookworm-security main")
    with tempfile.TemporaryDirectory(prefix="satbed-debian-") as tmp:
        tar = os.path.join(tmp, "rootfs.tar")
        cp = subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase", "--format=tar", "bookworm", tar,
                             *lines], capture_output=True, text=True, timeout=1800)
        if cp.returncode != 0:
            raise SatbedError(f"mmdebstrap failed: {last_line(cp.stderr)}")
        with open(tar, "rb") as f:
            imp = subprocess.run(["docker", "import", "--change", 'CMD ["bash"]', "-", BOOTSTRAP_TAG],
                                 stdin=f, capture_output=True, text=True, timeout=600)
        if imp.returncode != 0:
            raise SatbedError(f"docker import failed: {last_line(imp.stderr)}")
    return BOOTSTRAP_TAG


def host_mirror(security: bool = False) -> str | None:
    """The Debian mirror the host's apt uses (deb822 sources first)."""
    fallback = None if security else "http://deb.debian.org/debian"
    try:
        with open(DEBIAN_SOURCES, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return fallback
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            key, _, value = line.partition(":")
            if line and not line.startswith(("#", " ")):
                fields[key.strip()] = value.strip()
        suites = fields.get("Suites", "").split()
        if not fields.get("URIs"):
            continue
        if security == ("bookworm-security" in suites):
            return fields["URIs"].split()[0]
    return fallback


def build_images(names: list[str] | None = None, log=print, force: bool = False) -> dict[str, str]:
    """Build the images (all by default) whose inputs changed; returns
    name -> tag (satbed/<name>:<hash>). Also tags each :latest. Images whose
    lab-supplied binary is absent are skipped with a note."""
    wanted = [spec(n) for n in names] if names else [s for s in IMAGES if s.default]
    # Parents first, and a requested child pulls in its parent.
    order: list[ImageSpec] = []

    def add(s: ImageSpec) -> None:
        if s.parent:
            add(spec(s.parent))
        if s not in order:
            order.append(s)
    for s in wanted:
        add(s)
    built: dict[str, str] = {}
    debian = None
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}   # the classic builder: no buildx needed
    for s in order:
        missing = [r for r in s.requires if not os.path.exists(os.path.join(REPO_ROOT, r))]
        if missing:
            log(f"{s.repo}: skipped, no {', '.join(missing)} (a lab supplies it: see docs/peps/pepsal-scps.md)")
            continue
        if s.parent:
            if s.parent not in built:
                raise SatbedError(f"image {s.repo}: parent {REPO}/{s.parent} was not built")
            parent_ref = built[s.parent]
        else:
            parent_ref = debian = debian or bootstrap_debian(log)
        parent_id = image_id(parent_ref) or ""
        args = {k: os.environ.get(k, "") for k in s.build_args}
        with tempfile.TemporaryDirectory(prefix=f"satbed-{s.name}-") as ctx:
            stage(s, ctx)
            digest = context_hash(ctx, parent_id, args)
            tag = f"{s.repo}:{digest}"
            if image_id(tag) and not force:
                log(f"{tag}: current")
            else:
                log(f"{tag}: building")
                started = time.monotonic()
                cmd = ["build", "-q", "-f", os.path.join(ctx, s.dockerfile), "-t", tag,
                       "--label", f"{LABEL}.hash={digest}",
                       "--build-arg", f"{'DEBIAN' if s.parent is None else 'BASE'}={parent_ref}"]
                for k, v in args.items():
                    cmd += ["--build-arg", f"{k}={v}"]
                cp = docker(*cmd, ctx, timeout=3600, check=False, env=env)
                if cp.returncode != 0:
                    raise SatbedError(f"building {tag} failed: {cli_reason(cp.stderr or cp.stdout)}")
                log(f"{tag}: built in {time.monotonic() - started:.0f} s")
        docker("tag", tag, f"{s.repo}:latest")
        built[s.name] = tag
    return built


def current_tag(name: str) -> str:
    """The image a node of this kind runs: satbed/<name>:latest, as the last
    `make images` tagged it."""
    ref = f"{spec(name).repo}:latest"
    if image_id(ref) is None:
        s = spec(name)
        if s.requires:
            raise SatbedError(f"no image {ref}: place the lab's binary at {s.requires[0]} "
                              "and run `make images` (docs/peps/pepsal-scps.md)")
        raise SatbedError(f"no image {ref}: run `make images`")
    return ref


def is_image_ref(pep: str) -> bool:
    """A PEP named by image reference (lab/pep:1, satbed/pep-pepd:latest,
    name@sha256:...) rather than by one of the repository's adapters."""
    return any(c in pep for c in "/:@")


def pep_image(pep: str) -> str:
    """The image a PEP node runs: satbed's own for an adapter name (`pepd`:
    satbed/pep-pepd:latest), else the reference as given. It must exist here
    and declare the image contract (org.satbed.contract=1)."""
    if not is_image_ref(pep):
        return current_tag(f"pep-{pep}")
    if image_id(pep) is None:
        raise SatbedError(f"no image {pep} on this Docker daemon (build or pull it first; "
                          "satbed's own: `make images`)")
    labels = image_labels(pep)
    if labels.get("org.satbed.contract") != "1":
        raise SatbedError(f"{pep} does not declare the PEP image contract (label org.satbed.contract=1; "
                          f"see pep/CONTRACT.md and `satbed pep-check {pep}`)")
    return pep


def entrypoint(ref: str) -> list[str]:
    """The image's ENTRYPOINT: a PEP image's verbs (run|start|stop|health|stats)."""
    cp = docker("image", "inspect", "--format", "{{json .Config.Entrypoint}}", ref, timeout=30)
    ep = json.loads(cp.stdout or "null")
    if not ep:
        raise SatbedError(f"{ref} has no ENTRYPOINT (the PEP image contract needs one)")
    return ep


# The namespaced sysctls a PEP's interception needs (pep/CONTRACT.md), set
# when the container is created: its programs cannot write /proc/sys.
PEP_SYSCTLS = {"net.ipv4.ip_forward": "1", "net.ipv4.conf.all.send_redirects": "0",
               "net.ipv4.conf.default.send_redirects": "0"}


def node_sysctls(role: str) -> dict[str, str]:
    """Docker --sysctl settings for a node: no IPv6 anywhere (no stray
    link-local traffic in captures); bridged frames kept away from iptables
    where br_netfilter is loaded; a PEP's interception sysctls."""
    out = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
    if role != "host" and os.path.exists("/proc/sys/net/bridge/bridge-nf-call-iptables"):
        out["net.bridge.bridge-nf-call-iptables"] = "0"
    if role == "pep":
        out.update(PEP_SYSCTLS)
    return out


def runc_root() -> str:
    return Settings.from_environ().runc_root or RUNC_ROOT


def describe_images(refs: list[str]) -> dict:
    """What environment.json records: each image's id (its content digest),
    its input hash label and creation time."""
    out = {}
    for ref in sorted(set(refs)):
        cp = docker("image", "inspect", "--format",
                    "{{json .Id}} {{json .Created}} {{json .Config.Labels}} {{json .RepoDigests}}", ref,
                    check=False, timeout=30)
        if cp.returncode != 0:
            out[ref] = {"error": last_line(cp.stderr)}
            continue
        dec = json.JSONDecoder()
        text, vals = cp.stdout.strip(), []
        while text:
            v, end = dec.raw_decode(text)
            vals.append(v)
            text = text[end:].strip()
        iid, created, labels, digests = vals
        out[ref] = {"id": iid, "created": created, "input_hash": (labels or {}).get(f"{LABEL}.hash"),
                    "repo_digests": digests or []}
    return out


def describe_testbed(tb) -> dict:
    """environment.json's `testbed`: the backend and, for containers, each
    node's container and image, and every image's id and input hash."""
    nodes = {name: {"container": node.sandbox.name, "image": node.sandbox.image}
             for name, node in tb.nodes.items() if isinstance(node.sandbox, DockerSandbox)}
    server = docker("version", "--format", "{{.Server.Version}}", check=False, timeout=30).stdout.strip()
    return {"backend": "docker", "docker_server": server, "nodes": nodes,
            "images": describe_images([n["image"] for n in nodes.values()])}


# ---------------------------------------------------------------- nodes

@dataclass(frozen=True)
class DockerBackend(Backend):
    """Testbed nodes as containers, bound to one run: which image each kind of
    node runs and what to bind-mount. Handed to the Testbed like the
    namespace backend; each node's container is recorded in the run record
    before it exists, for `satbed clean`."""

    name = "docker"
    images: dict[str, str] = field(default_factory=dict)     # role, or node:NAME -> image reference
    mounts: tuple[str, ...] = ()            # the end hosts' (mounts.node_mounts)
    run_dir: str = ""
    link_files: tuple[str, ...] = ()        # link profiles satemu reads

    @classmethod
    def for_run(cls, run_dir: str, pep: str | None = None, pep_nodes: dict[str, str] | None = None,
                mounts: tuple[str, ...] = (), link_files: tuple[str, ...] = ()) -> "DockerBackend":
        """pep: the PEP image every PEP node runs; pep_nodes: PEP node -> its own."""
        images = {"pep": pep_image(pep)} if pep else {}
        images.update({f"node:{n}": pep_image(p) for n, p in (pep_nodes or {}).items()})
        return cls(images, tuple(os.path.abspath(m) for m in (run_dir, *mounts, *extra_mounts())),
                   os.path.abspath(run_dir) if run_dir else "", tuple(os.path.abspath(f) for f in link_files))

    def image_for(self, role: str, node: str = "") -> str:
        """A node's own image (a PEP node runs its PEP's), else its role's."""
        ref = self.images.get(f"node:{node}") or self.images.get(role)
        if ref:
            return ref
        default = {"host": "host", "emulator": "emulator", "pep": "pep-none", "bridge": "base", "router": "base"}
        return current_tag(default.get(role, "base"))

    def sandbox(self, full_name: str, role: str, record: records.RunRecord) -> "DockerSandbox":
        return DockerSandbox(full_name, role, self, record)

    def describe(self, tb) -> dict:
        return describe_testbed(tb)


def extra_mounts() -> list[str]:
    """SATBED_DOCKER_MOUNTS: more host directories a lab's clients need,
    colon-separated, mounted read-write at the same paths (end hosts only)."""
    return list(Settings.from_environ().docker_mounts)


# Tools satbed runs to configure or inspect a node's network namespace.
NETNS_TOOLS = ("ip", "ethtool", "tc", "sysctl")
# runc exec takes the caller's stdin, stdout and stderr as fds 3-5 and the
# program gets them back as 0-2 (runc's own stdio would be pipes it copies,
# which a pty or an open-ended daemon does not survive).
_OUTER = 'exec "$0" "$@" 3<&0 4>&1 5>&2 </dev/null >/dev/null'
_INNER = 'exec "$0" "$@" <&3 >&4 2>&5 3<&- 4>&- 5>&-'


class DockerSandbox(Sandbox):
    """A testbed node in a container (see the module docstring)."""

    def __init__(self, full_name: str, role: str, opts: DockerBackend, record: records.RunRecord):
        self.name, self.role = full_name, role
        prefix, _, node = full_name.partition("-")
        self.prefix = prefix
        self.image = opts.image_for(role, node)
        # A PEP node drives its PEP through the image's own verbs.
        self.pep_entrypoint = entrypoint(self.image) if role == "pep" else None
        # Recorded before it exists, so a run killed mid-start is cleaned too.
        record.containers.append(full_name)
        record.save()
        args = ["run", "-d", "--name", full_name, "--hostname", node or full_name, "--network", "none",
                "--label", f"{LABEL}.prefix={prefix}", "--label", f"{LABEL}.node={node}",
                "--label", f"{LABEL}.role={role}", "--label", f"{LABEL}.owner={os.getpid()}"]
        for cap in CAPS:
            args += ["--cap-add", cap]
        for key, value in node_sysctls(role).items():
            args += ["--sysctl", f"{key}={value}"]
        if role == "pep":
            args += pep_device_args()
        for m in node_mounts(role, prefix, node, opts.mounts, opts.run_dir, opts.link_files):
            args += m.args()
        args += ["--entrypoint", "sleep", self.image, "infinity"]
        docker(*args, timeout=120)
        self.pid, self.id = self._wait_running()
        if not os.path.isfile(os.path.join(runc_root(), self.id, "state.json")):
            self.stop()
            raise SatbedError(f"container {full_name}: no runc state under {runc_root()} "
                              "(dockerd with another runtime root? set SATBED_RUNC_ROOT)")

    def _wait_running(self) -> tuple[int, str]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            cp = docker("inspect", "--format", "{{.State.Pid}} {{.State.Status}} {{.Id}}", self.name, check=False)
            pid, status, cid = (cp.stdout.split() + ["", "", ""])[:3]
            if cp.returncode == 0 and status == "running" and pid.isdigit() and int(pid) > 0:
                return int(pid), cid
            if status in ("exited", "dead"):
                logs = docker("logs", "--tail", "5", self.name, check=False)
                self.stop()
                raise SatbedError(f"container {self.name} exited: {last_line(logs.stderr or logs.stdout)}")
            time.sleep(0.1)
        self.stop()
        raise SatbedError(f"container {self.name} did not start in 30 s")

    def popen(self, args: list[str], **kwargs) -> subprocess.Popen:
        if args and os.path.basename(args[0]) in NETNS_TOOLS:
            # satbed configuring the node's network namespace (addresses,
            # offloads, qdiscs), as the wiring does: the host's tool, from
            # the host, in that namespace only. A runc exec per command made a
            # run 15 s longer; no program of the image runs this way.
            kwargs["env"] = records.tagged_env(self.prefix, kwargs.get("env"))
            return subprocess.Popen(["nsenter", "-t", str(self.pid), "-n", "--", *args], **kwargs)
        # Relative paths mean what they mean to the caller when its working
        # directory exists inside (it does whenever it is under a mount).
        cwd = kwargs.pop("cwd", None) or os.getcwd()
        wd = cwd if os.path.isdir(f"/proc/{self.pid}/root{cwd}") else "/"
        env = {**(kwargs.pop("env", None) or {}), records.RUN_ENV: self.prefix}
        cmd = ["runc", "--root", runc_root(), "exec", "--cwd", wd, "--preserve-fds", "3"]
        for k, v in env.items():
            cmd += ["--env", f"{k}={v}"]
        return subprocess.Popen(["/bin/sh", "-c", _OUTER, *cmd, self.id, "/bin/sh", "-c", _INNER, *args],
                                **kwargs)

    def admin(self, node, args: list[str]) -> subprocess.CompletedProcess:
        # satbed's own configuration of the node's network namespace, from
        # the host: the node's programs cannot write its /proc/sys.
        return proc_run(["nsenter", "-t", str(self.pid), "-n", "--", *args], check=False)

    def stop(self) -> None:
        docker("rm", "-f", self.name, check=False, timeout=60)



def containers(prefix: str | None = None) -> list[str]:
    """Names of satbed's containers (of one run, given its prefix)."""
    flt = f"label={LABEL}.prefix" + (f"={prefix}" if prefix else "")
    cp = docker("ps", "-a", "--filter", flt, "--format", "{{.Names}}", check=False, timeout=30)
    return cp.stdout.split()


def clean_orphans() -> list[str]:
    """Remove satbed's containers whose run has no live record (killed before its record named them)."""
    if available() is not None:
        return []
    # Containers before records: a run saves its record before it makes a container.
    cp = docker("ps", "-a", "--filter", f"label={LABEL}.prefix",
                "--format", f'{{{{.Names}}}} {{{{.Label "{LABEL}.prefix"}}}}', check=False, timeout=30)
    live = {r.prefix for r in records.load_all() if r.owner_alive()}
    gone = []
    for line in cp.stdout.splitlines():
        name, _, prefix = line.partition(" ")
        if prefix and prefix not in live:
            docker("rm", "-f", name, check=False, timeout=60)
            gone.append(name)
    return gone


def main(argv: list[str]) -> int:
    """python3 -m satbed.backends.docker images [NAME...] [--force]"""
    if not argv or argv[0] != "images":
        print("usage: python3 -m satbed.backends.docker images [--force] [NAME...]", file=sys.stderr)
        return 2
    force = "--force" in argv
    names = [a for a in argv[1:] if a != "--force"]
    reason = available()
    if reason:
        return error_line(SatbedError(reason))

    def body() -> int:
        started = time.monotonic()
        built = build_images(names or None, force=force)
        print(f"images ready in {time.monotonic() - started:.0f} s: {', '.join(built.values())}")
        return 0
    return one_line_errors(body)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
