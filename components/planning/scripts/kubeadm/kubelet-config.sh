#!/usr/bin/env bash
# kubelet configuration of joining nodes, uploaded from @host@ — rendered by gpu-cluster;
# do not edit.
set -euo pipefail
# include: ../host/change-tracking.sh
install -d -m 0700 /etc/kubernetes
CONFIG="$(cat <<'KUBEADM'
# @config@
KUBEADM
)"
if write_if_changed /etc/kubernetes/gpu-cluster-kubelet.yaml "$CONFIG"; then
  mark kubelet-config
fi
settle kubelet-config           kubeadm init phase upload-config kubelet --config /etc/kubernetes/gpu-cluster-kubelet.yaml
