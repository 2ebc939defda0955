# shellcheck shell=bash
#: On a host: the installed package version, and an upgrade of held packages.

installed() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
upgrade_packages() {  # name...: each to $PKG, held again afterwards
  local args=() p
  for p in "$@"; do args+=("$p=$PKG"); done
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-change-held-packages "${args[@]}"
  apt-mark hold "$@" >/dev/null
}
# The kubelet and kubectl after kubeadm, with the node drained (kubeadm's order).
upgrade_kubelet() {
  upgrade_packages kubelet kubectl
  systemctl daemon-reload
  systemctl restart kubelet
  log "kubelet and kubectl at $PKG"
}
