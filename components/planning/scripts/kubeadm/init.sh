#!/usr/bin/env bash
# kubeadm init on @host@ — rendered by gpu-cluster; do not edit.
set -euo pipefail
if [ -f /etc/kubernetes/admin.conf ]; then
  echo "control plane already initialised on @host@; nothing to do"
  exit 0
fi
install -d -m 0700 /etc/kubernetes /var/log/kubernetes
# include: api-server-files.sh
if [ ! -f /etc/kubernetes/encryption-config.yaml ]; then
  umask 077
#: ENCRYPTION_KEY is read by the @encryption@ block below (the secretbox key).
  # shellcheck disable=SC2034
  ENCRYPTION_KEY="$(head -c 32 /dev/urandom | base64)"
  cat > /etc/kubernetes/encryption-config.yaml <<ENC
# @encryption@
ENC
fi
# @vip@
cat > /etc/kubernetes/kubeadm-init.yaml <<'KUBEADM'
# @config@
KUBEADM
kubeadm init --config /etc/kubernetes/kubeadm-init.yaml --upload-certs --skip-token-print \
  --skip-certificate-key-print
