# shellcheck shell=bash
# include: cp-header.sh

if [ ! -f "$KUBECONFIG" ]; then exit 0; fi
get() {
  kubectl -n kube-system get configmap "$LOCK" --ignore-not-found -o "jsonpath={.data.$1}"
}
if [ "$(get holder)" != "$NODE" ]; then
  echo "$NODE was not drained for a reboot; nothing to uncordon"
  exit 0
fi
if [ "$(get cordoned)" = true ]; then
  echo "$NODE was cordoned before its reboot; it stays cordoned"
else
  kubectl uncordon "$NODE"
fi
kubectl -n kube-system delete configmap "$LOCK"
