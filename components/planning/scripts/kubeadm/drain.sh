#!/usr/bin/env bash
# @title@ — rendered by gpu-cluster; do not edit.
set -euo pipefail
export KUBECONFIG=/etc/kubernetes/admin.conf
# Only a NotFound answer means "not a member": an unreachable API server fails the
# script (set -e acts on the assignment), so the worker's reset, which waits for this
# drain, never runs on an undrained node.
member="$(kubectl get node @node@ --ignore-not-found -o name)"
if [ -z "$member" ]; then
  echo "@node@ is not a cluster member; nothing to drain"
  exit 0
fi
kubectl cordon @node@
kubectl drain @node@ --ignore-daemonsets --delete-emptydir-data --timeout=30m
# @delete@
