#!/usr/bin/env bash
# Builds hostsim (tools/datacentre/hostsim, the simulated data centre's SSH server stand-in)
# into a cache keyed by the hash of its sources, and reuses it on later runs. The last line of
# stdout is the binary:
#   HOSTSIM="$(bash tools/datacentre/build.sh | tail -1)"
# Its one dependency, golang.org/x/crypto, comes from the Go module proxy (pinned by go.sum).
#
# Knobs (environment):
#   GPU_CLUSTER_CACHE    cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/hostsim"
# shellcheck source=tools/gobuild.sh
source "$HERE/../gobuild.sh"

CACHE_ROOT="${GPU_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster}"
DATACENTRE="$CACHE_ROOT/datacentre"
TIMES="$DATACENTRE/build-times.txt"

log() { echo "datacentre: $*" >&2; }
die() { log "$*"; exit 1; }

# The key: every file the build reads, by name and content, so an edit means a new binary.
key="$(cd "$SRC" && sha256sum go.mod go.sum ./*.go | sha256sum | cut -c1-12)"
BIN="$DATACENTRE/bin-hostsim-$key"

# Fast path: built already; no Go, no network, no lock.
if [ -x "$BIN/hostsim" ]; then
  log "reusing $BIN/hostsim"
  echo "$BIN/hostsim"
  exit 0
fi

gobuild_go
gobuild_workdir "$DATACENTRE"
# A second caller waited for the lock while the first built the same sources.
if [ -x "$BIN/hostsim" ]; then
  log "reusing $BIN/hostsim"
  echo "$BIN/hostsim"
  exit 0
fi

log "building hostsim $key"
started=$(date +%s)
# A copy of the sources: -mod=mod may write go.mod and go.sum, never in the checkout.
cp "$SRC"/go.mod "$SRC"/go.sum "$SRC"/*.go "$WORK/"
tmp="$(mktemp -d "$DATACENTRE/.tmp.hostsim.XXXXXX")"
(cd "$WORK" && go vet . && go build -trimpath -ldflags "-s -w" -o "$tmp/hostsim" .) ||
  { rm -rf "$tmp"; die "go build of hostsim failed (see above)"; }
secs=$(($(date +%s) - started))
log "built hostsim $key in ${secs}s"
printf '%s\thostsim %s\t%ss\t%s cores\tgo %s\n' "$(date -u +%FT%TZ)" "$key" "$secs" "$(nproc)" \
  "$(go env GOVERSION | sed 's/^go//')" >>"$TIMES"
chmod 0755 "$tmp"
mv -T "$tmp" "$BIN"
echo "$BIN/hostsim"
