# shellcheck shell=bash
#: A step of the host preparation script; its upper-case variables come from the generated
#: header (components/planning/host_scripts.py).

# --- swap off (kubelet refuses to run with swap by default) -------------------------------
if [ -n "$(swapon --show=NAME --noheadings)" ]; then
  log "disabling swap"; swapoff -a
fi
if grep -Eq '^[^#].*[[:space:]]swap[[:space:]]' /etc/fstab; then
  sed -i -E 's|^([^#].*[[:space:]]swap[[:space:]].*)$|# \1|' /etc/fstab
fi

# --- kernel modules and sysctls for pod networking ------------------------------------------
# include: change-tracking.sh
load_modules() { for m in $MODULES; do modprobe "$m"; done; }
if write_if_changed /etc/modules-load.d/gpu-cluster.conf "$MODULES"; then mark modules; fi
settle modules load_modules
if write_if_changed /etc/sysctl.d/90-gpu-cluster.conf "$SYSCTLS"; then mark sysctl; fi
settle sysctl sysctl --system
# The kubelet (protectKernelDefaults) refuses to start unless these already hold. `sysctl
# --system` applies the files in name order, the last value winning: a file read after ours, or
# a value set by hand, is caught here rather than at the kubelet's start.
while read -r key _ want; do
  [ -n "$key" ] || continue
  have="$(sysctl -n "$key")"
  if [ "$have" != "$want" ]; then
    echo "sysctl: $key is $have, the kubelet requires $want (protectKernelDefaults)" >&2
    echo "  fix: remove the setting that overrides /etc/sysctl.d/90-gpu-cluster.conf" \
      "(grep -r $key /etc/sysctl.d /etc/sysctl.conf /run/sysctl.d /usr/lib/sysctl.d)," \
      "then run sysctl --system" >&2
    exit 1
  fi
done <<<"$KUBELET_SYSCTLS"

# --- containerd with systemd cgroups ------------------------------------------------------------
if ! dpkg -s containerd.io >/dev/null 2>&1 && ! dpkg -s containerd >/dev/null 2>&1; then
  log "installing containerd"; apt-get install -y containerd
fi
if [ ! -f /etc/containerd/config.toml ] || ! grep -q 'SystemdCgroup = true' /etc/containerd/config.toml; then
  mkdir -p /etc/containerd
  containerd config default | sed 's/SystemdCgroup = false/SystemdCgroup = true/' > /etc/containerd/config.toml
  mark containerd
fi
settle containerd systemctl restart containerd
systemctl is-enabled --quiet containerd || systemctl enable --now containerd

# --- Kubernetes package repository (pkgs.k8s.io keeps one repository per minor version) -------
# Its signing key is pinned by fingerprint (KUBE_KEY_FPR; apt-keys.sh).
kube_keyring=/etc/apt/keyrings/kubernetes-apt-keyring.gpg
install_pinned_key pkgs.k8s.io "$KUBE_REPO/Release.key" "$KUBE_KEY_FPR" "$kube_keyring"
apt_source kubernetes "deb [signed-by=$kube_keyring] $KUBE_REPO/ /"
apt_update_if_changed

# --- kubeadm, kubelet, kubectl pinned to the cluster's Kubernetes version -------------------
# Installed once. A different version on a running host is an upgrade: kubeadm first, the
# control plane before any kubelet, one node at a time (the runbook's steps), never a package
# bump here, which would put kubelets ahead of the API server.
installed_kubeadm="$(dpkg-query -W -f='${Version}' kubeadm 2>/dev/null || true)"
if [ -z "$installed_kubeadm" ]; then
  log "installing Kubernetes $KUBE_PKG_VERSION packages"
  apt-get install -y --allow-change-held-packages \
    "kubeadm=$KUBE_PKG_VERSION" "kubelet=$KUBE_PKG_VERSION" "kubectl=$KUBE_PKG_VERSION"
  apt-mark hold kubeadm kubelet kubectl
elif [ "$installed_kubeadm" != "$KUBE_PKG_VERSION" ]; then
  log "Kubernetes packages stay at $installed_kubeadm: the change to $KUBE_PKG_VERSION is a" \
    "kubeadm upgrade (the preview's runbook lists its steps)"
fi
systemctl is-enabled --quiet kubelet || systemctl enable kubelet
