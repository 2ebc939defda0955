# shellcheck shell=bash
# Step 1 of 2: ib_write_bw (perftest) on every rail, each worker writing to the
# next one in a ring; the gate (nccl.py) reads the '# rail-check:' blocks.
# Step 2: all_reduce_perf over the $np ranks (the last command: its status is the
# launcher's). A run on one node has no rail to check.
kubectl=${KUBECTL:-@kubectl@}
# The workers of this run, as the Training Operator lists them for mpirun: one run's size is
# the gate's choice (components/planning/acceptance_run.py), not the stack's.
hostfile=${OMPI_MCA_orte_default_hostfile:-@hostfile@}
workers=()
while read -r worker _; do
  [ -n "$worker" ] && workers+=("$worker")
done <"$hostfile"
rail_hcas=@hcas@
hcas_of() {
  case "$1" in
# @cases@
    *) echo "$rail_hcas" ;;
  esac
}
rail_worker=@worker@
n=${#workers[@]}
gpus_per_node=@gpus@
# shellcheck disable=SC2034  # mpirun's rank count: the command after this script reads it
np=$((n * gpus_per_node))
if [ "$n" -gt 1 ]; then
  rail_out=$(mktemp -d)
  echo "# rail-check: start: ib_write_bw on @rails@ rails x $n nodes in a ring," \
    "@secs@ s per pair, floor @floor@ Gb/s"
  ips=()
  nodes=()
  for i in "${!workers[@]}"; do
    ip=
    node=
    if info=$("$kubectl" get pod "${workers[i]}" \
        -o 'jsonpath={.status.podIP} {.spec.nodeName}' 2>&1); then
      read -r ip node <<<"$info"
    else
      echo "# rail-check: error on ${workers[i]}: kubectl get pod failed: $info"
    fi
    ips[i]=$ip
    nodes[i]=${node:-${workers[i]}}
  done
  pids=()
  for i in "${!workers[@]}"; do
    j=$(((i + 1) % n))
    "$kubectl" exec "${workers[i]}" -- sh -c "$rail_worker" rail-check @secs@ "${nodes[i]}" \
      "${nodes[j]}" "${ips[j]}" "$(hcas_of "${nodes[i]}")" "$(hcas_of "${nodes[j]}")" \
      >"$rail_out/$i" 2>&1 &
    pids[i]=$!
  done
  for i in "${!workers[@]}"; do
    rc=0
    wait "${pids[i]}" || rc=$?
    cat "$rail_out/$i"
    if [ "$rc" -ne 0 ]; then
      echo "# rail-check: error on ${nodes[i]}: kubectl exec exited $rc: $(tail -n 1 "$rail_out/$i")"
    fi
  done
  rm -rf "$rail_out"
  echo "# rail-check: done"
fi
