#!/usr/bin/env bash
# Builds actionlint (the GitHub Actions workflow checker) from its Go module into a cache keyed
# by version, and reuses it. The last line of stdout is the binary's path.
#   ACTIONLINT_VERSION   module version (v1.7.12)
#   GPU_CLUSTER_CACHE    cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster)
set -euo pipefail
log() { echo "actionlint: $*" >&2; }
# shellcheck source=tools/gobuild.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gobuild.sh"

VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
CACHE="${GPU_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster}/actionlint"
BIN="$CACHE/actionlint-$VERSION"

if [ ! -x "$BIN" ]; then
  gobuild_go
  gobuild_workdir "$CACHE"
  if [ ! -x "$BIN" ]; then
    started=$(date +%s)
    log "building actionlint $VERSION"
    GOBIN="$WORK/bin" go install "github.com/rhysd/actionlint/cmd/actionlint@$VERSION"
    mv "$WORK/bin/actionlint" "$BIN"
    log "built in $(($(date +%s) - started)) s"
  fi
fi
echo "$BIN"
