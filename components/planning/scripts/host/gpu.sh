# shellcheck shell=bash disable=SC2153
#: RAIL_NETDEVS comes from the generated header, as every upper-case name does.

# --- kernel command line: IOMMU pass-through for GPUDirect RDMA peer-to-peer DMA ------------
# Staged here; the planned reboot that follows host preparation applies it (docs/hosts.md,
# "Planned reboots"), and the check after it confirms /proc/cmdline.
mkdir -p /etc/default/grub.d
grub_file=/etc/default/grub.d/90-gpu-cluster.cfg
grub_had=0; if [ -f "$grub_file" ]; then grub_had=1; fi
if write_if_changed "$grub_file" \
    "GRUB_CMDLINE_LINUX_DEFAULT=\"\$GRUB_CMDLINE_LINUX_DEFAULT $KERNEL_ARGS\""; then
  mark grub
  # A missing argument is seen in /proc/cmdline; a changed or dropped one only by the file.
  if [ "$grub_had" = 1 ]; then mark reboot; fi
fi
settle grub update-grub

# --- nouveau never holds the GPUs ------------------------------------------------------------
if [ "$GPU_DRIVER" = operator ] && [ -d /sys/module/nouveau ]; then
  log "nouveau is loaded; blacklisting it for the operator-managed driver"
fi
if write_if_changed /etc/modprobe.d/gpu-cluster-blacklist-nouveau.conf "$NOUVEAU_BLACKLIST"; then
  mark initramfs
  if [ -d /sys/module/nouveau ]; then mark reboot; fi  # it holds the GPUs until the next boot
fi
# GPUDirect RDMA goes through DMA-BUF (the open kernel modules and the host's DOCA-OFED), so
# no nvidia-peermem module is loaded.

# --- rail interfaces: the names the OS gives them (DGX OS: ibp<bus>s<slot>), never renamed -----
# Renaming into the kernel's ibN namespace races with the kernel at boot (systemd.link(5));
# the RDMA device plugin, the pods' attachment and LNet use the names configured per rail.
for legacy in /etc/systemd/network/10-gpu-cluster-ib*.link; do
  [ -e "$legacy" ] || continue
  log "removing $legacy (a rename into the kernel's ibN names); the OS's names return at boot"
  rm -f "$legacy"; mark initramfs; mark reboot; mark rename
done
settle initramfs update-initramfs -u  # the blacklist and .link files live in the initramfs too
read -r -a rail_netdevs <<<"$RAIL_NETDEVS"
rail=0
for hca in $RAIL_HCAS; do
  want="${rail_netdevs[$rail]}"
  if [ ! -e "/sys/class/infiniband/$hca/device" ]; then
    echo "rail $rail: HCA $hca not found under /sys/class/infiniband; check the inventory" >&2
    exit 1
  fi
  have=""
  for dev in /sys/class/infiniband/"$hca"/device/net/*; do
    [ -e "$dev" ] && have="$have ${dev##*/}"
  done
  if [ "${have# }" != "$want" ] && [ ! -e "$STATE/rename.pending" ]; then
    echo "rail $rail: $hca's IPoIB interface is '${have# }', the stack config says $want" >&2
    echo "  fix: set gpuNodes netdevs[$rail] to what \`ibdev2netdev\` prints for $hca" >&2
    exit 1
  fi
  rail=$((rail + 1))
done

# --- DOCA-OFED, then the Lustre client built against it (docs/hosts.md, "Package sources") ---
# The client's DKMS modules build ko2iblnd against the RDMA stack they find: the host's
# DOCA-OFED (mlnx-ofed-kernel's DKMS build) only when it is there first, else the kernel's own,
# which the Lustre client would then need at run time. So DOCA-OFED comes first (the config
# refuses the Network Operator's driver container, which replaces ib_core at run time).
doca_keyring=/etc/apt/keyrings/gpu-cluster-doca.gpg
doca_installed=0
if ! ofed_info -s >/dev/null 2>&1; then
  install_pinned_key DOCA "$DOCA_KEY_URL" "$DOCA_KEY_FPR" "$doca_keyring"
  apt_source gpu-cluster-doca "deb [signed-by=$doca_keyring] $DOCA_URL ./"
  apt_update_if_changed
  log "installing DOCA-OFED from $DOCA_URL"
  apt-get install -y doca-ofed
  mark reboot  # the boot replaces the kernel's own RDMA modules with DOCA's
  doca_installed=1
fi
dkms_built() { dkms status -m "$1" -k "$(uname -r)" 2>/dev/null | grep -q ': installed'; }
if ! dkms_built mlnx-ofed-kernel; then
  echo "DOCA-OFED: mlnx-ofed-kernel has no DKMS build for kernel $(uname -r) (dkms status)," \
    "so the Lustre client would build ko2iblnd against the kernel's own RDMA stack" >&2
  echo "  fix: install linux-headers-$(uname -r), run dkms autoinstall, then pulumi up again" >&2
  exit 1
fi
lustre_keyring=/etc/apt/keyrings/gpu-cluster-lustre.gpg
if ! lustre_current; then  # package-sources.sh
  install_pinned_key Lustre "$LUSTRE_KEY_URL" "$LUSTRE_KEY_FPR" "$lustre_keyring"
  apt_source gpu-cluster-lustre "deb [signed-by=$lustre_keyring] $LUSTRE_URL ./"
  apt_update_if_changed
  log "installing the Lustre client $LUSTRE_CLIENT_VERSION"
  apt-get install -y --allow-change-held-packages "lustre-client-utils=$LUSTRE_CLIENT_VERSION" \
    "lustre-client-modules-dkms=$LUSTRE_CLIENT_VERSION"
  apt-mark hold lustre-client-utils lustre-client-modules-dkms
  mark lnet
fi
# Its postinst ignores a failed DKMS build (`dkms … || true`): checked here instead.
if ! dkms_built lustre-client-modules; then
  echo "Lustre client: lustre-client-modules has no DKMS build for kernel $(uname -r)" \
    "(dkms status); Lustre cannot mount" >&2
  echo "  fix: read /var/lib/dkms/lustre-client-modules/*/build/make.log, then pulumi up" \
    "again" >&2
  exit 1
fi
# --- LNet over InfiniBand (docs/hosts.md, "Lustre client and LNet") --------------------------
# LNet is configured by `lnetctl import` alone: lnet module options would configure it twice.
if [ -e /etc/modprobe.d/lustre.conf ]; then rm -f /etc/modprobe.d/lustre.conf; mark lnet; fi
# The rails' IPoIB addresses (netplan, as DGX OS configures networking), one routing table per
# rail; a new address re-creates the LNet NIs, whose NIDs are taken from it.
mkdir -p /etc/netplan
if write_if_changed /etc/netplan/60-gpu-cluster-lnet.yaml "$LNET_NETPLAN"; then
  chmod 600 /etc/netplan/60-gpu-cluster-lnet.yaml
  mark lnet-addresses; mark lnet
fi
if write_if_changed /etc/sysctl.d/91-gpu-cluster-lnet.conf "$LNET_SYSCTLS"; then
  mark lnet-sysctl
fi
if write_if_changed /etc/lnet.conf "$LNET_CONF"; then mark lnet; fi
systemctl is-enabled --quiet lnet || systemctl enable lnet  # imports /etc/lnet.conf at boot
lnet_apply() {
  local current
  modprobe lnet
  lnetctl lnet configure
  current="$(lnetctl export 2>/dev/null || true)"
  if grep -q "net type: $LNET_NET\$" <<<"$current"; then lnetctl net del --net "$LNET_NET"; fi
  lnetctl import /etc/lnet.conf
}
lnet_missing=""
for ifc in $LNET_IFACES; do
  [ -e "/sys/class/net/$ifc" ] || lnet_missing="$lnet_missing no $ifc"
done
if [ "$doca_installed" = 1 ]; then lnet_missing="$lnet_missing (DOCA-OFED not loaded)"; fi
if [ -n "$lnet_missing" ]; then
  log "LNet: not before the planned reboot:$lnet_missing; its boot applies the addresses," \
    "sysctls and LNet (netplan, sysctl, lnet.service imports /etc/lnet.conf)"
else
  settle lnet-addresses netplan apply
  settle lnet-sysctl sysctl -p /etc/sysctl.d/91-gpu-cluster-lnet.conf
  settle lnet lnet_apply
fi
