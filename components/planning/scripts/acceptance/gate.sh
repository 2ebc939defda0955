#!/usr/bin/env bash
# NCCL acceptance gate for MPIJob @namespace@/@test@: @nodes@ nodes, @ranks@ ranks.
# @plan@
set -euo pipefail
export KUBECONFIG=/etc/kubernetes/admin.conf
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/nccl_check.py" <<'NCCL_CHECK_EOF'
# @checker@
NCCL_CHECK_EOF
state=""
for _ in $(seq 1 @polls@); do
  state=$(kubectl -n @ns@ get mpijob @name@ -o \
    jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}' || true)
  case "$state" in *Succeeded*|*Failed*) break ;; esac
  sleep 10
done
launcher=$(kubectl -n @ns@ get pods -o name \
  -l training.kubeflow.org/job-name=@name@,training.kubeflow.org/replica-type=launcher \
  | head -n 1)
if [ -z "$launcher" ]; then
  echo "FAIL: MPIJob @test@ has no launcher pod (state: ${state:-pending})" >&2
  exit 1
fi
kubectl -n @ns@ logs "$launcher" >"$work/launcher.log" || true
case "$state" in
  *Succeeded*) ;;
  *) echo "FAIL: MPIJob @test@ did not succeed (state: ${state:-timed out})" >&2
     tail -n 50 "$work/launcher.log" >&2 || true
     @check@ >&2 || true
     exit 1 ;;
esac
@check@
