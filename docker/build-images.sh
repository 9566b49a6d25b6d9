#!/bin/sh
# Build satbed's container images (`make images`): base, host, emulator and one
# per PEP (pepsal and scps only when the lab supplied their binaries). An image
# is rebuilt only when something that goes into it changed: each is tagged
# satbed/<name>:<hash of its inputs> and satbed/<name>:latest. Where
# debian:bookworm-slim cannot be pulled, it is bootstrapped from the host's
# Debian mirror with mmdebstrap first.
#   docker/build-images.sh [--force] [NAME...]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
for b in satemu pepd saratoga satquic; do
	[ -x "bin/$b" ] || { echo "satbed: bin/$b missing: run \`make build\` first" >&2; exit 2; }
done
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec /usr/bin/python3 -m satbed.backends.docker images "$@"
