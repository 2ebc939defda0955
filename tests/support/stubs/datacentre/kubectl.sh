#!/bin/bash
# Stand-in: kubectl of the simulated data centre's control plane, over the sandbox's stub
# (kubectl-sandbox), as far as the API server is concerned: `wait --for=create` for a Node waits
# until the API server has it (the bridge registered the join's Node), and what `apply` records
# the bridge applies to the API server before the command returns.
C=/stub/state/cluster
# A call about a namespace's own objects (the workloads' jobs, pods, logs and Secrets; not
# kube-system's, not across namespaces) is the API server's to answer: the bridge runs it
# there with the call's arguments (requests/<id>.args) and stdin where it reads one, and hands
# back what kubectl said (responses/<id>.out, .err, .rc).
# So is what the acceptance gate reads and sets across the cluster: every Node and pod as
# JSON, and the Nodes' labels.
ns='' prev='' across=0 reads=0 api=0
for a in "$@"; do
  case "$prev" in -n|--namespace) ns=$a ;; esac
  case "$a" in
    --namespace=*) ns=${a#*=} ;;
    -A|--all-namespaces) across=1 ;;
    -|*=/dev/stdin) reads=1 ;;
  esac
  prev=$a
done
case " $* " in
  " get nodes -o json "|" get pods --all-namespaces -o json "|" label nodes "*) api=1 ;;
esac
if { [ -n "$ns" ] && [ "$ns" != kube-system ] && [ "$across" = 0 ]; } || [ "$api" = 1 ]; then
  id="$(date +%s%N).$$"
  mkdir -p "$C/requests" "$C/responses"
  if [ "$reads" = 1 ]; then cat > "$C/requests/$id.stdin"; fi
  printf '%s\0' "$@" > "$C/requests/$id.tmp"
  mv "$C/requests/$id.tmp" "$C/requests/$id.args"
  for _ in $(seq 1200); do
    if [ -e "$C/responses/$id.rc" ]; then
      cat "$C/responses/$id.out"
      cat "$C/responses/$id.err" >&2
      exit "$(cat "$C/responses/$id.rc")"
    fi
    /usr/bin/sleep 0.1
  done
  echo "error: the API server did not answer in 120 s" >&2
  exit 1
fi
create=0 node=''
for a in "$@"; do
  case "$a" in --for=create) create=1 ;; node/*) node=${a#node/} ;; esac
done
# `wait <policy> --for=jsonpath=...=ready`: until the operator reports it ready (ready/<policy>)
case " $* " in
  *" --for=jsonpath="*)
    for a in "$@"; do
      case "$a" in */*) [ "${a%%/*}" = node ] || policy=${a//\//_} ;; esac
    done ;;
esac
if [ -n "${policy-}" ]; then
  for _ in $(seq 600); do
    [ -e "$C/ready/$policy" ] && { echo "${policy/_//} condition met"; exit 0; }
    /usr/bin/sleep 0.1
  done
  echo "error: timed out waiting for the condition on ${policy/_//}" >&2
  exit 1
fi
if [ "$create" = 1 ] && [ -n "$node" ]; then
  for _ in $(seq 600); do
    [ -e "$C/registered/$node" ] && { echo "node/$node condition met"; exit 0; }
    /usr/bin/sleep 0.1
  done
  echo "error: timed out waiting for the condition on nodes/$node" >&2
  exit 1
fi
/stub/bin/kubectl-sandbox "$@" || exit $?
if [ "${1-}" = apply ]; then
  for _ in $(seq 600); do
    [ "$(cat "$C/forwarded" 2>/dev/null)" = "$(stat -c %s "$C/applied")" ] && exit 0
    /usr/bin/sleep 0.1
  done
  echo "error: the API server did not get what was applied" >&2
  exit 1
fi
