#!/bin/sh
# Wire (or rewire) the containers of docker-compose.yml into the Global Hawk
# chain and check the path end to end: `satbed compose wire`, for a testbed
# brought up with plain docker-compose. Idempotent: links already right are
# left alone; a link whose other end was recreated is made again.
#
#   docker/wire.sh [PROJECT]      (default: $COMPOSE_PROJECT_NAME, else satbed)
#
#   clientA.eth0 = pepA.lan   pepA.wan = emulator.a   emulator.b = pepB.wan
#   pepB.lan = clientB.eth0   clientA 10.99.99.2/24   clientB 10.99.99.254/24
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
project=${1:-${COMPOSE_PROJECT_NAME:-satbed}}
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec /usr/bin/python3 -m satbed compose --project "$project" wire
