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
# Running gang jobs (Volcano's scheduling.k8s.io/group-name) on this batch that also
# run on other nodes.
GANG='{.metadata.annotations.scheduling\.k8s\.io/group-name}'
ROW="{.metadata.namespace}{\"\\t\"}$GANG{\"\\t\"}{.spec.nodeName}{\"\\n\"}"
split_gangs() {
  kubectl get pods -A --field-selector=status.phase=Running \
    -o "jsonpath={range .items[*]}$ROW{end}" \
  | awk -F'\t' -v batch=" $BATCH " '
      $2 == "" { next }
      { g = $1 "/" $2 }
      index(batch, " " $3 " ") { inside[g] = 1; next }
      { out[g] = out[g] " " $3 }
      END { for (g in inside) if (g in out) print g " (also on" out[g] ")" }' | sort
}
waited=0
while gangs="$(split_gangs)" && [ -n "$gangs" ]; do
  # shellcheck disable=SC2170
  if [ "$waited" -ge @gang_wait_s@ ]; then
    echo "$NODE: draining batch ($BATCH) would split running gang jobs:" >&2
    echo "$gangs" >&2
    echo "  fix: let them finish, or suspend them (vcctl job suspend) from a checkpoint," \
      "then pulumi up again" >&2
    exit 1
  fi
  log "waiting for gang jobs on this batch and other nodes: $(paste -sd, <<<"$gangs")"
  sleep 60; waited=$((waited + 60))
done
drain_node
