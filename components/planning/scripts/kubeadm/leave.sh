#!/usr/bin/env bash
# @node@ leaves the cluster — rendered by gpu-cluster; do not edit.
set -euo pipefail
if [ ! -f /etc/kubernetes/kubelet.conf ]; then
  echo "@node@ is not joined; nothing to reset"
  exit 0
fi
kubeadm reset --force --cleanup-tmp-dir
