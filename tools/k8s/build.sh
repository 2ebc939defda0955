#!/usr/bin/env bash
# Builds the control plane of the cluster twin from published Go modules into a cache keyed by
# version, and reuses it on later runs:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl   (k8s.io/kubernetes)
#   etcd                                                               (go.etcd.io/etcd/server/v3)
#   kwok (the KWOK controller, not kwokctl)                           (sigs.k8s.io/kwok)
#   vc-scheduler, vc-controller-manager, vc-webhook-manager           (volcano.sh/volcano)
#   training-operator                                                 (github.com/kubeflow/training-operator)
# The last line of stdout is a bin directory holding all of them:
#   PATH="$(bash tools/k8s/build.sh | tail -1):$PATH"
# Build times go to stderr and to <cache>/k8s/build-times.txt.
#
# Knobs (environment):
#   KUBERNETES_VERSION   default 1.35.2, the stack's kubernetes.version (Pulumi.prod.yaml)
#   ETCD_VERSION         default 3.6.6, what k8s.io/kubernetes v1.35.2 pins (build/dependencies.yaml)
#   KWOK_VERSION         default 0.7.0
#   VOLCANO_VERSION      default 1.15.1, platform.volcano.version
#   TRAINING_OPERATOR_VERSION  default 1.9.4, platform.trainingOperator.version
#   GPU_CLUSTER_CACHE    cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster)
#
# Each is built in its own module, so that each binary gets the dependency versions its own
# go.mod asks for (KWOK v0.7.0 is on k8s.io/* v0.33, etcd on its own grpc/bbolt/raft, Volcano
# and the Training Operator on theirs), not a mix.
set -euo pipefail
# shellcheck source=tools/gobuild.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gobuild.sh"

KUBERNETES_VERSION="${KUBERNETES_VERSION:-1.35.2}"
ETCD_VERSION="${ETCD_VERSION:-3.6.6}"
KWOK_VERSION="${KWOK_VERSION:-0.7.0}"
VOLCANO_VERSION="${VOLCANO_VERSION:-1.15.1}"
TRAINING_OPERATOR_VERSION="${TRAINING_OPERATOR_VERSION:-1.9.4}"

CACHE_ROOT="${GPU_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-cluster}"
K8S="$CACHE_ROOT/k8s"
TIMES="$K8S/build-times.txt"
KUBE_CMDS="kube-apiserver kube-controller-manager kube-scheduler kubectl"
BIN="$K8S/bin-kubernetes-v$KUBERNETES_VERSION+etcd-v$ETCD_VERSION+kwok-v$KWOK_VERSION"
BIN="$BIN+volcano-v$VOLCANO_VERSION+training-operator-v$TRAINING_OPERATOR_VERSION"
VOLCANO_CMDS="vc-scheduler vc-controller-manager vc-webhook-manager"

log() { echo "k8s: $*" >&2; }
die() { log "$*"; exit 1; }

# Fast path: everything is there already; no Go, no network, no lock.
if [ -d "$BIN" ]; then
  log "reusing $BIN"
  echo "$BIN"
  exit 0
fi


gobuild_go
gobuild_workdir "$K8S"

# served MODULE VERSION: the module proxy serves MODULE@VERSION (zip and checksum).
served() { (cd "$WORK" && go mod download "$1@$2") >/dev/null 2>&1; }

# newmod DIR MODULE@VERSION...: a fresh build module in DIR requiring the given modules.
newmod() {
  local dir="$WORK/$1" req
  shift
  mkdir -p "$dir"
  printf 'module gpucluster.local/twinbuild\n\ngo %s\n' "$(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')" \
    >"$dir/go.mod"
  for req in "$@"; do (cd "$dir" && go mod edit -require "$req"); done
}

# tidy DIR IMPORT...: a tools.go importing the commands, then go mod tidy (errors shown).
tidy() {
  local dir="$WORK/$1" imp
  shift
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for imp in "$@"; do printf '\t_ "%s"\n' "$imp"; done
    printf ')\n'
  } >"$dir/tools.go"
  (cd "$dir" && go mod tidy >"$dir/tidy.log" 2>&1) || { sed 's/^/  /' "$dir/tidy.log" >&2; return 1; }
}

# build NAME VERSION MODDIR PACKAGE LDFLAGS: go build PACKAGE from the module in $WORK/MODDIR
# into $K8S/NAME-VERSION/bin/NAME.
build() {
  local name=$1 version=$2 dir="$WORK/$3" pkg=$4 ldflags=$5 tmp started secs
  log "building $name $version (takes minutes)"
  started=$(date +%s)
  tmp="$(mktemp -d "$K8S/.tmp.$name.XXXXXX")"
  (cd "$dir" && go build -trimpath -o "$tmp/bin/$name" -ldflags "-s -w $ldflags" "$pkg") ||
    die "go build $pkg failed (see above)"
  secs=$(($(date +%s) - started))
  log "built $name $version in ${secs}s"
  printf '%s\t%s %s\t%ss\t%s cores\tgo %s\n' "$(date -u +%FT%TZ)" "$name" "$version" "$secs" \
    "$(nproc)" "$(go env GOVERSION)" >>"$TIMES"
  chmod 0755 "$tmp"
  mv -T "$tmp" "$K8S/$name-$version"
}

have() { [ -x "$K8S/$1-$2/bin/$1" ]; }

# --- Kubernetes --------------------------------------------------------------------------------
# k8s.io/kubernetes replaces its staging modules (k8s.io/api => ./staging/src/k8s.io/api, ...);
# as a dependency those replaces are ignored and its go.mod requires them at v0.0.0, so the build
# module requires and replaces each one at the matching v0.<minor>.<patch>.
build_kubernetes() {
  local kv="v$KUBERNETES_VERSION" minor patch staging kdir info commit date m v next cmd
  local missing="" pkgs=() ldflags="" p
  for cmd in $KUBE_CMDS; do have "$cmd" "$kv" || missing="$missing $cmd"; done
  if [ -z "$missing" ]; then
    log "reusing kubernetes $kv"
    return 0
  fi
  minor="${KUBERNETES_VERSION#*.}"
  minor="${minor%%.*}"
  patch="${KUBERNETES_VERSION##*.}"
  staging="v0.$minor.$patch"
  newmod kubernetes "k8s.io/kubernetes@$kv"
  info="$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$kv")" ||
    die "cannot download k8s.io/kubernetes@$kv: $(json Error <<<"$info")"
  kdir="$(json Dir <<<"$info")"
  for m in $(awk '/=> \.\/staging\/src\// {print $1}' "$kdir/go.mod"); do
    v="$staging"
    if ! served "$m" "$v"; then
      # The proxy refuses a few staging modules at some patch releases (for v0.35.2:
      # k8s.io/externaljwt, k8s.io/endpointslice, k8s.io/kube-controller-manager -> v0.35.3;
      # k8s.io/sample-apiserver, k8s.io/sample-cli-plugin -> v0.35.4): take the next patch it
      # serves, and say so.
      for next in $((patch + 1)) $((patch + 2)) $((patch + 3)); do
        if served "$m" "v0.$minor.$next"; then v="v0.$minor.$next"; break; fi
      done
      [ "$v" != "$staging" ] || die "the module proxy serves no $m at $staging or the next patches"
      log "$m@$staging is not served by the module proxy; using $v"
    fi
    (cd "$WORK/kubernetes" && go mod edit -require "$m@$v" -replace "$m=$m@$v")
  done
  for cmd in $KUBE_CMDS; do pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
  tidy kubernetes "${pkgs[@]}" || die "go mod tidy failed for k8s.io/kubernetes@$kv"

  # What hack/lib/version.sh stamps, from the tag's commit where the proxy gives it.
  info="$(cd "$WORK" && go list -m -json "k8s.io/kubernetes@$kv" 2>/dev/null || true)"
  commit="$(json Origin Hash <<<"$info" 2>/dev/null || true)"
  date="$(json Time <<<"$info" 2>/dev/null || true)"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=$kv -X $p.gitMajor=${KUBERNETES_VERSION%%.*} -X $p.gitMinor=$minor"
    [ -z "$commit" ] || ldflags="$ldflags -X $p.gitCommit=$commit -X $p.gitTreeState=clean"
    [ -z "$date" ] || ldflags="$ldflags -X $p.buildDate=$(date -u -d "$date" +%Y-%m-%dT%H:%M:%SZ)"
  done
  for cmd in $missing; do
    build "$cmd" "$kv" kubernetes "k8s.io/kubernetes/cmd/$cmd" "$ldflags"
  done
}

# --- etcd --------------------------------------------------------------------------------------
# go.etcd.io/etcd/server/v3 has a main package at its root (server/main.go: etcdmain.Main).
build_etcd() {
  local ev="v$ETCD_VERSION"
  if have etcd "$ev"; then
    log "reusing etcd $ev"
    return 0
  fi
  newmod etcd "go.etcd.io/etcd/server/v3@$ev"
  tidy etcd go.etcd.io/etcd/server/v3 || die "go mod tidy failed for go.etcd.io/etcd/server/v3@$ev"
  build etcd "$ev" etcd go.etcd.io/etcd/server/v3 ""
}

# --- KWOK --------------------------------------------------------------------------------------
# sigs.k8s.io/kwok v0.7.0's go.mod has no replace directives (k8s.io/* at v0.33.0); its version
# string is the constant pkg/consts.Version.
build_kwok() {
  local wv="v$KWOK_VERSION"
  if have kwok "$wv"; then
    log "reusing kwok $wv"
    return 0
  fi
  newmod kwok "sigs.k8s.io/kwok@$wv"
  tidy kwok sigs.k8s.io/kwok/cmd/kwok || die "go mod tidy failed for sigs.k8s.io/kwok@$wv"
  build kwok "$wv" kwok sigs.k8s.io/kwok/cmd/kwok ""
}

# srcmod DIR MODULE@VERSION: a writable copy of a module's source in $WORK/DIR, to build its
# commands inside their own module (its go.mod, replaces and go.sum as released).
srcmod() {
  local info
  info="$(cd "$WORK" && go mod download -json "$2")" ||
    die "cannot download $2: $(json Error <<<"$info")"
  cp -r "$(json Dir <<<"$info")" "$WORK/$1"
  chmod -R u+w "$WORK/$1"
}

# --- Volcano -----------------------------------------------------------------------------------
# volcano.sh/volcano replaces volcano.sh/apis with ./staging/src/volcano.sh/apis, a nested module
# that the module zip leaves out; it is filled from the volcano.sh/apis module. The proxy serves
# no volcano.sh/apis v1.15.x: the newest it serves at or below the release is used, and the one
# declaration v1.15 added that the commands use (QueueAllocationGateKey, whose value Volcano's
# docs/design/scheduling-gates-queue-admission.md gives) is declared when missing. Types added
# in v1.15 are absent from that client (their fields are dropped when read).
build_volcano() {
  local vv="v$VOLCANO_VERSION" apis="" v cmd missing="" gate ldflags
  for cmd in $VOLCANO_CMDS; do have "$cmd" "$vv" || missing="$missing $cmd"; done
  if [ -z "$missing" ]; then
    log "reusing volcano $vv"
    return 0
  fi
  srcmod volcano "volcano.sh/volcano@$vv"
  for v in "$vv" v1.15.0 v1.14.1 v1.14.0; do
    if served volcano.sh/apis "$v"; then apis="$v"; break; fi
  done
  [ -n "$apis" ] || die "the module proxy serves no volcano.sh/apis at $vv or v1.14.x"
  [ "$apis" = "$vv" ] || log "volcano.sh/apis@$vv is not served by the module proxy; using $apis"
  mkdir -p "$WORK/volcano/staging/src/volcano.sh"
  srcmod volcano/staging/src/volcano.sh/apis "volcano.sh/apis@$apis"
  gate="$WORK/volcano/staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1"
  if ! grep -rq 'QueueAllocationGateKey' "$gate"; then
    printf '%s\n' 'package v1beta1' '' \
      '// QueueAllocationGateKey: as volcano v1.15 docs/design/scheduling-gates-queue-admission.md.' \
      'const QueueAllocationGateKey = GroupName + "/queue-allocation-gate"' >"$gate/zz_v1_15.go"
  fi
  echo "$apis" >"$K8S/volcano-$vv.apis"
  ldflags="-X volcano.sh/volcano/pkg/version.Version=$vv"
  for cmd in $missing; do
    build "$cmd" "$vv" volcano "./cmd/${cmd#vc-}" "$ldflags"
  done
}

# --- Training Operator -------------------------------------------------------------------------
build_training_operator() {
  local tv="v$TRAINING_OPERATOR_VERSION"
  if have training-operator "$tv"; then
    log "reusing training-operator $tv"
    return 0
  fi
  srcmod training-operator "github.com/kubeflow/training-operator@$tv"
  build training-operator "$tv" training-operator ./cmd/training-operator.v1 ""
}

# Called plainly (not under ||), so that set -e stops at the first failing step.
build_kubernetes
build_etcd
build_kwok
build_volcano
build_training_operator

# One directory for PATH, of hard links (copies across file systems).
tmp="$(mktemp -d "$K8S/.tmp.bin.XXXXXX")"
link() { ln "$1" "$tmp/" 2>/dev/null || cp -p "$1" "$tmp/"; }
for cmd in $KUBE_CMDS; do link "$K8S/$cmd-v$KUBERNETES_VERSION/bin/$cmd"; done
link "$K8S/etcd-v$ETCD_VERSION/bin/etcd"
link "$K8S/kwok-v$KWOK_VERSION/bin/kwok"
for cmd in $VOLCANO_CMDS; do link "$K8S/$cmd-v$VOLCANO_VERSION/bin/$cmd"; done
link "$K8S/training-operator-v$TRAINING_OPERATOR_VERSION/bin/training-operator"
# What the twin checks against the stack's pins.
printf '{"kubernetes": "v%s", "etcd": "v%s", "kwok": "v%s", "volcano": "v%s", "volcanoApis": "%s", "trainingOperator": "v%s"}\n' \
  "$KUBERNETES_VERSION" "$ETCD_VERSION" "$KWOK_VERSION" "$VOLCANO_VERSION" \
  "$(cat "$K8S/volcano-v$VOLCANO_VERSION.apis" 2>/dev/null || echo unknown)" "$TRAINING_OPERATOR_VERSION" \
  >"$tmp/versions.json"
chmod 0755 "$tmp"
mv -T "$tmp" "$BIN"
log "kube-apiserver: $("$BIN/kube-apiserver" --version 2>&1 || true)"
log "etcd: $("$BIN/etcd" --version 2>&1 | head -1 || true)"
echo "$BIN"
