# shellcheck shell=bash
#: The version skew policy (kubernetes.io/releases/version-skew-policy/), for a cluster
#: at $1.

skew_check() {
  local from=$1 f t
  IFS=. read -r -a f <<<"$from"; IFS=. read -r -a t <<<"$TARGET"
  if [ "${t[0]}" != "${f[0]}" ] || [ "${t[1]}" -lt "${f[1]}" ] \
      || { [ "${t[1]}" = "${f[1]}" ] && [ "${t[2]}" -lt "${f[2]}" ]; }; then
    echo "refusing Kubernetes $from -> $TARGET: kubeadm never downgrades" >&2
    echo "  fix: set kubernetes.version back to $from or later" >&2
    exit 1
  fi
  if [ "${t[1]}" -gt $((f[1] + 1)) ]; then
    echo "refusing Kubernetes $from -> $TARGET: kubeadm upgrades one minor version at a time" >&2
    echo "  fix: set kubernetes.version to a 1.$((f[1] + 1)) release, apply, then the next" >&2
    exit 1
  fi
}
apiserver_version() { sed -n 's|.*kube-apiserver:v\([0-9][0-9.]*\).*|\1|p' @manifest@ | head -1; }
