#!/usr/bin/env bash
# kubeadm join for @host@ — rendered by gpu-cluster; do not edit.
set -euo pipefail
if [ -f /etc/kubernetes/kubelet.conf ]; then
  echo "@host@ already joined; nothing to do"
  exit 0
fi
# include: worker-credentials.sh
umask 077
# The file holds the token: removed however the script ends, a failed join included.
trap 'rm -f /etc/kubernetes/kubeadm-join.yaml' EXIT
cat > /etc/kubernetes/kubeadm-join.yaml <<KUBEADM
# @config@
KUBEADM
kubeadm join --config /etc/kubernetes/kubeadm-join.yaml
