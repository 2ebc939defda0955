#!/usr/bin/env bash
# Builds node-problem-detector (kubernetes/node-problem-detector) from the release archive in
# <shared>/upstream into a cache keyed by version, and reuses it on later runs. The proxy refuses
# the module (k8s.io/node-problem-detector) at every version, so its source comes from
# node-problem-detector-v<V>.tar.gz (an unmodified `git archive` of the tag); its dependencies
# come from the Go module proxy. The last line of stdout is a bin directory holding
# node-problem-detector (log-counter needs journald; health-checker watches the kubelet and the
# container runtime, which the stack's monitors leave to the kubelet's own conditions):
#   PATH="$(bash tools/npd/build.sh | tail -1):$PATH"
# Build times go to stderr and to <cache>/npd/build-times.txt.
#
# Built as upstream's Makefile builds it for linux, less two things a GPU node here never uses:
# the journald log watcher (cgo and libsystemd; the stack's monitors read the kernel's kmsg) and
# the Stackdriver exporter (Google Cloud only), so CGO_ENABLED=0 and -tags
# disable_stackdriver_exporter. The version string is stamped as the Makefile stamps it
# (`node-problem-detector --version` prints it).
#
# Knobs (environment):
#   NPD_VERSION          release, default 1.36.0 (the archive node-problem-detector-v<V>.tar.gz)
#   GPU_CLUSTER_SHARED   the shared directory (default <repo>/../shared)
#   GPU_CLUSTER_CACHE    cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
# shellcheck source=tools/gobuild.sh
source "$HERE/../gobuild.sh"

VERSION="v${NPD_VERSION:-1.36.0}"
SHARED="${GPU_CLUSTER_SHARED:-$REPO/../shared}"
ARCHIVE="$SHARED/upstream/node-problem-detector-$VERSION.tar.gz"
CACHE_ROOT="${GPU_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster}"
NPD="$CACHE_ROOT/npd"
BIN="$NPD/node-problem-detector-$VERSION/bin"
TIMES="$NPD/build-times.txt"

log() { echo "npd: $*" >&2; }
die() { log "$*"; exit 1; }

gobuild_reuse "$BIN"  # built already: no archive needed either

[ -f "$ARCHIVE" ] ||
  die "$ARCHIVE is missing: the shared directory (../shared beside the repository, or GPU_CLUSTER_SHARED) must hold upstream/node-problem-detector-$VERSION.tar.gz"

gobuild_go
gobuild_workdir "$NPD"
gobuild_reuse "$BIN"  # a second caller waited on the lock while the first built

log "building node-problem-detector $VERSION (takes a minute or two)"
started=$(date +%s)
tar -xzf "$ARCHIVE" -C "$WORK"
src="$WORK/node-problem-detector-$VERSION"
[ -f "$src/go.mod" ] || die "$ARCHIVE does not hold node-problem-detector-$VERSION/go.mod"
tmp="$(mktemp -d "$NPD/.tmp.XXXXXX")"
(cd "$src" && go build -trimpath -tags disable_stackdriver_exporter \
  -o "$tmp/bin/node-problem-detector" \
  -ldflags "-s -w -X k8s.io/node-problem-detector/pkg/version.version=$VERSION" \
  ./cmd/nodeproblemdetector) || die "go build ./cmd/nodeproblemdetector failed (see above)"
secs=$(($(date +%s) - started))
log "built node-problem-detector $VERSION in ${secs}s"
printf '%s\tnode-problem-detector %s\t%ss\t%s cores\tgo %s\n' "$(date -u +%FT%TZ)" "$VERSION" \
  "$secs" "$(nproc)" "$(go env GOVERSION)" >>"$TIMES"
chmod 0755 "$tmp"
mv -T "$tmp" "$NPD/node-problem-detector-$VERSION"
log "node-problem-detector: $("$BIN/node-problem-detector" --version 2>&1 || true)"
echo "$BIN"
