# shellcheck shell=bash disable=SC2154
#: The first control plane: `kubeadm upgrade apply`; $current is control-plane.sh's.

if [ "$current" != "$TARGET" ]; then
  skew_check "$current"
  upgrade_packages kubeadm
  kubeadm upgrade plan "v$TARGET"
  kubeadm upgrade apply -y "v$TARGET"
  log "control plane at v$TARGET"
fi
