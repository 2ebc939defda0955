# shellcheck shell=bash
#: The configuration `kubeadm kubeconfig user` signs the cluster's own identities with,
#: written only when it differs.
IDENTITY="$(cat <<'IDENTITY'
# @identity@
IDENTITY
)"
if [ "$(cat @identity_config@ 2>/dev/null)" != "$IDENTITY" ]; then
  printf '%s\n' "$IDENTITY" > @identity_config@
fi
