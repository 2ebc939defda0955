# shellcheck shell=bash
#: Included by the drains the stack runs (upgrade/drain.sh, reboot/drain.sh): wait until no
#: running gang job (Volcano's scheduling.k8s.io/group-name on its pods) spans the nodes
#: being drained and other nodes, since evicting one rank restarts the whole job. Reads
#: GANG_WAIT_S (kubernetes.gangWaitMinutes), and takes the nodes as one space-separated word.
GANG='{.metadata.annotations.scheduling\.k8s\.io/group-name}'
OWNER='{.metadata.labels.training\.kubeflow\.org/operator-name}'
ROW="{.metadata.namespace}{\"\\t\"}$GANG{\"\\t\"}{.spec.nodeName}{\"\\t\"}$OWNER{\"\\n\"}"
# `<namespace>/<group> <kind> (also on <nodes>)` for each gang running on $1 and elsewhere.
split_gangs() {
  kubectl get pods -A --field-selector=status.phase=Running \
    -o "jsonpath={range .items[*]}$ROW{end}" \
  | awk -F'\t' -v drained=" $1 " '
      $2 == "" { next }
      { g = $1 "/" $2; kind[g] = ($4 == "" ? "-" : $4) }
      index(drained, " " $3 " ") { inside[g] = 1; next }
      { out[g] = out[g] " " $3 }
      END { for (g in inside) if (g in out) print g, kind[g], "(also on" out[g] ")" }' | sort
}
# How to pause one: a Kubeflow job by runPolicy.suspend (it resumes from its checkpoint when
# set back to false), a Volcano Job by vcctl.
suspend_hint() {
  local ns="${1%%/*}" job="${1#*/}" kind="$2"
  case "$kind" in
    *-controller)
      echo "kubectl -n $ns patch ${kind%-controller} $job --type=merge" \
        "-p '{\"spec\":{\"runPolicy\":{\"suspend\":true}}}'" ;;
    *) echo "vcctl job suspend -N $ns -n $job" ;;
  esac
}
wait_for_gangs() {
  local drained="$1" waited=0 gangs
  while gangs="$(split_gangs "$drained")" && [ -n "$gangs" ]; do
    if [ "$waited" -ge "$GANG_WAIT_S" ]; then
      echo "draining $drained would split running gang jobs (waited ${GANG_WAIT_S}s):" >&2
      while read -r gang kind rest; do
        echo "  $gang $rest; to pause it from its last checkpoint: $(suspend_hint "$gang" "$kind")" >&2
      done <<<"$gangs"
      echo "  fix: let them finish or suspend them, then pulumi up again" \
        "(kubernetes.gangWaitMinutes sets how long this waits)" >&2
      return 1
    fi
    log "waiting for gang jobs on $drained and other nodes: $(cut -d' ' -f1 <<<"$gangs" | paste -sd,)"
    sleep 60; waited=$((waited + 60))
  done
}
