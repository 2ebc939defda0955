#!/usr/bin/env bash
# Builds the pinned Pulumi engine from its published Go modules into a cache keyed by
# version, and reuses it on later runs:
#   pulumi CLI, pulumi-language-python (+ pulumi-language-python-exec),
#   pulumi-resource-command, pulumi-resource-kubernetes.
# The last line of stdout is a bin directory holding all of them:
#   PATH="$(bash tools/engine/build.sh | tail -1):$PATH"
# Build times go to stderr and to <cache>/engine/build-times.txt.
#
# Knobs (environment):
#   PULUMI_VERSION, PULUMI_COMMAND_VERSION, PULUMI_KUBERNETES_VERSION   release versions
#   PULUMI_LANGUAGE_PYTHON_MODVER, PULUMI_COMMAND_PROVIDER_MODVER,
#   PULUMI_KUBERNETES_PROVIDER_MODVER   module versions of the untagged modules; by default the
#       pseudo-version of the release tag's commit, worked out from the tag's origin
#   ENGINE_COMPONENTS   subset of "pulumi language-python command kubernetes"
#   ENGINE_GO_REPLACE   extra "old=new@version" replaces applied to every module built
#   GPU_CLUSTER_CACHE   cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster)
set -euo pipefail
# shellcheck source=tools/gobuild.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gobuild.sh"

PULUMI_VERSION="${PULUMI_VERSION:-3.272.0}"
COMMAND_VERSION="${PULUMI_COMMAND_VERSION:-1.2.1}"
KUBERNETES_VERSION="${PULUMI_KUBERNETES_VERSION:-4.34.2}"
COMPONENTS="${ENGINE_COMPONENTS:-pulumi language-python command kubernetes}"

CACHE_ROOT="${GPU_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster}"
ENGINE="$CACHE_ROOT/engine"
TIMES="$ENGINE/build-times.txt"


log() { echo "engine: $*" >&2; }
die() { log "$*"; exit 1; }
has() { case " $COMPONENTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

gobuild_go
gobuild_workdir "$ENGINE"

# fetch MODULE VERSION: download a module zip; print its extracted directory.
fetch() {
  local out dir
  out="$(go mod download -json "$1@$2" 2>/dev/null || true)"
  dir="$(json Dir <<<"$out" 2>/dev/null || true)"
  if [ -z "$dir" ]; then
    log "cannot download $1@$2 from the Go module proxy:"
    log "  $(json Error <<<"$out" 2>/dev/null || echo "$out")"
    return 1
  fi
  echo "$dir"
}

# tag_pseudo MAJOR MODULE@TAG...: pseudo-version vMAJOR.0.0-<time>-<hash12> of the commit the
# first resolvable tag points at (for modules in the same repository that have no tags).
tag_pseudo() {
  local major="$1" ref out hash time
  shift
  for ref in "$@"; do
    out="$(go list -m -json "$ref" 2>/dev/null || true)"
    hash="$(json Origin Hash <<<"$out" 2>/dev/null || true)"
    time="$(json Time <<<"$out" 2>/dev/null || true)"
    if [ -n "$hash" ] && [ -n "$time" ]; then
      time="$(date -u -d "$time" +%Y%m%d%H%M%S)"
      echo "v$major.0.0-$time-${hash:0:12}"
      return 0
    fi
  done
  log "cannot find the commit of any of: $* (the proxy gives no origin); set the module version by hand"
  return 1
}

# stage MODULE VERSION DEST: copy a downloaded module to DEST, writable.
stage() {
  local dir
  dir="$(fetch "$1" "$2")" || return 1
  mkdir -p "$(dirname "$3")"
  cp -r "$dir" "$3"
  chmod -R u+w "$3"
}

extra_replaces() {
  local r
  for r in ${ENGINE_GO_REPLACE:-}; do go mod edit -replace "$r"; done
}

# finish NAME VERSION TMPDIR STARTED: record the build time and move TMPDIR into place.
finish() {
  local secs=$(($(date +%s) - $4))
  log "built $1 $2 in ${secs}s"
  printf '%s\t%s %s\t%ss\t%s cores\tgo %s\n' "$(date -u +%FT%TZ)" "$1" "$2" "$secs" \
    "$(nproc)" "$(go env GOVERSION)" >>"$TIMES"
  chmod 0755 "$3"
  mv -T "$3" "$ENGINE/$1-$2"
}

# needs NAME VERSION: true when NAME-VERSION is not in the cache yet.
needs() {
  if [ -d "$ENGINE/$1-$2/bin" ]; then
    log "reusing $ENGINE/$1-$2"
    return 1
  fi
  log "building $1 $2 (takes minutes)"
}

SDK_VERSION_VAR="github.com/pulumi/pulumi/sdk/v3/go/common/version.Version"

# The pulumi repository laid out side by side (pkg/ and sdk/), as pkg's and the language
# host's relative replaces expect.
pulumi_tree() {
  local tree="$WORK/pulumi"
  if [ ! -d "$tree/sdk" ]; then
    stage github.com/pulumi/pulumi/sdk/v3 "v$PULUMI_VERSION" "$tree/sdk" || return 1
  fi
  if [ "${1:-}" = pkg ] && [ ! -d "$tree/pkg" ]; then
    stage github.com/pulumi/pulumi/pkg/v3 "v$PULUMI_VERSION" "$tree/pkg" || return 1
  fi
  echo "$tree"
}

build_pulumi() {
  local v="v$PULUMI_VERSION" tmp started tree
  needs pulumi "$v" || return 0
  started=$(date +%s)
  tree="$(pulumi_tree pkg)" || return 1
  tmp="$(mktemp -d "$ENGINE/.tmp.pulumi.XXXXXX")"
  (cd "$tree/pkg" && extra_replaces &&
    go build -o "$tmp/bin/pulumi" -ldflags "-s -w -X $SDK_VERSION_VAR=$v" ./cmd/pulumi) ||
    { rm -rf "$tmp"; return 1; }
  finish pulumi "$v" "$tmp" "$started"
}

build_language_python() {
  local v="v$PULUMI_VERSION" tmp started tree modver host
  needs pulumi-language-python "$v" || return 0
  started=$(date +%s)
  modver="${PULUMI_LANGUAGE_PYTHON_MODVER:-}"
  if [ -z "$modver" ]; then
    modver="$(tag_pseudo 3 "github.com/pulumi/pulumi/sdk/v3@$v" "github.com/pulumi/pulumi@$v+incompatible")" ||
      return 1
  fi
  log "pulumi-language-python module version $modver"
  tree="$(pulumi_tree pkg)" || return 1
  host="$tree/sdk/python/cmd/pulumi-language-python"
  stage github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3 "$modver" "$host" || return 1
  tmp="$(mktemp -d "$ENGINE/.tmp.pulumi-language-python.XXXXXX")"
  (cd "$host" && extra_replaces &&
    go build -o "$tmp/bin/pulumi-language-python" -ldflags "-s -w -X $SDK_VERSION_VAR=$v" .) ||
    { rm -rf "$tmp"; return 1; }
  # Without the executor next to it the host fails with "missing executor".
  install -m 0755 "$tree/sdk/python/cmd/pulumi-language-python-exec" "$tmp/bin/"
  finish pulumi-language-python "$v" "$tmp" "$started"
}

build_command() {
  local v="v$COMMAND_VERSION" tmp started modver dir
  needs pulumi-resource-command "$v" || return 0
  started=$(date +%s)
  # The provider module has no tags of its own: take the commit of the repository tag.
  modver="${PULUMI_COMMAND_PROVIDER_MODVER:-}"
  if [ -z "$modver" ]; then
    modver="$(tag_pseudo 0 "github.com/pulumi/pulumi-command@$v" "github.com/pulumi/pulumi-command/sdk@$v")" ||
      return 1
  fi
  log "pulumi-command provider module version $modver"
  dir="$WORK/pulumi-command/provider"
  stage github.com/pulumi/pulumi-command/provider "$modver" "$dir" || return 1
  tmp="$(mktemp -d "$ENGINE/.tmp.pulumi-resource-command.XXXXXX")"
  (cd "$dir" && extra_replaces &&
    go build -o "$tmp/bin/pulumi-resource-command" \
      -ldflags "-s -w -X github.com/pulumi/pulumi-command/provider/pkg/version.Version=$v" \
      ./cmd/pulumi-resource-command) ||
    { rm -rf "$tmp"; return 1; }
  finish pulumi-resource-command "$v" "$tmp" "$started"
}

build_kubernetes() {
  local v="v$KUBERNETES_VERSION" tmp started modver tree
  needs pulumi-resource-kubernetes "$v" || return 0
  started=$(date +%s)
  modver="${PULUMI_KUBERNETES_PROVIDER_MODVER:-}"
  if [ -z "$modver" ]; then
    modver="$(tag_pseudo 4 "github.com/pulumi/pulumi-kubernetes/sdk/v4@$v")" || return 1
  fi
  log "pulumi-kubernetes provider module version $modver"
  tree="$WORK/pulumi-kubernetes"
  stage github.com/pulumi/pulumi-kubernetes/sdk/v4 "$v" "$tree/sdk" || return 1
  stage github.com/pulumi/pulumi-kubernetes/provider/v4 "$modver" "$tree/provider" || return 1
  tmp="$(mktemp -d "$ENGINE/.tmp.pulumi-resource-kubernetes.XXXXXX")"
  # The command embeds schema-embed.json, which generate.go writes from schema.json.
  (cd "$tree/provider" && extra_replaces &&
    (cd cmd/pulumi-resource-kubernetes && VERSION="$KUBERNETES_VERSION" go run ./generate.go) &&
    go build -o "$tmp/bin/pulumi-resource-kubernetes" \
      -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$KUBERNETES_VERSION" \
      ./cmd/pulumi-resource-kubernetes) ||
    { rm -rf "$tmp"; return 1; }
  finish pulumi-resource-kubernetes "$v" "$tmp" "$started"
}

# A pulumi of exactly the pinned version already on PATH is used as it is (with the language
# host next to it, if there is one).
AMBIENT=""
if has pulumi && command -v pulumi >/dev/null 2>&1; then
  found="$(command -v pulumi)"
  if [ "$(PULUMI_SKIP_UPDATE_CHECK=true "$found" version 2>/dev/null || true)" = "v$PULUMI_VERSION" ]; then
    AMBIENT="$(cd "$(dirname "$found")" && pwd -P)"
    case "$AMBIENT" in "$(cd "$ENGINE" && pwd -P)"/*) AMBIENT="" ;; esac # ours: not ambient
  fi
fi
[ -n "$AMBIENT" ] && log "using pulumi v$PULUMI_VERSION from $AMBIENT"

failed=""
if has pulumi && [ -z "$AMBIENT" ]; then build_pulumi || failed="$failed pulumi"; fi
if has language-python && ! [ -x "$AMBIENT/pulumi-language-python" ]; then
  build_language_python || failed="$failed pulumi-language-python"
fi
if has command; then build_command || failed="$failed pulumi-resource-command"; fi
if has kubernetes; then build_kubernetes || failed="$failed pulumi-resource-kubernetes"; fi
[ -z "$failed" ] || die "not built:$failed (see above)"

# One directory for PATH. Hard links, so each binary also sits next to the others
# (the CLI looks for language hosts next to itself, the host for its executor).
key="pulumi-v$PULUMI_VERSION"
has command && key="$key+command-v$COMMAND_VERSION"
has kubernetes && key="$key+kubernetes-v$KUBERNETES_VERSION"
BIN="$ENGINE/bin-$key"
if [ ! -d "$BIN" ]; then
  tmp="$(mktemp -d "$ENGINE/.tmp.bin.XXXXXX")"
  chmod 0755 "$tmp"
  mkdir "$tmp/bin"
  link() { ln "$1" "$tmp/bin/" 2>/dev/null || cp -p "$1" "$tmp/bin/"; }
  if [ -n "$AMBIENT" ]; then
    ln -s "$AMBIENT/pulumi" "$tmp/bin/pulumi"
    for f in pulumi-language-python pulumi-language-python-exec; do
      [ -e "$AMBIENT/$f" ] && ln -s "$AMBIENT/$f" "$tmp/bin/$f"
    done
  elif has pulumi; then
    link "$ENGINE/pulumi-v$PULUMI_VERSION/bin/pulumi"
  fi
  if has language-python && [ ! -e "$tmp/bin/pulumi-language-python" ]; then
    for f in pulumi-language-python pulumi-language-python-exec; do
      link "$ENGINE/pulumi-language-python-v$PULUMI_VERSION/bin/$f"
    done
  fi
  has command && link "$ENGINE/pulumi-resource-command-v$COMMAND_VERSION/bin/pulumi-resource-command"
  has kubernetes && link "$ENGINE/pulumi-resource-kubernetes-v$KUBERNETES_VERSION/bin/pulumi-resource-kubernetes"
  mv -T "$tmp/bin" "$BIN"
  rmdir "$tmp"
fi
echo "$BIN"
