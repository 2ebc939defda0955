#!/usr/bin/env bash
# API key of the inference service @service@ — rendered by gpu-cluster; do not edit.
#: Minted on the control plane once and kept only in the cluster: never in Pulumi state, a
#: log or a command line.
set -euo pipefail
export KUBECONFIG=/etc/kubernetes/admin.conf
NS=@namespace@
SECRET=@secret@
FIELD=@field@

if kubectl -n "$NS" get secret "$SECRET" >/dev/null 2>&1; then
  echo "$NS/$SECRET exists"
  exit 0
fi
openssl rand -hex 32 \
  | kubectl -n "$NS" create secret generic "$SECRET" --from-file="$FIELD=/dev/stdin" \
    >/dev/null
echo "created $NS/$SECRET; clients read it with:" \
  "kubectl -n $NS get secret $SECRET -o jsonpath='{.data.$FIELD}' | base64 -d"
