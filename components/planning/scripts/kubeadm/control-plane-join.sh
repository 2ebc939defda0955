#!/usr/bin/env bash
# kubeadm join (control plane) for @host@ — rendered by gpu-cluster; do not edit.
set -euo pipefail
if [ -f /etc/kubernetes/admin.conf ]; then
  echo "@host@ already a control-plane member; nothing to do"
  exit 0
fi
# include: control-plane-credentials.sh
install -d -m 0700 /etc/kubernetes /var/log/kubernetes
umask 077
# Every API server must decrypt what the others encrypted: the same key everywhere.
printf '%s' "$ENCRYPTION_CONFIG_B64" | base64 -d > /etc/kubernetes/encryption-config.yaml
# include: api-server-files.sh
trap 'rm -f /etc/kubernetes/kubeadm-join.yaml' EXIT
cat > /etc/kubernetes/kubeadm-join.yaml <<KUBEADM
# @config@
KUBEADM
kubeadm join --config /etc/kubernetes/kubeadm-join.yaml
# @identity@
# include: kube-vip-manifest.sh
