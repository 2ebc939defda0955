# shellcheck shell=bash
kc=${KUBECONFIG:-}; args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kubeconfig) kc=$2; shift ;;
    --kubeconfig=*) kc=${1#*=} ;;
    *) args+=("$1") ;;
  esac
  shift
done
if [ -z "$kc" ] || [ ! -f "$kc" ] || [ -e "$S/api-down" ]; then
  echo "The connection to the server 10.10.0.10:6443 was refused" >&2
  exit 1
fi
set -- "${args[@]}"
N=$S/cluster/nodes
# ConfigMaps (kube-system only): $S/cluster/configmaps/<name>/<key>; `create` is atomic.
CM=$S/cluster/configmaps
ns=''; rest=()
while [ $# -gt 0 ]; do
  case "$1" in -n|--namespace) ns=$2; shift ;; *) rest+=("$1") ;; esac
  shift
done
set -- "${rest[@]}"
jsonpath=''
for a in "$@"; do case "$a" in jsonpath=*) jsonpath=${a#jsonpath=} ;; esac; done
verb=$1; shift
if [ "${1-}" = configmap ]; then
  [ "$ns" = kube-system ] || { echo "stub: configmaps in kube-system only" >&2; exit 1; }
  name=$2; mkdir -p "$CM"
  case "$verb" in
    create)
      mkdir "$CM/$name" 2>/dev/null \
        || { echo "error: configmaps \"$name\" already exists" >&2; exit 1; }
      for a in "$@"; do
        case "$a" in
          --from-literal=*)
            kv=${a#--from-literal=}; printf '%s' "${kv#*=}" > "$CM/$name/${kv%%=*}" ;;
        esac
      done
      echo "configmap/$name created" ;;
    get)
      if [ ! -d "$CM/$name" ]; then
        for a in "$@"; do [ "$a" = --ignore-not-found ] && exit 0; done
        echo "Error from server (NotFound): configmaps \"$name\" not found" >&2; exit 1
      fi
      key=${jsonpath#\{.data.}; key=${key%\}}
      cat "$CM/$name/$key" 2>/dev/null || true ;;
    delete)
      [ -d "$CM/$name" ] \
        || { echo "Error from server (NotFound): configmaps \"$name\" not found" >&2; exit 1; }
      rm -rf "${CM:?}/$name"; echo "configmap \"$name\" deleted" ;;
  esac
  exit 0
fi
# The API server's version; kubelet versions ($S/cluster/kubelet/<node>); node annotations
# ($S/cluster/annotations/<node>/<key>); running pods ($S/cluster/pods: namespace, gang (Volcano's
# group-name annotation), node and the Training Operator owning it (its operator-name label),
# tab-separated).
A=$S/cluster/annotations
case "$verb ${1-}" in
  "get --raw")
    printf '{\n  "major": "1",\n  "gitVersion": "v%s",\n  "platform": "linux/amd64"\n}\n' \
      "$(cat "$S/cluster/version")"
    exit 0 ;;
  "get pods")
    cat "$S/cluster/pods" 2>/dev/null; exit 0 ;;
  "get secret")  # $S/cluster/secrets/<namespace>/<name>/<key>
    [ -d "$S/cluster/secrets/$ns/$2" ] \
      || { echo "Error from server (NotFound): secrets \"$2\" not found" >&2; exit 1; }
    echo "$2   Opaque   1   1s"; exit 0 ;;
  "create secret")
    [ "$2" = generic ] || { echo "stub: generic secrets only" >&2; exit 1; }
    d="$S/cluster/secrets/$ns/$3"
    mkdir -p "$(dirname "$d")"
    mkdir "$d" 2>/dev/null || { echo "error: secrets \"$3\" already exists" >&2; exit 1; }
    for a in "${@:4}"; do
      case "$a" in
        --from-file=*=*) kv=${a#--from-file=}; cat "${kv#*=}" > "$d/${kv%%=*}" ;;
        --from-literal=*=*) kv=${a#--from-literal=}; printf '%s' "${kv#*=}" > "$d/${kv%%=*}" ;;
      esac
    done
    echo "secret/$3 created"; exit 0 ;;
  "annotate node")
    [ -e "$N/$2" ] || { echo "Error from server (NotFound): nodes \"$2\" not found" >&2; exit 1; }
    mkdir -p "$A/$2"
    for a in "${@:3}"; do
      case "$a" in
        -*) ;;
        *=*) k=${a%%=*}; printf '%s' "${a#*=}" > "$A/$2/${k//\//_}" ;;
        *-) k=${a%-}; rm -f "$A/$2/${k//\//_}" ;;
      esac
    done
    echo "node/$2 annotated"; exit 0 ;;
  "wait --for=jsonpath="*)
    want=${1##*=}; node=${2#node/}
    [ "$(cat "$S/cluster/kubelet/$node" 2>/dev/null)" = "$want" ] \
      || { echo "error: timed out waiting for the condition on nodes/$node" >&2; exit 1; }
    echo "node/$node condition met"; exit 0 ;;
esac
case "$jsonpath" in
  '{.status.nodeInfo.kubeletVersion}')
    cat "$S/cluster/kubelet/$2" 2>/dev/null; exit 0 ;;
  '{.metadata.annotations.'*)
    k=${jsonpath#\{.metadata.annotations.}; k=${k%\}}; k=${k//\\./.}
    cat "$A/$2/${k//\//_}" 2>/dev/null; exit 0 ;;
esac
case "$verb" in
  apply)
    # `apply -f <file|->`: the documents are kept, in order, as the cluster's applied objects.
    src=-; prev=''
    for a in "$@"; do [ "$prev" = -f ] && src=$a; prev=$a; done
    mkdir -p "$S/cluster"
    if [ "$src" = - ]; then cat >> "$S/cluster/applied"; else cat "$src" >> "$S/cluster/applied"; fi
    echo "applied"; exit 0 ;;
  get)
    [ "$1" = node ] || [ "$1" = nodes ] || exit 0
    if [ "$jsonpath" = '{.spec.unschedulable}' ]; then
      [ -e "$N/$2" ] || { echo "Error from server (NotFound): nodes \"$2\" not found" >&2; exit 1; }
      last=$(grep -E '^(cordon|uncordon|drain)$' "$N/$2" | tail -1)
      case "$last" in cordon|drain) printf true ;; esac
      exit 0
    fi
    name=$2 ignore=0 out=''
    for a in "$@"; do
      case "$a" in
        --ignore-not-found|--ignore-not-found=true) ignore=1 ;;
        -oname|--output=name) out=name ;;
      esac
    done
    prev=
    for a in "$@"; do [ "$prev" = -o ] && [ "$a" = name ] && out=name; prev=$a; done
    if [ -e "$N/$name" ]; then
      if [ "$out" = name ]; then echo "node/$name"; else echo "$name Ready"; fi
      exit 0
    fi
    [ "$ignore" = 1 ] && exit 0
    echo "Error from server (NotFound): nodes \"$name\" not found" >&2; exit 1 ;;
  cordon|uncordon|drain)
    [ -e "$N/$1" ] || { echo "Error from server (NotFound): nodes \"$1\" not found" >&2; exit 1; }
    echo "$verb" >> "$N/$1"; echo "node/$1 ${verb}ed" ;;
  delete)
    [ -e "$N/$2" ] || { echo "Error from server (NotFound): nodes \"$2\" not found" >&2; exit 1; }
    rm -f "$N/$2"; echo "node \"$2\" deleted" ;;
esac
exit 0
