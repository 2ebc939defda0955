#!/usr/bin/env bash
# NCCL acceptance gate for MPIJob @namespace@/@test@ (suspended: the definition each run copies).
# Runs it on the GPU nodes that need it (acceptance_run.py: the untested ones and a neighbour
# that passed, or two that passed when only the test changed), then checks the launcher's log:
# @plan@
# A passed run clears the nodes' @untested@ label: only then do training and serving land there.
# The GPU nodes' boards (a new one re-joins untested and re-runs this gate): @boards@
set -euo pipefail
export KUBECONFIG=/etc/kubernetes/admin.conf
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/nccl_check.py" <<'NCCL_CHECK_EOF'
# @checker@
NCCL_CHECK_EOF
cat >"$work/acceptance_run.py" <<'ACCEPTANCE_RUN_EOF'
# @chooser@
ACCEPTANCE_RUN_EOF
kubectl -n @ns@ get mpijob @name@ -o json >"$work/template.json"
kubectl get nodes -o json >"$work/nodes.json"
kubectl get pods --all-namespaces -o json >"$work/pods.json"
passed=$(kubectl -n @ns@ get configmap @record@ --ignore-not-found \
  -o 'jsonpath={.data.definition}')
python3 "$work/acceptance_run.py" --template "$work/template.json" --nodes "$work/nodes.json" \
  --pods "$work/pods.json" --run "$work/run.json" --record "$work/record.json" \
  --gpu-nodes @gpu_nodes@ \
  --definition @definition@ --passed "$passed" >"$work/chosen"
hosts="" untested="" why="" missing=""
# shellcheck source=/dev/null
. "$work/chosen"
echo "acceptance test: $why"
if [ -n "$missing" ]; then
  echo "FAIL: GPU node(s) $missing of the stack are not in the cluster" >&2
  exit 1
fi
if [ -z "$hosts" ]; then
  exit 0
fi
read -r -a chosen <<<"$hosts"
nodes=${#chosen[@]}
gpus_per_node=@gpus@
ranks=$((nodes * gpus_per_node))
if [ "$nodes" -gt 1 ]; then
  rails=@rails@ floor=@floor@
else
  rails=0 floor=@floor_one@
fi
kubectl -n @ns@ delete mpijob @run@ --ignore-not-found --wait=true
kubectl -n @ns@ create -f - <"$work/run.json"
state=""
for _ in $(seq 1 @polls@); do
  state=$(kubectl -n @ns@ get mpijob @run@ -o \
    jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}' || true)
  case "$state" in *Succeeded*|*Failed*) break ;; esac
  sleep 10
done
check() {
  python3 "$work/nccl_check.py" "$work/launcher.log" --ranks "$ranks" --nodes "$nodes" \
    --min-busbw "$floor" --min-bytes @min_bytes@ --algo @algo@ --rails "$rails" \
    --min-rail-gbps @rail_floor@
}
launcher=$(kubectl -n @ns@ get pods -o name \
  -l training.kubeflow.org/job-name=@run@,training.kubeflow.org/replica-type=launcher \
  | head -n 1)
if [ -z "$launcher" ]; then
  echo "FAIL: MPIJob @run@ on $hosts has no launcher pod (state: ${state:-pending}):" \
    "its nodes' GPUs were not free within @minutes@ minutes" >&2
  exit 1
fi
kubectl -n @ns@ logs "$launcher" >"$work/launcher.log" || true
case "$state" in
  *Succeeded*) ;;
  *) echo "FAIL: MPIJob @run@ did not succeed (state: ${state:-timed out})" >&2
     tail -n 50 "$work/launcher.log" >&2 || true
     check >&2 || true
     exit 1 ;;
esac
check
if [ -n "$untested" ]; then
  read -r -a passed_nodes <<<"$untested"
  kubectl label nodes "${passed_nodes[@]}" @untested@-
fi
kubectl -n @ns@ apply -f - <"$work/record.json"
