#!/usr/bin/env bash
# Builds the real Pulumi engine the stack runs under into a cache keyed by version, and reuses it
# on later runs. Each binary reports the version it really is (nothing is relabelled):
#   pulumi 3.274.1            github.com/pulumi/pulumi/pkg/v3 + sdk/v3 @v3.274.1 from the Go module
#                             proxy, side by side as pkg/ and sdk/ (pkg's go.mod replaces sdk with
#                             ../sdk), `go build ./cmd/pulumi` in pkg/. The newest CLI the proxy
#                             serves (v3.274.1, v3.274.0, v3.260.0, v3.259.0; not v3.270-v3.273), at
#                             or above the Python SDK in requirements.txt (3.272.0).
#   pulumi-language-python 3.259.0, pulumi-language-python-exec
#                             from <shared>/upstream/pulumi-language-python-v3.259.0.tar.gz (the
#                             proxy refuses the host's module at every version); the tag's relative
#                             replaces onto pkg and sdk are dropped for pkg/v3 and sdk/v3 v3.259.0
#                             from the proxy. The CLI finds it next to itself.
#   pulumi-resource-command 1.2.1
#                             from <shared>/upstream/pulumi-command-v1.2.1-provider.tar.gz (the proxy
#                             refuses github.com/pulumi/pulumi-command/provider at every version).
#   pulumi-resource-kubernetes 4.25.0
#                             github.com/pulumi/pulumi-kubernetes/provider/v4 at
#                             v4.0.0-20260115033456-f47bc2d6f199, the v4.25.0 release commit and the
#                             only provider/v4 version the proxy serves, with sdk/v4@v4.25.0 as the
#                             ../sdk its go.mod replaces; `go run generate.go` writes the embedded
#                             schema first. Its zip must also match the h1: sum pinned below (the
#                             checksum database answers for it now; it did not on 2026-11-24).
#                             requirements.in pins pulumi-kubernetes==4.25.0 to match.
# The last line of stdout is a bin directory holding all of them (hard links):
#   PATH="$(bash tools/engine/build.sh | tail -1):$PATH"
# or `source tools/engine/env.sh`, which also sets what every run of this engine needs
# (PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true, PULUMI_SKIP_UPDATE_CHECK=true).
# Build times (and how much each build downloaded into GOMODCACHE: 0 MiB means warm) go to
# stderr and to <cache>/engine/build-times.txt. Measured 2026-11-26 on 2 shared cores (go1.26.8;
# tools/engine/README.md): pulumi 759 s from a cold module cache / 292 s warm, language host
# 98 / 76 s, command 88 / 86 s, kubernetes 665 / 1033 s (load 3-10 from other builds either
# way); about 26 min in all. A run that finds its bin directory: 0.01 s.
# What a build needs: Go (1.26 here), the Go module proxy, and the two archives in
# <shared>/upstream, where <shared> is ../shared beside the repository (GPU_CLUSTER_SHARED moves
# it). Nothing else is downloaded; a run that finds its bin directory needs neither.
#
# Knobs (environment):
#   PULUMI_VERSION            CLI release (pkg/v3 and sdk/v3 module version), default 3.274.1
#   PULUMI_LANGUAGE_PYTHON_VERSION, PULUMI_COMMAND_VERSION   versions of the archives
#                             pulumi-language-python-v<V>.tar.gz, pulumi-command-v<V>-provider.tar.gz
#   PULUMI_KUBERNETES_VERSION with PULUMI_KUBERNETES_PROVIDER_MODVER (the provider/v4 module
#                             version of that release's commit; both or neither)
#   ENGINE_COMPONENTS         subset of "pulumi language-python command kubernetes"
#   GPU_CLUSTER_SHARED        the shared directory (default <repo>/../shared)
#   GPU_CLUSTER_CACHE         cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
# shellcheck source=tools/gobuild.sh
source "$HERE/../gobuild.sh"

PULUMI_VERSION="${PULUMI_VERSION:-3.274.1}"
LANGUAGE_PYTHON_VERSION="${PULUMI_LANGUAGE_PYTHON_VERSION:-3.259.0}"
COMMAND_VERSION="${PULUMI_COMMAND_VERSION:-1.2.1}"
KUBERNETES_VERSION_DEFAULT="4.25.0"
KUBERNETES_MODVER_DEFAULT="v4.0.0-20260115033456-f47bc2d6f199"
KUBERNETES_SUM_DEFAULT="h1:j2bphCf7c2YhnBrhwht2f3TNRRgcMImltUlAgzxr9H4="
KUBERNETES_VERSION="${PULUMI_KUBERNETES_VERSION:-$KUBERNETES_VERSION_DEFAULT}"
KUBERNETES_MODVER="${PULUMI_KUBERNETES_PROVIDER_MODVER:-$KUBERNETES_MODVER_DEFAULT}"
COMPONENTS="${ENGINE_COMPONENTS:-pulumi language-python command kubernetes}"

SHARED="${GPU_CLUSTER_SHARED:-$REPO/../shared}"
UPSTREAM="$SHARED/upstream"
CACHE_ROOT="${GPU_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster}"
ENGINE="$CACHE_ROOT/engine"
TIMES="$ENGINE/build-times.txt"

log() { echo "engine: $*" >&2; }
die() { log "$*"; exit 1; }
has() { case " $COMPONENTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# A provider is labelled with the release it is built from: another version needs its own commit.
if [ "$KUBERNETES_VERSION" != "$KUBERNETES_VERSION_DEFAULT" ] &&
  [ "$KUBERNETES_MODVER" = "$KUBERNETES_MODVER_DEFAULT" ]; then
  die "PULUMI_KUBERNETES_VERSION=$KUBERNETES_VERSION needs PULUMI_KUBERNETES_PROVIDER_MODVER (the provider/v4 module version of that release's commit); $KUBERNETES_MODVER_DEFAULT is v$KUBERNETES_VERSION_DEFAULT"
fi
if [ "$KUBERNETES_VERSION" = "$KUBERNETES_VERSION_DEFAULT" ] &&
  [ "$KUBERNETES_MODVER" != "$KUBERNETES_MODVER_DEFAULT" ]; then
  die "PULUMI_KUBERNETES_PROVIDER_MODVER=$KUBERNETES_MODVER is not the v$KUBERNETES_VERSION_DEFAULT release commit: set PULUMI_KUBERNETES_VERSION to the release it is"
fi

# Cache keys: one directory per binary and version, and one bin directory per combination.
PULUMI_KEY="pulumi-v$PULUMI_VERSION"
LANGUAGE_PYTHON_KEY="pulumi-language-python-v$LANGUAGE_PYTHON_VERSION"
COMMAND_KEY="pulumi-resource-command-v$COMMAND_VERSION"
KUBERNETES_KEY="pulumi-resource-kubernetes-v$KUBERNETES_VERSION+src-${KUBERNETES_MODVER##*-}"
key="pulumi-v$PULUMI_VERSION"
has language-python && key="$key+python-v$LANGUAGE_PYTHON_VERSION"
has command && key="$key+command-v$COMMAND_VERSION"
has kubernetes && key="$key+kubernetes-v$KUBERNETES_VERSION"
BIN="$ENGINE/bin-$key"
has pulumi || BIN="$ENGINE/bin-plugins-${key#pulumi-v"$PULUMI_VERSION"+}"

# Fast path: everything is there already; no Go, no network, no lock.
if [ -d "$BIN" ]; then
  log "reusing $BIN"
  echo "$BIN"
  exit 0
fi

gobuild_go
gobuild_workdir "$ENGINE"
GOMODCACHE_DIR="$(go env GOMODCACHE)"

# fetch MODULE VERSION [SUM]: download a module zip (checked by the checksum database as
# always); print its extracted directory. With SUM (an h1: hash) the zip must match it too.
fetch() {
  local out dir sum
  out="$(go mod download -json "$1@$2" 2>/dev/null || true)"
  dir="$(json Dir <<<"$out" 2>/dev/null || true)"
  if [ -z "$dir" ]; then
    log "cannot download $1@$2 from the Go module proxy:"
    log "  $(json Error <<<"$out" 2>/dev/null || echo "$out")"
    return 1
  fi
  if [ -n "${3:-}" ]; then
    sum="$(json Sum <<<"$out" 2>/dev/null || true)"
    if [ "$sum" != "$3" ]; then
      log "$1@$2 has checksum '$sum', expected $3: refusing it"
      return 1
    fi
  fi
  echo "$dir"
}

# stage MODULE VERSION DEST [SUM]: copy a downloaded module to DEST, writable.
stage() {
  local dir
  dir="$(fetch "$1" "$2" "${4:-}")" || return 1
  mkdir -p "$(dirname "$3")"
  cp -r "$dir" "$3"
  chmod -R u+w "$3"
}

# unpack ARCHIVE: extract one of the upstream archives into $WORK.
unpack() {
  [ -f "$UPSTREAM/$1" ] || {
    log "$UPSTREAM/$1 is missing: the shared directory (../shared beside the repository, or"
    log "  GPU_CLUSTER_SHARED) must hold upstream/$1"
    return 1
  }
  tar -xzf "$UPSTREAM/$1" -C "$WORK"
}

# Download size of the module cache in MiB (what each build fetched: 0 means a warm cache).
modcache_mib() { du -sm "$GOMODCACHE_DIR/cache/download" 2>/dev/null | cut -f1 || echo 0; }

# begin NAME: note the start time and the module cache's size.
begin() {
  log "building $1 (takes minutes)"
  STARTED=$(date +%s)
  MODCACHE_BEFORE="$(modcache_mib)"
}

# finish KEY TMPDIR: record the build time and move TMPDIR into place as $ENGINE/KEY.
finish() {
  local secs=$(($(date +%s) - STARTED)) fetched=$(($(modcache_mib) - MODCACHE_BEFORE))
  log "built $1 in ${secs}s (downloaded ${fetched} MiB of modules)"
  printf '%s\t%s\t%ss\t%s cores\tgo %s\tmodules downloaded: %s MiB\n' "$(date -u +%FT%TZ)" "$1" \
    "$secs" "$(nproc)" "$(go env GOVERSION | sed 's/^go//')" "$fetched" >>"$TIMES"
  chmod 0755 "$2"
  mv -T "$2" "$ENGINE/$1"
}

# needs KEY: true when KEY is not in the cache yet.
needs() {
  if [ -d "$ENGINE/$1/bin" ]; then
    log "reusing $ENGINE/$1"
    return 1
  fi
}

SDK_VERSION_VAR="github.com/pulumi/pulumi/sdk/v3/go/common/version.Version"

build_pulumi() {
  local v="v$PULUMI_VERSION" tmp tree="$WORK/pulumi-$PULUMI_VERSION"
  needs "$PULUMI_KEY" || return 0
  begin "pulumi $v"
  stage github.com/pulumi/pulumi/sdk/v3 "$v" "$tree/sdk" || return 1
  stage github.com/pulumi/pulumi/pkg/v3 "$v" "$tree/pkg" || return 1
  tmp="$(mktemp -d "$ENGINE/.tmp.pulumi.XXXXXX")"
  (cd "$tree/pkg" &&
    go build -o "$tmp/bin/pulumi" -ldflags "-s -w -X $SDK_VERSION_VAR=$v" ./cmd/pulumi) ||
    { rm -rf "$tmp"; return 1; }
  finish "$PULUMI_KEY" "$tmp"
}

build_language_python() {
  local v="v$LANGUAGE_PYTHON_VERSION" tmp src host
  needs "$LANGUAGE_PYTHON_KEY" || return 0
  begin "pulumi-language-python $v"
  unpack "pulumi-language-python-$v.tar.gz" || return 1
  src="$WORK/pulumi-$v/sdk/python/cmd"
  host="$src/pulumi-language-python"
  tmp="$(mktemp -d "$ENGINE/.tmp.pulumi-language-python.XXXXXX")"
  # The tag builds inside the monorepo (replaces onto ../../../../pkg and ../../..): take the
  # same release's pkg/v3 and sdk/v3 from the proxy instead.
  (cd "$host" &&
    go mod edit -dropreplace github.com/pulumi/pulumi/pkg/v3 \
      -dropreplace github.com/pulumi/pulumi/sdk/v3 \
      -require "github.com/pulumi/pulumi/pkg/v3@$v" -require "github.com/pulumi/pulumi/sdk/v3@$v" &&
    go build -o "$tmp/bin/pulumi-language-python" -ldflags "-s -w -X $SDK_VERSION_VAR=$v" .) ||
    { rm -rf "$tmp"; return 1; }
  # Without the executor next to it the host fails with "missing executor".
  install -m 0755 "$src/pulumi-language-python-exec" "$tmp/bin/"
  finish "$LANGUAGE_PYTHON_KEY" "$tmp"
}

build_command() {
  local v="$COMMAND_VERSION" tmp dir
  needs "$COMMAND_KEY" || return 0
  begin "pulumi-resource-command v$v"
  unpack "pulumi-command-v$v-provider.tar.gz" || return 1
  dir="$WORK/pulumi-command-v$v/provider"
  tmp="$(mktemp -d "$ENGINE/.tmp.pulumi-resource-command.XXXXXX")"
  (cd "$dir" &&
    go build -o "$tmp/bin/pulumi-resource-command" \
      -ldflags "-s -w -X github.com/pulumi/pulumi-command/provider/pkg/version.Version=$v" \
      ./cmd/pulumi-resource-command) ||
    { rm -rf "$tmp"; return 1; }
  finish "$COMMAND_KEY" "$tmp"
}

build_kubernetes() {
  local v="$KUBERNETES_VERSION" tmp sum="" tree="$WORK/pulumi-kubernetes"
  needs "$KUBERNETES_KEY" || return 0
  begin "pulumi-resource-kubernetes v$v (provider/v4@$KUBERNETES_MODVER)"
  # An untagged pseudo-version: the default's zip is pinned as well.
  [ "$KUBERNETES_MODVER" = "$KUBERNETES_MODVER_DEFAULT" ] && sum="$KUBERNETES_SUM_DEFAULT"
  stage github.com/pulumi/pulumi-kubernetes/sdk/v4 "v$v" "$tree/sdk" || return 1
  stage github.com/pulumi/pulumi-kubernetes/provider/v4 "$KUBERNETES_MODVER" "$tree/provider" "$sum" ||
    return 1
  tmp="$(mktemp -d "$ENGINE/.tmp.pulumi-resource-kubernetes.XXXXXX")"
  # The command embeds schema-embed.json and terraform-mapping-embed.json, which generate.go
  # writes (with the version) from schema.json and terraform-mapping.json.
  (cd "$tree/provider" &&
    (cd cmd/pulumi-resource-kubernetes && VERSION="$v" go run ./generate.go) &&
    go build -o "$tmp/bin/pulumi-resource-kubernetes" \
      -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$v" \
      ./cmd/pulumi-resource-kubernetes) ||
    { rm -rf "$tmp"; return 1; }
  finish "$KUBERNETES_KEY" "$tmp"
}

# The archives the proxy cannot stand in for, checked before anything is built.
missing=""
if has language-python && [ ! -d "$ENGINE/$LANGUAGE_PYTHON_KEY/bin" ] &&
  [ ! -f "$UPSTREAM/pulumi-language-python-v$LANGUAGE_PYTHON_VERSION.tar.gz" ]; then
  missing="$missing pulumi-language-python-v$LANGUAGE_PYTHON_VERSION.tar.gz"
fi
if has command && [ ! -d "$ENGINE/$COMMAND_KEY/bin" ] &&
  [ ! -f "$UPSTREAM/pulumi-command-v$COMMAND_VERSION-provider.tar.gz" ]; then
  missing="$missing pulumi-command-v$COMMAND_VERSION-provider.tar.gz"
fi
[ -z "$missing" ] ||
  die "missing in $UPSTREAM:$missing (the shared directory is ../shared beside the repository; GPU_CLUSTER_SHARED names another)"

failed=""
if has pulumi; then build_pulumi || failed="$failed pulumi"; fi
if has language-python; then build_language_python || failed="$failed pulumi-language-python"; fi
if has command; then build_command || failed="$failed pulumi-resource-command"; fi
if has kubernetes; then build_kubernetes || failed="$failed pulumi-resource-kubernetes"; fi
[ -z "$failed" ] || die "not built:$failed (see above)"

# One directory for PATH. Hard links, so each binary also sits next to the others
# (the CLI looks for language hosts next to itself, the host for its executor).
tmp="$(mktemp -d "$ENGINE/.tmp.bin.XXXXXX")"
chmod 0755 "$tmp"
mkdir "$tmp/bin"
link() { ln "$ENGINE/$1/bin/$2" "$tmp/bin/" 2>/dev/null || cp -p "$ENGINE/$1/bin/$2" "$tmp/bin/"; }
if has pulumi; then link "$PULUMI_KEY" pulumi; fi
if has language-python; then
  link "$LANGUAGE_PYTHON_KEY" pulumi-language-python
  link "$LANGUAGE_PYTHON_KEY" pulumi-language-python-exec
fi
if has command; then link "$COMMAND_KEY" pulumi-resource-command; fi
if has kubernetes; then link "$KUBERNETES_KEY" pulumi-resource-kubernetes; fi
mv -T "$tmp/bin" "$BIN"
rmdir "$tmp"
log "bin directory $BIN"
echo "$BIN"
