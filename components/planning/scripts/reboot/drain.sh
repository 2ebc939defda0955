# shellcheck shell=bash
# include: cp-header.sh

if [ "${1-}" != reboot ]; then
  echo "$NODE: no reboot required; no drain"
  exit 0
fi
if [ ! -f "$KUBECONFIG" ]; then
  echo "$NODE: no control plane yet; it reboots without a drain"
  exit 0
fi
# Only NotFound means "not a member": an unreachable API server fails the script
# (set -e acts on the assignment, not on a test of the output).
member="$(kubectl get node "$NODE" --ignore-not-found -o name)"
if [ -z "$member" ]; then
  echo "$NODE is not a cluster member yet; it reboots without a drain"
  exit 0
fi
holder() {
  kubectl -n kube-system get configmap "$LOCK" --ignore-not-found \
    -o 'jsonpath={.data.holder}'
}
cordoned="$(kubectl get node "$NODE" -o 'jsonpath={.spec.unschedulable}')"
waited=0
until [ "$(holder)" = "$NODE" ] || kubectl -n kube-system create configmap "$LOCK" \
    --from-literal=holder="$NODE" --from-literal=cordoned="${cordoned:-false}" \
    >/dev/null 2>&1; do
  # shellcheck disable=SC2170
  if [ "$waited" -ge @lock_wait_s@ ]; then
    echo "$NODE: the reboot lock is still held by $(holder) after @lock_wait_s@ s" >&2
    echo "  fix: finish that node's reboot (pulumi up), or if it is gone:" \
      "kubectl -n kube-system delete configmap $LOCK" >&2
    exit 1
  fi
  echo "$NODE: waiting for $(holder)'s reboot (one member at a time)"
  sleep 30; waited=$((waited + 30))
done
log() { echo "$NODE: $*"; }
# shellcheck disable=SC2034  # read by drain/gangs.sh, included below
GANG_WAIT_S=@gang_wait_s@
# include: ../drain/gangs.sh
if ! wait_for_gangs "$NODE"; then
  kubectl -n kube-system delete configmap "$LOCK" --ignore-not-found >/dev/null
  exit 1
fi
kubectl drain "$NODE" --ignore-daemonsets --delete-emptydir-data --timeout=@drain_timeout@
