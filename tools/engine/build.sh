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
#   PULUMI_LANGUAGE_PYTHON_SDK_VERSION   sdk/v3 module whose zip still holds the language host's
#       source (see below); ignored when PULUMI_LANGUAGE_PYTHON_MODVER is set
#   PULUMI_LANGUAGE_PYTHON_MODVER, PULUMI_COMMAND_PROVIDER_MODVER,
#   PULUMI_KUBERNETES_PROVIDER_MODVER   module versions of the untagged modules; the command one
#       defaults to the pseudo-version of the release tag's commit, worked out from the tag's origin
#   PULUMI_KUBERNETES_SDK_VERSION   sdk/v4 module staged as ../sdk for the provider's replace
#   ENGINE_COMPONENTS   subset of "pulumi language-python command kubernetes"
#   ENGINE_GO_REPLACE   extra "old=new@version" replaces applied to every module built
#   GPU_CLUSTER_CACHE   cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster)
#
# What the Go module proxy reachable here serves (checked 2026-11-24; it refuses with
# "403 Forbidden: This module version is not available" and lists no versions of these modules):
#   pulumi       pkg/v3@v3.259.0 and sdk/v3@v3.259.0 are served; pkg/v3@v3.272.0 (the version of
#                the Python SDK in requirements.txt) is refused. CLI 3.259.0 runs the 3.272.0
#                Python SDK. Built in 117 s on 2 cores (go1.26.8).
#   language-python  github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3 is refused
#                at every version tried (the pseudo-versions of the sdk/v3.259.0 and pkg/v3.259.0
#                tag commits, v3.259.0, v3.272.0). Before the host got its own go.mod it was a
#                package of the sdk/v3 module: sdk/v3@v3.68.0 still holds it and is served, so the
#                host is built from there (19 s on 2 cores, its dependencies already downloaded)
#                and paired with the pulumi-language-python-exec of sdk/v3@v$PULUMI_VERSION.
#                Current CLIs start
#                it with the engine address only (no -virtualenv flag), so it runs `python3` from
#                PATH: set PULUMI_PYTHON_CMD=<project>/.venv/bin/python (or put the venv first on
#                PATH). The CLI falls back to GetRequiredPlugins/no Handshake for it by design.
#                Checked: CLI 3.259.0 + this host + the 3.272.0 SDK run `pulumi preview` and
#                `pulumi up` on a file backend.
#   command      github.com/pulumi/pulumi-command/provider is refused at every version tried: the
#                pseudo-versions of the v1.2.1 (7f3eb6f3b77c), sdk/v1.2.1 (f0839b236d7b) and
#                v1.0.1 tag commits; no provider/ tags exist upstream. The repository-root module
#                (github.com/pulumi/pulumi-command@v1.2.1) is served but holds no provider source.
#                Not built by default; name it in ENGINE_COMPONENTS once a version is served.
#   kubernetes   provider/v4 is served only at v4.0.0-20260115033456-f47bc2d6f199 (a commit
#                after sdk/v4.24.0, older than 4.34.2), whose go.mod the checksum database does
#                not answer for (404): it is fetched with GONOSUMDB for that module alone and
#                checked against the h1: sum pinned below (taken from the proxy on first use,
#                since the checksum database has none). sdk/v4@v4.34.2 is refused;
#                sdk/v4@v4.24.0 (what the provider module requires) is served. The binary is
#                labelled $PULUMI_KUBERNETES_VERSION (4.34.2) because the Python SDK asks the
#                engine for that plugin version; its code is the older commit. Built in 444 s on
#                2 cores with the modules already downloaded (about 580 s from a cold module
#                cache: 35 s generate.go, the rest go build). With a kubeconfig nothing answers it
#                still previews and diffs Kubernetes resources against a state seeded by
#                `pulumi stack import` (tried on 2026-11-24).
set -euo pipefail
# shellcheck source=tools/gobuild.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gobuild.sh"

# Defaults: what the module proxy here really serves (see above), not the newest releases.
PULUMI_VERSION="${PULUMI_VERSION:-3.259.0}"
LANGUAGE_PYTHON_SDK_VERSION="${PULUMI_LANGUAGE_PYTHON_SDK_VERSION:-3.68.0}"
COMMAND_VERSION="${PULUMI_COMMAND_VERSION:-1.2.1}"
KUBERNETES_VERSION="${PULUMI_KUBERNETES_VERSION:-4.34.2}"
KUBERNETES_PROVIDER_MODVER_DEFAULT="v4.0.0-20260115033456-f47bc2d6f199"
KUBERNETES_PROVIDER_SUM_DEFAULT="h1:j2bphCf7c2YhnBrhwht2f3TNRRgcMImltUlAgzxr9H4="
KUBERNETES_SDK_VERSION="${PULUMI_KUBERNETES_SDK_VERSION:-4.24.0}"
# command is left out: no version of its provider module is served (see above).
COMPONENTS="${ENGINE_COMPONENTS:-pulumi language-python kubernetes}"

CACHE_ROOT="${GPU_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster}"
ENGINE="$CACHE_ROOT/engine"
TIMES="$ENGINE/build-times.txt"


log() { echo "engine: $*" >&2; }
die() { log "$*"; exit 1; }
has() { case " $COMPONENTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

gobuild_go
gobuild_workdir "$ENGINE"

# fetch MODULE VERSION [SUM]: download a module zip; print its extracted directory. With SUM
# (an h1: hash) the checksum database is skipped for MODULE alone and the zip must match SUM.
fetch() {
  local out dir sum
  if [ -n "${3:-}" ]; then
    out="$(GONOSUMDB="$1" go mod download -json "$1@$2" 2>/dev/null || true)"
  else
    out="$(go mod download -json "$1@$2" 2>/dev/null || true)"
  fi
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

# stage MODULE VERSION DEST [SUM]: copy a downloaded module to DEST, writable.
stage() {
  local dir
  dir="$(fetch "$1" "$2" "${4:-}")" || return 1
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

# The language host's cache key: the host's own source version and the exec script's.
language_python_key() {
  if [ -n "${PULUMI_LANGUAGE_PYTHON_MODVER:-}" ]; then
    echo "v$PULUMI_VERSION"
  else
    echo "v$LANGUAGE_PYTHON_SDK_VERSION+exec-v$PULUMI_VERSION"
  fi
}

build_language_python() {
  local v="v$PULUMI_VERSION" key tmp started tree modver host sdk
  key="$(language_python_key)"
  needs pulumi-language-python "$key" || return 0
  started=$(date +%s)
  tmp="$(mktemp -d "$ENGINE/.tmp.pulumi-language-python.XXXXXX")"
  modver="${PULUMI_LANGUAGE_PYTHON_MODVER:-}"
  if [ -n "$modver" ]; then
    # The host's own module (untagged; relative replaces onto pkg and sdk).
    log "pulumi-language-python module version $modver"
    tree="$(pulumi_tree pkg)" || { rm -rf "$tmp"; return 1; }
    host="$tree/sdk/python/cmd/pulumi-language-python"
    stage github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3 "$modver" "$host" ||
      { rm -rf "$tmp"; return 1; }
    (cd "$host" && extra_replaces &&
      go build -o "$tmp/bin/pulumi-language-python" -ldflags "-s -w -X $SDK_VERSION_VAR=$v" .) ||
      { rm -rf "$tmp"; return 1; }
  else
    # The proxy refuses that module at every version: build the host from an sdk/v3 release
    # whose zip still holds it as a package (sdk/v3 <= 3.68 or so), see the notes at the top.
    log "pulumi-language-python from github.com/pulumi/pulumi/sdk/v3@v$LANGUAGE_PYTHON_SDK_VERSION"
    sdk="$WORK/pulumi-language-python-sdk"
    stage github.com/pulumi/pulumi/sdk/v3 "v$LANGUAGE_PYTHON_SDK_VERSION" "$sdk" ||
      { rm -rf "$tmp"; return 1; }
    [ -d "$sdk/python/cmd/pulumi-language-python" ] || {
      log "sdk/v3@v$LANGUAGE_PYTHON_SDK_VERSION has no python/cmd/pulumi-language-python"
      rm -rf "$tmp"
      return 1
    }
    (cd "$sdk" && extra_replaces &&
      go build -o "$tmp/bin/pulumi-language-python" \
        -ldflags "-s -w -X $SDK_VERSION_VAR=v$LANGUAGE_PYTHON_SDK_VERSION" \
        ./python/cmd/pulumi-language-python) ||
      { rm -rf "$tmp"; return 1; }
    tree="$(pulumi_tree)" || { rm -rf "$tmp"; return 1; }
  fi
  # Without the executor next to it the host fails with "missing executor". It comes from the
  # CLI's sdk release (it is what runs the program with the Python SDK).
  install -m 0755 "$tree/sdk/python/cmd/pulumi-language-python-exec" "$tmp/bin/"
  finish pulumi-language-python "$key" "$tmp" "$started"
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
  stage github.com/pulumi/pulumi-command/provider "$modver" "$dir" || {
    log "no version of github.com/pulumi/pulumi-command/provider was served here (2026-11-24);"
    log "  set PULUMI_COMMAND_PROVIDER_MODVER to one the proxy serves"
    return 1
  }
  tmp="$(mktemp -d "$ENGINE/.tmp.pulumi-resource-command.XXXXXX")"
  (cd "$dir" && extra_replaces &&
    go build -o "$tmp/bin/pulumi-resource-command" \
      -ldflags "-s -w -X github.com/pulumi/pulumi-command/provider/pkg/version.Version=$v" \
      ./cmd/pulumi-resource-command) ||
    { rm -rf "$tmp"; return 1; }
  finish pulumi-resource-command "$v" "$tmp" "$started"
}

# The kubernetes provider's module version and cache key (the label and the source commit).
kubernetes_modver() { echo "${PULUMI_KUBERNETES_PROVIDER_MODVER:-$KUBERNETES_PROVIDER_MODVER_DEFAULT}"; }
kubernetes_key() {
  local modver
  modver="$(kubernetes_modver)"
  echo "v$KUBERNETES_VERSION+src-${modver##*-}"
}

build_kubernetes() {
  local v="v$KUBERNETES_VERSION" key tmp started modver sum="" tree
  key="$(kubernetes_key)"
  needs pulumi-resource-kubernetes "$key" || return 0
  started=$(date +%s)
  modver="$(kubernetes_modver)"
  # The pinned default is the one module version the checksum database does not answer for.
  [ "$modver" = "$KUBERNETES_PROVIDER_MODVER_DEFAULT" ] && sum="$KUBERNETES_PROVIDER_SUM_DEFAULT"
  log "pulumi-kubernetes provider module version $modver, sdk/v4 v$KUBERNETES_SDK_VERSION"
  tree="$WORK/pulumi-kubernetes"
  stage github.com/pulumi/pulumi-kubernetes/sdk/v4 "v$KUBERNETES_SDK_VERSION" "$tree/sdk" || return 1
  stage github.com/pulumi/pulumi-kubernetes/provider/v4 "$modver" "$tree/provider" "$sum" || return 1
  tmp="$(mktemp -d "$ENGINE/.tmp.pulumi-resource-kubernetes.XXXXXX")"
  # The command embeds schema-embed.json, which generate.go writes from schema.json.
  (cd "$tree/provider" && extra_replaces &&
    (cd cmd/pulumi-resource-kubernetes && VERSION="$KUBERNETES_VERSION" go run ./generate.go) &&
    go build -o "$tmp/bin/pulumi-resource-kubernetes" \
      -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$KUBERNETES_VERSION" \
      ./cmd/pulumi-resource-kubernetes) ||
    { rm -rf "$tmp"; return 1; }
  finish pulumi-resource-kubernetes "$key" "$tmp" "$started"
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
has language-python && key="$key+python-$(language_python_key)"
has command && key="$key+command-v$COMMAND_VERSION"
has kubernetes && key="$key+kubernetes-$(kubernetes_key)"
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
      link "$ENGINE/pulumi-language-python-$(language_python_key)/bin/$f"
    done
  fi
  has command && link "$ENGINE/pulumi-resource-command-v$COMMAND_VERSION/bin/pulumi-resource-command"
  has kubernetes && link "$ENGINE/pulumi-resource-kubernetes-$(kubernetes_key)/bin/pulumi-resource-kubernetes"
  mv -T "$tmp/bin" "$BIN"
  rmdir "$tmp"
fi
echo "$BIN"
