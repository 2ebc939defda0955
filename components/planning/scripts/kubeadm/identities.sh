#!/usr/bin/env bash
# The cluster's own identities on @host@ — rendered by gpu-cluster; do not edit.
set -euo pipefail
# include: ../host/change-tracking.sh
install -d -m 0700 /etc/kubernetes
RBAC="$(cat <<'RBAC'
# @rbac@
RBAC
)"
if write_if_changed /etc/kubernetes/gpu-cluster-rbac.yaml "$RBAC"; then mark rbac; fi
settle rbac kubectl --kubeconfig /etc/kubernetes/admin.conf apply \
  -f /etc/kubernetes/gpu-cluster-rbac.yaml
