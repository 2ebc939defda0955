# shellcheck shell=bash
# include: header.sh
BATCH="@batch@"
# include: cordon.sh

kubelet="$(kubectl get node "$NODE" -o 'jsonpath={.status.nodeInfo.kubeletVersion}')"
if [ "$kubelet" = "v$TARGET" ]; then
  log "kubelet already at v$TARGET"
  exit 0
fi
api="$(kubectl get --raw /version | sed -n 's/.*"gitVersion": *"v\([^"]*\)".*/\1/p')"
if [ "$api" != "$TARGET" ]; then
  echo "the API server runs v$api, not v$TARGET: a kubelet is never newer" >&2
  echo "  fix: the control plane upgrades first (pulumi up again)" >&2
  exit 1
fi
# shellcheck disable=SC2034  # read by drain/gangs.sh, included below
GANG_WAIT_S=@gang_wait_s@
# include: ../drain/gangs.sh
wait_for_gangs "$BATCH"
drain_node
