#!/usr/bin/env bash
# tools/vendor-training-operator.sh VERSION: copy the Kubeflow Training Operator's manifests/ at
# release VERSION into vendor/training-operator/ (with VERSION beside them), for
# `platform.trainingOperator.source: vendored`. They come from the operator's Go module, which
# the Go module proxy (or a site's mirror of it, GOPROXY) serves with the same files as the tag,
# so GitHub is never needed.
set -euo pipefail

version="${1:?usage: tools/vendor-training-operator.sh VERSION (e.g. v1.9.4)}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/vendor/training-operator"
log() { echo "vendor-training-operator: $*" >&2; }

if [ -f "$dest/VERSION" ] && [ "$(cat "$dest/VERSION")" = "$version" ]; then
  log "$dest already holds $version"
  exit 0
fi
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { log "go is not installed"; exit 1; }

# `go mod download` outside a module: the module's files in the module cache, read-only.
dir="$(cd / && GOFLAGS=-mod=mod GOWORK=off go mod download -json \
  "github.com/kubeflow/training-operator@$version" |
  python3 -c 'import json, sys
d = json.load(sys.stdin)
error = d.get("Error")
sys.exit("vendor-training-operator: " + error) if error else print(d["Dir"])')"
[ -d "$dir/manifests/overlays/standalone" ] || {
  log "github.com/kubeflow/training-operator@$version has no manifests/overlays/standalone"
  exit 1
}

tmp="$(mktemp -d "$root/vendor.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cp -R "$dir/manifests" "$tmp/manifests"
chmod -R u+w "$tmp"
echo "$version" > "$tmp/VERSION"
mkdir -p "$root/vendor"
rm -rf "$dest"
mv "$tmp" "$dest"
log "copied $version's manifests into $dest"
