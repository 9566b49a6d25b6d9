# satbed: `make experiment` and `make test` on a fresh Debian/Ubuntu machine, as root.
# Each target installs what is missing first, so a green run never depends on
# something installed by hand.

SHELL := /bin/bash
PY := /usr/bin/python3
export PATH := /usr/local/go/bin:$(PATH)
export PYTHONPATH := $(CURDIR)
export GOFLAGS := -buildvcs=false

# Debian packages satbed uses (control plane, testbed, clients, analysis; brctl and
# ifconfig for the SCPS gateway and its CI stand-in; Ansible for the physical test bed;
# MkDocs for the documentation).
DEBS := python3 python3-yaml python3-pyroute2 python3-numpy python3-matplotlib python3-pytest python3-hypothesis python3-sgp4 mininet \
        iproute2 iputils-ping ethtool nftables iptables tcpdump tcptrace nuttcp iperf3 \
        openssh-server openssh-client rsync vsftpd ncftp lighttpd wget telnetd telnet socat \
        procps psmisc git ca-certificates mmdebstrap \
        ansible-core ansible-lint \
        bridge-utils net-tools \
        mkdocs mkdocs-material \
        python3-pytest-xdist python3-pytest-timeout tshark slurm-client

GO_BINARIES := satemu pepd saratoga trafficgen satquic
BIN := $(CURDIR)/bin

.PHONY: all deps go build images experiment check check-go check-py services test test-go test-py test-docs test-ansible bench clean lint

all: build

deps: .deps.stamp
.deps.stamp: Makefile
	@missing=$$(for p in $(DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@# Docker: the engine where none is installed (Docker CE, where present, is kept).
	@command -v docker >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose >/dev/null
	@$(MAKE) --no-print-directory go
	@touch $@

# Go: use the one on PATH when new enough; else Debian's golang-go, which
# fetches the toolchain go.mod asks for through the module proxy.
go:
	@if ! command -v go >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null; \
	fi
	@go version

build: deps
	@mkdir -p $(BIN)
	go build -o $(BIN)/satemu ./emulator/cmd/satemu
	go build -o $(BIN)/pepd ./pep/cmd/pepd
	go build -o $(BIN)/saratoga ./clients/saratoga/cmd/saratoga
	go build -o $(BIN)/trafficgen ./clients/trafficgen/cmd/trafficgen
	go build -o $(BIN)/satquic ./clients/quic/cmd/satquic
	@install -m 0755 scripts/satbed /usr/local/bin/satbed.tmp && \
	  sed -i 's#^here=.*#here=$(CURDIR)#' /usr/local/bin/satbed.tmp && mv /usr/local/bin/satbed.tmp /usr/local/bin/satbed
	@echo "built: $(GO_BINARIES) in bin/, satbed on PATH"

# Container images (PEPs, emulator, end hosts); bootstraps debian:bookworm-slim
# with mmdebstrap where no registry can be reached.
images: build
	docker/build-images.sh

# The default experiment: experiments/quick.yaml on Mininet namespaces, the
# userspace emulator (tc where the kernel has netem) and pepd; resumable.
# REPETITIONS=N runs each combination N times instead of the file's 3 (README);
# the cells are the same ones, so a later run without it adds only the rest.
# JOBS=N runs N cells at once instead of as many as the cores carry (by each
# cell's modelled cost, held back while the machine is busy with other work).
REPETITIONS ?=
JOBS ?=
experiment: build
	@# The report is written whatever the cells came to; make fails when a cell did.
	@$(PY) -m satbed matrix experiments/quick.yaml --out runs/quick$(if $(REPETITIONS), --repetitions $(REPETITIONS))$(if $(JOBS), --jobs $(JOBS)); rc=$$?; \
	  [ $$rc -eq 130 ] && exit $$rc; \
	  echo "report: $$($(PY) -m satbed report runs/quick)"; exit $$rc

# Two tiers (README "Tests"). check: no testbed, no Docker, no matrix; minutes.
# test: everything once, testbeds shared per module, WORKERS xdist workers, the
# longest units first (--dist loadgroup); `serial` tests (satbed clean) take turns.
PYTEST := $(PY) -m pytest -q -rfEs --durations=10
# xdist workers for `make test`. Four: the tests spend much of a run waiting
# (satellite delays, time limits, container starts, Ansible over SSH), so three
# left the cores 72 % busy and took 15 min 33 s (2026-11-29 04:27 UTC, a fresh
# clone, images warm); four, 82 % busy, took 14 min 23 s (04:44 UTC, the same
# revision; docs/guide/tests.md).
WORKERS ?= 4

# The Go tests (-short: seconds, mostly waiting) run beside pytest, which
# keeps both cores busy; their output follows pytest's.
check: build
	go vet ./...
	@log=$$(mktemp); go test -short -count=1 ./... >$$log 2>&1 & gopid=$$!; \
	  $(PYTEST) -n 2 --timeout 120 -m "not testbed and not docker and not slow" tests; pyrc=$$?; \
	  wait $$gopid; gorc=$$?; echo "--- go test -short -count=1 ./..."; cat $$log; rm -f $$log; \
	  [ $$pyrc -eq 0 ] && [ $$gorc -eq 0 ]

check-go:
	go vet ./...
	go test -short -count=1 ./...

check-py:
	$(PYTEST) -n 2 --timeout 120 -m "not testbed and not docker and not slow" tests

# The Go tests mostly wait on timers and namespaces (pep/itest: minutes at little
# CPU), so they run beside pytest; their output follows pytest's.
test: build services
	go vet ./...
	@log=$$(mktemp); go test -count=1 ./... >$$log 2>&1 & gopid=$$!; \
	  $(PYTEST) -n $(WORKERS) --dist loadgroup --timeout 600 tests; pyrc=$$?; \
	  wait $$gopid; gorc=$$?; echo "--- go test -count=1 ./..."; cat $$log; rm -f $$log; \
	  [ $$pyrc -eq 0 ] && [ $$gorc -eq 0 ]
	@$(MAKE) --no-print-directory test-docs

test-go:
	go vet ./...
	go test -count=1 ./...

test-py: services
	$(PYTEST) -n $(WORKERS) --dist loadgroup --timeout 600 tests

# What the tests need running: the Docker daemon (started where it is not).
services: deps
	@docker info >/dev/null 2>&1 || { \
	  (command -v systemctl >/dev/null && systemctl start docker) >/dev/null 2>&1 || \
	  (nohup dockerd >/var/log/satbed-dockerd.log 2>&1 &); \
	  for i in $$(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done; }
	@docker info >/dev/null 2>&1 || { echo "the Docker daemon did not start (/var/log/satbed-dockerd.log)"; exit 1; }
	@command -v tshark >/dev/null || { echo "tshark missing"; exit 1; }

# The documentation site builds without a warning (broken links, pages missing
# from the nav); the site goes to a scratch directory.
test-docs: deps
	@d=$$(mktemp -d) && $(PY) -m mkdocs build --strict --quiet -f mkdocs.yml -d $$d; rc=$$?; rm -rf $$d; \
	  [ $$rc -eq 0 ] && echo "docs: mkdocs build --strict ok"; exit $$rc

# The physical test bed's playbooks on five containers standing in for the
# machines, applied twice (changed=0 the second time), and a run across them
# (also part of test-py).
test-ansible: build
	$(PY) -m pytest -q -s tests/test_ansible.py

lint:
	gofmt -l . | tee /dev/stderr | (! read)
	go vet ./...

clean:
	-$(PY) -m satbed clean
	rm -rf $(BIN) .deps.stamp
