# shellcheck shell=bash
#: Drain and uncordon, remembering a cordon someone else set (their maintenance stays).

drain_node() {
  local before
  before="$(kubectl get node "$NODE" -o 'jsonpath={.spec.unschedulable}')"
  kubectl annotate node "$NODE" --overwrite "@cordoned@=${before:-false}" >/dev/null
  kubectl drain "$NODE" --ignore-daemonsets --delete-emptydir-data --timeout=@timeout@
}
uncordon_node() {
  local before
  before="$(kubectl get node "$NODE" -o 'jsonpath={.metadata.annotations.@cordoned_jsonpath@}')"
  [ -n "$before" ] || { log "not drained for the upgrade; nothing to uncordon"; return 0; }
  if [ "$before" = true ]; then
    log "cordoned before the upgrade: it stays cordoned"
  else
    kubectl uncordon "$NODE"
  fi
  kubectl annotate node "$NODE" "@cordoned@-" >/dev/null
}
