# shellcheck shell=bash
# include: header.sh
# include: packages.sh

if [ "$(installed kubelet)" = "$PKG" ]; then
  log "kubelet already at $PKG"
  exit 0
fi
if [ "$(installed kubeadm)" != "$PKG" ]; then
  upgrade_packages kubeadm
fi
kubeadm upgrade node
upgrade_kubelet
