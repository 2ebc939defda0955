# shellcheck shell=bash disable=SC2154
#: A further control plane: `kubeadm upgrade node`; $current is control-plane.sh's.

if [ "$current" != "$TARGET" ]; then
  skew_check "$current"
  upgrade_packages kubeadm
  kubeadm upgrade node
  log "control plane at v$TARGET"
fi
