"""Host preparation scripts rendered from the model (pure text, no pulumi).

Every script is idempotent: each step checks the state it wants before changing anything, so a
second run changes nothing (tests run them twice against recording stub binaries). No script
ever contains a secret: credentials reach a host only on a command's stdin, as Pulumi secrets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import ip_address
from textwrap import dedent
from typing import Literal

from components.config import Cluster, GpuNode, Host
from components.planning import reboot

HEADER = """\
#!/usr/bin/env bash
# {title} for {hostname} ({address}) — rendered by gpu-cluster from {stack_key}; do not edit.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
log() {{ printf '[%s] %s\\n' "{hostname}" "$*"; }}
"""

# Bash helpers for "change a file, then act on it" steps (host preparation, kubelet settings).
CHANGE_TRACKING = r"""
write_if_changed() {  # path content: replace the file only when its content differs
  local path="$1" content="$2"
  if [ ! -f "$path" ] || [ "$(cat "$path")" != "$content" ]; then
    printf '%s\n' "$content" > "$path"; return 0
  fi
  return 1
}
# The action that follows a changed file (reload, rebuild, restart) is marked pending first and
# cleared only once it succeeded: a failed run retries it, although the file is now unchanged.
STATE=/var/lib/gpu-cluster
mark() { mkdir -p "$STATE"; touch "$STATE/$1.pending"; }
settle() {
  local name="$1"; shift
  [ -e "$STATE/$name.pending" ] || return 0
  "$@"
  rm -f "$STATE/$name.pending"
}
"""[1:]

# Shared steps every Kubernetes node needs; each guarded so a rerun is a no-op.
KUBE_PREREQS = r"""
# --- swap off (kubelet refuses to run with swap by default) -------------------------------
if [ -n "$(swapon --show=NAME --noheadings)" ]; then
  log "disabling swap"; swapoff -a
fi
if grep -Eq '^[^#].*[[:space:]]swap[[:space:]]' /etc/fstab; then
  sed -i -E 's|^([^#].*[[:space:]]swap[[:space:]].*)$|# \1|' /etc/fstab
fi

# --- kernel modules and sysctls for pod networking ------------------------------------------
""" + CHANGE_TRACKING + r"""load_modules() { for m in $MODULES; do modprobe "$m"; done; }
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
# Its signing key is pinned by fingerprint (KUBE_KEY_FPR): a downloaded Release.key is installed
# only when it holds exactly that one primary key. An installed keyring is fetched again when it
# does not hold the pinned key alone, or when that key has expired (the project extends the
# expiry of the same key).
kube_keyring=/etc/apt/keyrings/kubernetes-apt-keyring.gpg
kube_key() {  # key file -> "<fingerprint> <expiry, 0: none>" of its only primary key, else nothing
  gpg --show-keys --with-colons "$1" 2>/dev/null | awk -F: '
    $1 == "pub" { n++; expiry = $7; want = 1; next }
    $1 == "fpr" && want { fpr = $10; want = 0 }
    END { if (n == 1) print fpr, (expiry == "" ? 0 : expiry) }' || true
}
kube_key_current() {  # key file -> 0 when it holds the pinned key alone, unexpired
  local fpr="" expiry=""
  read -r fpr expiry <<<"$(kube_key "$1")" || true
  [ "$fpr" = "$KUBE_KEY_FPR" ] && { [ "${expiry:-0}" = 0 ] || [ "$expiry" -gt "$(date +%s)" ]; }
}
kube_apt_update=0
if [ ! -f "$kube_keyring" ] || ! kube_key_current "$kube_keyring"; then
  kube_tmp="$(mktemp -d)"
  curl -fsSL -o "$kube_tmp/Release.key" "$KUBE_REPO/Release.key"
  kube_got=""
  read -r kube_got _ <<<"$(kube_key "$kube_tmp/Release.key")" || true
  if [ "$kube_got" != "$KUBE_KEY_FPR" ]; then
    rm -rf "$kube_tmp"
    echo "$KUBE_REPO/Release.key is not the pinned pkgs.k8s.io signing key: its fingerprint is" \
      "${kube_got:-none (no key, or more than one)}, the pinned one $KUBE_KEY_FPR;" \
      "nothing was installed" >&2
    exit 1
  fi
  gpg --batch --yes --dearmor -o "$kube_tmp/keyring.gpg" "$kube_tmp/Release.key"
  if ! cmp -s "$kube_tmp/keyring.gpg" "$kube_keyring"; then
    install -d -m 0755 /etc/apt/keyrings
    install -m 0644 "$kube_tmp/keyring.gpg" "$kube_keyring"
    kube_apt_update=1
  fi
  rm -rf "$kube_tmp"
fi
if ! grep -qsF "$KUBE_REPO/ /" /etc/apt/sources.list.d/kubernetes.list; then
  install -d -m 0755 /etc/apt/sources.list.d
  printf 'deb [signed-by=%s] %s/ /\n' "$kube_keyring" "$KUBE_REPO" \
    > /etc/apt/sources.list.d/kubernetes.list
  kube_apt_update=1
fi
if [ "$kube_apt_update" = 1 ]; then apt-get update; fi

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
"""

# Every host: keys only, no root logins (docs/hosts.md, "SSH daemon"). sshd keeps the FIRST value
# it reads for most keywords, and Ubuntu's sshd_config includes /etc/ssh/sshd_config.d/*.conf
# (in name order) near its top: 10-gpu-cluster.conf is read before cloud-init's
# 50-cloud-init.conf, which may turn password logins on, and before the rest of sshd_config, so
# its values win. The stack itself logs in as cluster.sshUser with a key and uses sudo.
SSHD_STEPS = r"""
# --- SSH daemon: key logins only, never root -------------------------------------------------
sshd_dropin=/etc/ssh/sshd_config.d/10-gpu-cluster.conf
if [ ! -f "$sshd_dropin" ] || [ "$(cat "$sshd_dropin")" != "$SSHD_CONFIG" ]; then
  # Staged, tested, then installed: sshd never reads an invalid file of ours.
  if ! sshd -t; then
    echo "sshd: its configuration is invalid before any change (sshd -t above);" \
      "fix it by hand, then rerun" >&2
    exit 1
  fi
  mkdir -p /etc/ssh/sshd_config.d
  sshd_staged="$(mktemp /etc/ssh/sshd_config.d/.10-gpu-cluster.XXXXXX)"  # not *.conf: not read
  printf '%s\n' "$SSHD_CONFIG" > "$sshd_staged"
  chmod 0644 "$sshd_staged"
  if ! sshd -t -f "$sshd_staged"; then
    rm -f "$sshd_staged"
    echo "sshd: sshd -t rejects the rendered $sshd_dropin; nothing was changed" >&2
    exit 1
  fi
  sshd_previous=""
  if [ -f "$sshd_dropin" ]; then
    sshd_previous="$(mktemp /etc/ssh/.10-gpu-cluster.previous.XXXXXX)"
    cp -p "$sshd_dropin" "$sshd_previous"
  fi
  mv -f "$sshd_staged" "$sshd_dropin"
  if ! sshd -t; then  # valid alone, not with the rest: put the previous state back
    if [ -n "$sshd_previous" ]; then mv -f "$sshd_previous" "$sshd_dropin"
    else rm -f "$sshd_dropin"; fi
    echo "sshd: sshd -t rejects the configuration with the rendered $sshd_dropin;" \
      "the previous state is back" >&2
    exit 1
  fi
  rm -f "$sshd_previous"
  mark sshd
fi
sshd_reload() {  # an inactive ssh.service (socket activation) reads the files when it starts
  if systemctl is-active --quiet ssh; then systemctl reload ssh; fi
}
settle sshd sshd_reload
# What sshd really uses: a value read before ours (a file sorting before 10-, or sshd_config
# setting it above its Include) would win.
sshd_effective="$(sshd -T)"
while read -r key want; do
  case "$key" in ''|'#'*) continue ;; esac
  have="$(awk -v k="${key,,}" '$1 == k { print $2; exit }' <<<"$sshd_effective")"
  if [ "$have" != "${want,,}" ]; then
    echo "sshd: $key is ${have:-unset} in effect, not $want: a setting read before" \
      "$sshd_dropin wins (sshd uses the first value it reads)" >&2
    echo "  fix: remove it (grep -ri '^ *$key' /etc/ssh/sshd_config /etc/ssh/sshd_config.d)," \
      "or make sshd_config include sshd_config.d/*.conf before it" >&2
    exit 1
  fi
done <<<"$SSHD_CONFIG"
"""

# The host firewall (docs/hosts.md, "Host firewall"): an nftables table of its own, `inet
# gpu_cluster`, loaded at boot by gpu-cluster-firewall.service before the network comes up. Only
# the management interface(s) are filtered; loopback, the InfiniBand rails (IPoIB) and Calico's
# interfaces (cali*, vxlan.calico) are left alone: pods are governed by NetworkPolicies, and
# filtering the CNI's interfaces would break it. The file is checked (`nft -c -f`) before it is
# installed; `nft -f` applies it as one transaction (add, delete and re-create the table), which
# touches no other table (kube-proxy's, Calico's).
FIREWALL_FILE = "/etc/nftables.d/gpu-cluster.nft"
FIREWALL_UNIT_NAME = "gpu-cluster-firewall"
FIREWALL_IFACES_PLACEHOLDER = "@MANAGEMENT_IFACES@"
FIREWALL_STEPS = r"""
# --- host firewall: an allowlist on the management interface ---------------------------------
fw_rules=/etc/nftables.d/gpu-cluster.nft
fw_unit=/etc/systemd/system/gpu-cluster-firewall.service
if [ "$HOST_FIREWALL" = on ]; then
  dpkg -s nftables >/dev/null 2>&1 || apt-get install -y nftables
  # The management interface: whichever holds this host's management address (a bond or a VLAN
  # interface included), and the interface kube-vip announces the VIP on, when configured.
  fw_ifaces=" "
  for ifc in $(ip -o -4 addr show to "$MANAGEMENT_IP/32" | awk '{ print $2 }') \
      $FIREWALL_EXTRA_IFACES; do
    ifc="${ifc%%@*}"
    if [[ $fw_ifaces != *" $ifc "* ]]; then fw_ifaces+="$ifc "; fi
  done
  if [ -z "${fw_ifaces// /}" ]; then
    echo "firewall: no interface holds this host's management address $MANAGEMENT_IP" \
      "(ip -o -4 addr); nothing was changed" >&2
    echo "  fix: the inventory's managementIp must be the address the stack reaches it on" >&2
    exit 1
  fi
  # Never lock out the stack: SSH is allowed from the management network only, so when every
  # SSH client of this host comes from elsewhere, the next `pulumi up` could not log in.
  fw_ip4() {
    local IFS=. a b c d
    read -r a b c d <<<"$1"
    echo $(( (a << 24) | (b << 16) | (c << 8) | d ))
  }
  fw_in_net() {  # address cidr
    local bits=${2#*/} mask
    mask=$(( bits == 0 ? 0 : (0xffffffff << (32 - bits)) & 0xffffffff ))
    (( ($(fw_ip4 "$1") & mask) == ($(fw_ip4 "${2%/*}") & mask) ))
  }
  fw_peers="" fw_allowed=0
  if command -v ss >/dev/null 2>&1; then
    while read -r _ _ _ peer _; do
      peer="${peer%:*}"; peer="${peer#[}"; peer="${peer%]}"; peer="${peer#::ffff:}"
      [[ $peer =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || continue
      fw_peers+=" $peer"
      for net in $SSH_CIDRS; do
        if fw_in_net "$peer" "$net"; then fw_allowed=1; fi
      done
    done < <(ss -Htn state established '( sport = :22 )')
  fi
  if [ -n "$fw_peers" ] && [ "$fw_allowed" = 0 ]; then
    echo "firewall: this host's SSH clients ($fw_peers ) are outside network.managementCidr" \
      "and network.hostFirewall.adminCidrs ($SSH_CIDRS), the only sources the firewall lets" \
      "SSH in from; nothing was changed" >&2
    echo "  fix: run pulumi from the management network, or add its network to adminCidrs" >&2
    exit 1
  fi
  fw_list=""
  for ifc in $fw_ifaces; do fw_list="${fw_list:+$fw_list, }\"$ifc\""; done
  fw_ruleset="${FIREWALL_RULES//@MANAGEMENT_IFACES@/$fw_list}"
  if [ ! -f "$fw_rules" ] || [ "$(cat "$fw_rules")" != "$fw_ruleset" ]; then
    mkdir -p /etc/nftables.d
    fw_staged="$(mktemp /etc/nftables.d/.gpu-cluster.XXXXXX)"
    printf '%s\n' "$fw_ruleset" > "$fw_staged"
    if ! nft -c -f "$fw_staged"; then
      rm -f "$fw_staged"
      echo "firewall: nft -c rejects the rendered ruleset; nothing was changed" >&2
      exit 1
    fi
    chmod 0644 "$fw_staged"
    mv -f "$fw_staged" "$fw_rules"
    mark firewall
  fi
  mkdir -p /etc/systemd/system
  if write_if_changed "$fw_unit" "$FIREWALL_UNIT"; then mark firewall-unit; fi
  settle firewall-unit systemctl daemon-reload
  systemctl is-enabled --quiet gpu-cluster-firewall || systemctl enable gpu-cluster-firewall
  nft list table inet gpu_cluster >/dev/null 2>&1 || mark firewall  # flushed by hand: reload
  settle firewall nft -f "$fw_rules"
else
  # HOST_FIREWALL=off: the stack's table, unit and file go; no other table is touched.
  if systemctl is-enabled --quiet gpu-cluster-firewall; then
    systemctl disable gpu-cluster-firewall
  fi
  if nft list table inet gpu_cluster >/dev/null 2>&1; then nft delete table inet gpu_cluster; fi
  if [ -e "$fw_rules" ] || [ -e "$fw_unit" ]; then
    rm -f "$fw_rules" "$fw_unit"
    systemctl daemon-reload
  fi
fi
"""

GPU_STEPS = r"""
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

# --- drivers: host-installed or left to the GPU and Network Operators ------------------------
if [ "$GPU_DRIVER" = host ] && ! dpkg -s "nvidia-driver-$GPU_DRIVER_BRANCH-server-open" >/dev/null 2>&1; then
  apt-get install -y "nvidia-driver-$GPU_DRIVER_BRANCH-server-open" nvidia-fabricmanager-"$GPU_DRIVER_BRANCH"
fi
if [ "$GPU_DRIVER" = operator ] && [ -d /sys/module/nouveau ]; then
  log "nouveau is loaded; blacklisting it for the operator-managed driver"
fi
if write_if_changed /etc/modprobe.d/gpu-cluster-blacklist-nouveau.conf "$NOUVEAU_BLACKLIST"; then
  mark initramfs
  if [ -d /sys/module/nouveau ]; then mark reboot; fi  # it holds the GPUs until the next boot
fi
# GPUDirect RDMA: DMA-BUF needs the open kernel modules and nothing else; nvidia-peermem is only
# loaded when the platform asks for it (legacy MLNX_OFED stacks).
if [ "$GPUDIRECT_MODE" = peermem ] && [ "$GPU_DRIVER" = host ] && [ ! -d /sys/module/nvidia_peermem ]; then
  modprobe nvidia-peermem
fi

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

# --- Lustre client and LNet over InfiniBand (docs/hosts.md, "Lustre client and LNet") --------
# The client's DKMS modules build ko2iblnd against the RDMA stack on the host, so the host's
# DOCA-OFED comes first (the config refuses the Network Operator's driver container, which
# replaces ib_core at run time).
if ! ofed_info -s >/dev/null 2>&1; then
  echo "LNet: no host DOCA-OFED (ofed_info fails); install DOCA-OFED on this host first:" \
    "the Lustre client's ko2iblnd is built against it" >&2
  exit 1
fi
lustre_pkg() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
if [ "$(lustre_pkg lustre-client-utils)" != "$LUSTRE_CLIENT_VERSION" ] \
    || [ "$(lustre_pkg lustre-client-modules-dkms)" != "$LUSTRE_CLIENT_VERSION" ]; then
  log "installing the Lustre client $LUSTRE_CLIENT_VERSION"
  apt-get install -y --allow-change-held-packages "lustre-client-utils=$LUSTRE_CLIENT_VERSION" \
    "lustre-client-modules-dkms=$LUSTRE_CLIENT_VERSION"
  apt-mark hold lustre-client-utils lustre-client-modules-dkms
  mark lnet
fi
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
  [ -e "/sys/class/net/$ifc" ] || lnet_missing="$lnet_missing $ifc"
done
if [ -n "$lnet_missing" ]; then
  log "LNet: no interface$lnet_missing until the planned reboot, whose boot applies the" \
    "addresses, sysctls and LNet (netplan, sysctl, lnet.service imports /etc/lnet.conf)"
else
  settle lnet-addresses netplan apply
  settle lnet-sysctl sysctl -p /etc/sysctl.d/91-gpu-cluster-lnet.conf
  settle lnet lnet_apply
fi
"""


# Local NVMe scratch (DataDrives). DGX H100: 2 x 1.92 TB M.2 NVMe for DGX OS (RAID1) and
# 8 x 3.84 TB U.2 NVMe for storage/cache (NVIDIA DGX BasePOD reference architecture, "Core
# Components"); DGX OS ships the U.2 drives as one md RAID0 mounted at /raid. Kernel names
# (nvme0n1, ...) are enumeration order, so drives are picked by what they are, through the
# links udev's 60-persistent-storage.rules makes under /dev/disk/by-id for every namespace:
# nvme-<model>_<serial>, nvme-<model>_<serial>_<nsid>, nvme-<wwid> (eui.*, nvme.*, uuid.*), and
# the same with -part<N> for partitions. See docs/hosts.md, "Local NVMe scratch on DGX OS".
DATA_DRIVE_TOLERANCE_PERCENT = 2  # /sys/block/<dev>/size against the marketed decimal size

# Part 1 runs first and only reads: a missing, foreign or busy data drive stops the script
# before it has changed anything on the host. It leaves scratch_action (adopt, assemble or
# create), scratch_dev and the chosen drives for part 2.
# Read only, first: the board answering on this address is the one the inventory describes. Its
# management MAC is what the DHCP/PXE reservation hands the address to
# (build/<stack>/network/dhcp-hosts); a replaced board has new MACs.
BOARD_CHECK = r"""
if [ -n "$MANAGEMENT_MAC" ] \
    && ! cat /sys/class/net/*/address 2>/dev/null | grep -qix "$MANAGEMENT_MAC"; then
  echo "no interface of this host has the inventory's managementMac $MANAGEMENT_MAC" >&2
  echo "  fix: a replaced board has new MACs: set managementMac in the inventory to its" \
    "management interface's (cat /sys/class/net/<interface>/address) and update its DHCP" \
    "reservation (build/<stack>/network/dhcp-hosts)" >&2
  exit 1
fi
"""

SCRATCH_SELECT = r"""
# --- local NVMe scratch, 1 of 2 (reads only): the data drives and what is on them ----------
scratch_stop() {  # the reason and the fix, one line each; nothing has been changed yet
  printf 'scratch: %s\n' "$@" >&2
  echo "scratch: stopped before changing anything on this host" >&2
  exit 1
}
scratch_disk() {  # kernel name -> its whole disk (a partition's parent, else itself)
  local part
  for part in /sys/block/*/"$1"; do
    if [ -d "$part" ]; then basename "$(dirname "$part")"; return 0; fi
  done
  printf '%s\n' "$1"
}
scratch_disks_under() {  # kernel name -> every whole disk under it (md, dm, partitions)
  local disk slave found=0
  disk="$(scratch_disk "$1")"
  for slave in /sys/block/"$disk"/slaves/*; do
    if [ -e "$slave" ]; then found=1; scratch_disks_under "$(basename "$slave")"; fi
  done
  if [ "$found" = 0 ]; then printf '%s\n' "$disk"; fi
}
scratch_model_ok() {  # model -> 0 when it contains one of DATA_DRIVE_MODELS (or none is set)
  local want models
  [ -n "$DATA_DRIVE_MODELS" ] || return 0
  IFS='|' read -r -a models <<<"$DATA_DRIVE_MODELS"
  for want in "${models[@]}"; do
    if [[ $1 == *"$want"* ]]; then return 0; fi
  done
  return 1
}
scratch_fstab_spec() {  # what /etc/fstab mounts at the scratch mount point, if anything
  awk -v mp="$SCRATCH_MOUNT" '$1 !~ /^#/ && $2 == mp { print $1; exit }' /etc/fstab
}
scratch_fstab_ok() {  # device -> 0 when fstab mounts nothing, or that device, there
  local spec
  spec="$(scratch_fstab_spec)"
  case "$spec" in
    ''|/dev/md/scratch) return 0 ;;  # no line yet, or the line this script once wrote
    UUID=*) [ -e "$1" ] && [ "${spec#UUID=}" = "$(blkid -p -s UUID -o value "$1" || true)" ] ;;
    *) [ -e "$1" ] && [ "$(readlink -f "$spec")" = "$(readlink -f "$1")" ] ;;
  esac
}

# The OS drives: every whole disk under /, /boot, /boot/efi, /usr, /var or a swap device, through
# partitions and md/dm arrays (DGX OS: the M.2 RAID1). Never taken, whatever size or model.
scratch_mounts="$(findmnt -rn -o SOURCE,TARGET)"
scratch_swaps="$(swapon --show=NAME --noheadings)"
scratch_mounted=()  # "<kernel name> <mount point>" of every mounted block device
scratch_os=" "
while read -r src target; do
  case "$src" in /dev/*) ;; *) continue ;; esac
  src="$(basename "$(readlink -f "${src%%\[*}")")"  # /dev/sda2[/@]: a btrfs subvolume
  scratch_mounted+=("$src $target")
  case "$target" in
    /|/boot|/boot/efi|/usr|/var) scratch_os+="$(scratch_disks_under "$src" | tr '\n' ' ')" ;;
  esac
done <<<"$scratch_mounts"
while read -r src; do
  case "$src" in /dev/*) ;; *) continue ;; esac
  scratch_os+="$(scratch_disks_under "$(basename "$(readlink -f "$src")")" | tr '\n' ' ')"
done <<<"$scratch_swaps"

# Every NVMe namespace once, named by its shortest <model>_<serial> link (a wwid link only
# when there is no other); partitions are skipped.
declare -A scratch_link=()
for link in /dev/disk/by-id/nvme-*; do
  case "$link" in *-part[0-9]*) continue ;; esac
  [ -L "$link" ] || continue
  name="$(basename "$(readlink -f "$link")")"
  [ -e "/sys/block/$name/size" ] || continue
  best="${scratch_link[$name]-}"
  case "${link#/dev/disk/by-id/nvme-}" in
    eui.*|nvme.*|uuid.*) if [ -z "$best" ]; then scratch_link[$name]=$link; fi ;;
    *) case "${best#/dev/disk/by-id/nvme-}" in
         ''|eui.*|nvme.*|uuid.*) scratch_link[$name]=$link ;;
         *) if [ "${#link}" -lt "${#best}" ]; then scratch_link[$name]=$link; fi ;;
       esac ;;
  esac
done
scratch_found="$(for name in "${!scratch_link[@]}"; do
  printf '%s %s\n' "${scratch_link[$name]}" "$name"; done | sort)"

# The data drives: not an OS drive, the configured size (and model), in by-id order.
scratch_names=() scratch_ids=() scratch_report=()
while read -r link name; do
  [ -n "$name" ] || continue
  bytes=$(( $(cat "/sys/block/$name/size") * 512 ))
  model=""
  read -r model < "/sys/block/$name/device/model" || true
  why=""
  if [[ $scratch_os == *" $name "* ]]; then
    why="OS drive (holds /, /boot or swap): never taken"
  elif (( bytes < DATA_DRIVE_MIN_BYTES || bytes > DATA_DRIVE_MAX_BYTES )); then
    why="not $DATA_DRIVE_SIZE"
  elif ! scratch_model_ok "$model"; then
    why="model is not $DATA_DRIVE_MODELS"
  fi
  scratch_report+=("$(printf '  %s (%s, %d GB, %s): %s' "$link" "$name" \
    $((bytes / 1000000000)) "${model:-model unknown}" "${why:-data drive}")")
  if [ -z "$why" ]; then scratch_names+=("$name"); scratch_ids+=("$link"); fi
done <<<"$scratch_found"
if [ "${#scratch_names[@]}" -ne "$DATA_DRIVE_COUNT" ]; then
  scratch_stop "found ${#scratch_names[@]} data drives of $DATA_DRIVE_SIZE, expected \
$DATA_DRIVE_COUNT; the NVMe drives in /dev/disk/by-id:" "${scratch_report[@]}" \
    "fix: replace or reseat the missing drive, or make gpuNodes.template.dataDrives \
describe what this host has"
fi

# What holds them: nothing, or exactly one md array made of exactly these drives.
scratch_held=" "
for name in "${scratch_names[@]}"; do
  for holder in /sys/block/"$name"/holders/* /sys/block/"$name"/"$name"*/holders/*; do
    [ -e "$holder" ] || continue
    holder="$(basename "$holder")"
    if [[ $scratch_held != *" $holder "* ]]; then scratch_held+="$holder "; fi
  done
  for entry in "${scratch_mounted[@]}"; do
    if [ "$(scratch_disk "${entry%% *}")" = "$name" ]; then
      scratch_stop "data drive ${scratch_link[$name]} is mounted directly at ${entry#* }" \
        "fix: unmount it and remove its /etc/fstab line if it is free, or leave it out of \
gpuNodes.template.dataDrives"
    fi
  done
done
read -r -a scratch_holders <<<"$scratch_held"
scratch_want="$(printf '%s\n' "${scratch_names[@]}" | sort | tr '\n' ' ')"
scratch_md=""
if [ "${#scratch_holders[@]}" -gt 0 ]; then
  scratch_md="${scratch_holders[0]}"
  members="$(scratch_disks_under "$scratch_md" | sort -u | tr '\n' ' ')"
  if [ "${#scratch_holders[@]}" -gt 1 ] || [ ! -d "/sys/block/$scratch_md/md" ] \
      || [ "$members" != "$scratch_want" ]; then
    scratch_stop "the data drives are held by${scratch_held}(/dev/$scratch_md spans: $members)" \
      "an array is adopted only when it is made of exactly the data drives: $scratch_want" \
      "fix: free the drives by hand, or make gpuNodes.template.dataDrives match that array"
  fi
fi

if [ -n "$scratch_md" ]; then
  # Already running on exactly these drives (DGX OS's RAID0 at /raid, or ours): adopted as it
  # is. It is never re-created, and formatted only if this script created it and its own
  # mkfs was interrupted.
  scratch_action=adopt scratch_dev="/dev/$scratch_md"
  if [ "$(readlink -f /dev/md/scratch)" = "$scratch_dev" ]; then scratch_dev=/dev/md/scratch; fi
  if ! blkid -p "$scratch_dev" >/dev/null 2>&1 \
      && [ ! -e /var/lib/gpu-cluster/scratch-mkfs.pending ]; then
    scratch_stop "$scratch_dev on the data drives has no filesystem and was not created by \
this script, which formats only an array it has just created" \
      "fix: make a filesystem on it by hand if it is free"
  fi
  for entry in "${scratch_mounted[@]}"; do
    if [ "${entry%% *}" = "$scratch_md" ] && [ "${entry#* }" != "$SCRATCH_MOUNT" ]; then
      scratch_stop "$scratch_dev (the array on the data drives) is mounted at ${entry#* }, \
not at $SCRATCH_MOUNT" \
        "fix: set storage.scratch.mountPoint: ${entry#* } to use it where it is (DGX OS \
mounts its data array at /raid), or unmount it and remove its fstab line to move it"
    fi
  done
else
  # Not running. Every drive carries the same array's superblock (a reboot before it was
  # assembled, an OS reinstall): assembled, never re-created. No drive carries anything:
  # created. Anything else stops here; the script never writes over a drive that holds data.
  scratch_dev=/dev/md/scratch
  examined="$(mdadm --examine "${scratch_ids[@]}" 2>/dev/null || true)"
  superblocks="$(grep -c 'Array UUID' <<<"$examined" || true)"
  arrays="$(sed -n 's/^ *Array UUID : //p' <<<"$examined" | sort -u | grep -c . || true)"
  if [ "$superblocks" = "$DATA_DRIVE_COUNT" ] && [ "$arrays" = 1 ]; then
    scratch_action=assemble
  elif [ "$superblocks" = 0 ]; then
    scratch_action=create
    scratch_busy=()
    for i in "${!scratch_ids[@]}"; do
      found="$(blkid -p "${scratch_ids[$i]}" 2>/dev/null || true)"
      for part in /sys/block/"${scratch_names[$i]}"/"${scratch_names[$i]}"*; do
        if [ -e "$part" ]; then found+=" partition $(basename "$part")"; fi
      done
      if [ -n "$found" ]; then scratch_busy+=("  ${scratch_ids[$i]}: $found"); fi
    done
    if [ "${#scratch_busy[@]}" -gt 0 ]; then
      scratch_stop "data drives that are not blank:" "${scratch_busy[@]}" \
        "fix: if what they hold is disposable, clear them deliberately (wipefs -a <drive>)"
    fi
  else
    scratch_stop "$superblocks of $DATA_DRIVE_COUNT data drives carry md superblocks, of \
$arrays array(s): not one complete array to assemble" \
      "fix: inspect them with mdadm --examine; clear stale superblocks deliberately \
(mdadm --zero-superblock <drive>) once their data is known to be disposable"
  fi
fi
for entry in "${scratch_mounted[@]}"; do
  if [ "${entry#* }" = "$SCRATCH_MOUNT" ] && [ "${entry%% *}" != "$scratch_md" ]; then
    scratch_stop "$SCRATCH_MOUNT already mounts /dev/${entry%% *}, not the data drives' array" \
      "fix: choose another storage.scratch.mountPoint, or unmount it"
  fi
done
if [ "$scratch_action" != assemble ] && ! scratch_fstab_ok "$scratch_dev"; then
  scratch_stop "/etc/fstab mounts $(scratch_fstab_spec) at $SCRATCH_MOUNT, not $scratch_dev" \
    "fix: remove that line, or choose another storage.scratch.mountPoint"
fi
log "scratch: $scratch_action $scratch_dev on ${scratch_ids[*]}"
"""

SCRATCH_STEPS = r"""
# --- local NVMe scratch, 2 of 2: the array, its filesystem, the mount -------------------------
case "$scratch_action" in
  assemble) mdadm --assemble /dev/md/scratch "${scratch_ids[@]}" ;;
  create)
    mdadm --create /dev/md/scratch --run --level=0 --raid-devices="$DATA_DRIVE_COUNT" \
      "${scratch_ids[@]}"
    mark scratch-mkfs ;;  # the only array this script formats: the one it has just created
esac
# A filesystem there (ours, or the array owner's) is never formatted again; a run that was
# interrupted between create and mkfs finishes the mkfs.
if blkid -p "$scratch_dev" >/dev/null 2>&1; then
  rm -f "$STATE/scratch-mkfs.pending"
else
  settle scratch-mkfs mkfs."$SCRATCH_FS" "$scratch_dev"
fi
if ! blkid -p "$scratch_dev" >/dev/null 2>&1; then
  echo "scratch: $scratch_dev has no filesystem and was not created by this script" >&2
  exit 1
fi
if ! mountpoint -q "$SCRATCH_MOUNT"; then
  if ! scratch_fstab_ok "$scratch_dev"; then
    echo "scratch: /etc/fstab mounts $(scratch_fstab_spec) at $SCRATCH_MOUNT, not \
$scratch_dev; remove that line or choose another storage.scratch.mountPoint" >&2
    exit 1
  fi
  if [ -z "$(scratch_fstab_spec)" ]; then
    printf 'UUID=%s %s %s defaults,noatime,nofail 0 0\n' \
      "$(blkid -p -s UUID -o value "$scratch_dev")" "$SCRATCH_MOUNT" \
      "$(blkid -p -s TYPE -o value "$scratch_dev")" >> /etc/fstab
  fi
  mkdir -p "$SCRATCH_MOUNT"
  mount "$SCRATCH_MOUNT"
fi
"""


def _data_drive_env(node: GpuNode) -> dict[str, str]:
    """What SCRATCH_SELECT matches drives against; empty values when the node has none."""
    drives = node.template.data_drives
    if drives is None:
        return dict.fromkeys(("count", "size", "min", "max", "models"), "")
    want = round(drives.size_tb * 10**12)
    slack = want * DATA_DRIVE_TOLERANCE_PERCENT // 100
    return {"count": str(drives.count), "size": f"{drives.size_tb:g} TB",
            "min": str(want - slack), "max": str(want + slack), "models": "|".join(drives.models)}


def kube_pkg_version(version: str) -> str:
    """Debian package version of the pkgs.k8s.io repository for a Kubernetes release."""
    return f"{version}-1.1"


# The OpenPGP key that signs the pkgs.k8s.io repositories, the same key for every
# core:/stable:/v1.XX/deb/ minor: "isv:kubernetes OBS Project <isv:kubernetes@build.opensuse.org>",
# rsa2048, created 2022-08-25. Its fingerprint as `gpg` prints it for .../deb/Release.key in
# kubernetes/kubernetes#128609 and kubernetes/release#3818 (the project extends this key's
# expiry in place, fingerprint unchanged; kubernetes/website#49049 gives 2026-12-29 as the
# current expiry). A new key is a reviewed change of this constant.
KUBE_APT_KEY_FINGERPRINT = "DE15B14486CD377B9E876E1A234654DA9A296436"

# The kernel settings the kubelet sets at start-up or, with protectKernelDefaults: true, refuses
# to start without: setupKernelTunables in kubernetes pkg/kubelet/cm/container_manager_linux.go,
# values from k8s.io/component-helpers/node/util/sysctl (the names in the comments are its own).
# Every Kubernetes host gets them in /etc/sysctl.d, so they hold from boot.
VM_OVERCOMMIT_MEMORY = ("vm.overcommit_memory", 1)  # VMOvercommitMemoryAlways
VM_PANIC_ON_OOM = ("vm.panic_on_oom", 0)  # VMPanicOnOOMInvokeOOMKiller: the OOM killer, no panic
KERNEL_PANIC = ("kernel.panic", 10)  # KernelPanicRebootTimeout: reboot 10 s after a panic
KERNEL_PANIC_ON_OOPS = ("kernel.panic_on_oops", 1)  # KernelPanicOnOopsAlways: an oops panics
KERNEL_KEYS_ROOT_MAXKEYS = ("kernel.keys.root_maxkeys", 1_000_000)  # RootMaxKeysSetting
# RootMaxBytesSetting: 25 bytes for each of the RootMaxKeysSetting keys.
KERNEL_KEYS_ROOT_MAXBYTES = ("kernel.keys.root_maxbytes", 25_000_000)
KUBELET_SYSCTLS: dict[str, int] = dict((
    VM_OVERCOMMIT_MEMORY, VM_PANIC_ON_OOM, KERNEL_PANIC, KERNEL_PANIC_ON_OOPS,
    KERNEL_KEYS_ROOT_MAXKEYS, KERNEL_KEYS_ROOT_MAXBYTES,
))


def _common_env(cluster: Cluster) -> str:
    modules = "overlay br_netfilter"
    kubelet = "\n".join(f"{key} = {value}" for key, value in KUBELET_SYSCTLS.items())
    sysctls = "\n".join(
        [
            "net.bridge.bridge-nf-call-iptables = 1",
            "net.bridge.bridge-nf-call-ip6tables = 1",
            "net.ipv4.ip_forward = 1",
            "vm.max_map_count = 1048576",
            "fs.inotify.max_user_instances = 8192",
            kubelet,
        ]
    )
    minor = ".".join(cluster.kubernetes.version.split(".")[:2])
    # Not dedent(): the multi-line SYSCTLS value would leave the lines indented.
    return (f'MODULES="{modules}"\n'
            f'SYSCTLS="{sysctls}"\n'
            f'KUBELET_SYSCTLS="{kubelet}"\n'
            f'KUBE_PKG_VERSION="{kube_pkg_version(cluster.kubernetes.version)}"\n'
            f'KUBE_REPO="https://pkgs.k8s.io/core:/stable:/v{minor}/deb"\n'
            f'KUBE_KEY_FPR="{KUBE_APT_KEY_FINGERPRINT}"\n')


# The sshd drop-in every host gets (SSHD_STEPS): what the stack needs to log in (a key, as
# cluster.sshUser, which the config never lets be root) and nothing a password could open.
SSHD_SETTINGS: tuple[tuple[str, str], ...] = (
    ("PasswordAuthentication", "no"),
    ("KbdInteractiveAuthentication", "no"),  # PAM's password and one-time-code prompts
    ("PermitRootLogin", "no"),  # the stack logs in as cluster.sshUser and uses sudo
    ("PubkeyAuthentication", "yes"),  # how the stack logs in
)


def sshd_config(stack_key: str) -> str:
    """/etc/ssh/sshd_config.d/10-gpu-cluster.conf."""
    return "\n".join([f"# Rendered by gpu-cluster from {stack_key}; do not edit (docs/hosts.md).",
                      *(f"{key} {value}" for key, value in SSHD_SETTINGS)])


# --- host firewall: the allowlist, from what this stack runs -------------------------------------
# Port lists relied on:
# - Kubernetes "Ports and Protocols" (kubernetes.io/docs/reference/networking/ports-and-protocols,
#   k/website content/en/docs/reference/networking/ports-and-protocols.md): API server 6443
#   (here control_plane_endpoint.port, kubeadm's bindPort) used by all; etcd 2379-2380 used by
#   kube-apiserver and etcd; kubelet 10250 used by self and the control plane; scheduler 10259
#   and controller manager 10257 used by self only (kubeadm binds them to 127.0.0.1); NodePort
#   30000-32767: no NodePort Service here (ingress is a MetalLB LoadBalancer, whose traffic
#   kube-proxy DNATs to the pods before the input hook).
# - Calico "System requirements, Network requirements" (docs.tigera.io/calico/latest/
#   getting-started/kubernetes/requirements): BGP TCP 179, IP-in-IP protocol 4, VXLAN UDP 4789,
#   Typha TCP 5473 on Typha hosts (the Tigera operator always runs Typha). Which of them this
#   stack uses is read from its own Calico values (components/planning/platform.py).
# - MetalLB "Requirements" (metallb.io): in L2 mode TCP and UDP 7946 between the speakers
#   (memberlist). L2 announcements are ARP, which nftables' inet family never sees; so is
#   kube-vip's VIP (ARP mode): only the API server port behind it is opened.
# - prometheus-community/helm-charts charts/prometheus-node-exporter/values.yaml: hostNetwork
#   true, port 9100, scraped by Prometheus, which runs on the control planes
#   (release_placement). The GPU Operator's DCGM exporter (gpu-operator values.yaml
#   dcgmExporter.hostNetwork: false) is scraped on its pod address, not the host's.
# - Lustre: LNet runs over o2ib on the InfiniBand rails (storage.lnetNetwork must be o2ib*), not
#   over TCP 988 on the management network; the rails are not filtered.
# Sources: "management_net" is network.managementCidr (every node, the pulumi runner);
# "control_planes" the control-plane hosts and the kube-vip VIP: pods reach other hosts
# masqueraded to their node's management address (Calico natOutgoing), so a pod's scrape or
# API call arrives from a node address.
@dataclass(frozen=True)
class FirewallRule:
    """Inbound `proto` traffic to `ports` from the nft set `sources`, for `purpose`."""

    proto: Literal["tcp", "udp", "ipip"]
    ports: str  # "22", "2379-2380"; empty for ipip
    sources: Literal["management_net", "control_planes", "admin_nets"]
    purpose: str


def _cni_rules(cluster: Cluster) -> list[FirewallRule]:
    """What the stack's Calico needs between nodes, read from the values it installs with."""
    from components.planning import platform  # imported here: platform imports this module

    calico = next(r for r in platform.helm_releases(cluster) if r.name == "calico")
    network = calico.values["installation"]["calicoNetwork"]
    encapsulations = {pool.get("encapsulation", "IPIP") for pool in network.get("ipPools", ())}
    rules = [FirewallRule("tcp", "5473", "management_net", "Calico Typha: every calico-node")]
    if encapsulations & {"VXLAN", "VXLANCrossSubnet"}:
        rules.append(FirewallRule("udp", "4789", "management_net", "Calico VXLAN between nodes"))
    if encapsulations & {"IPIP", "IPIPCrossSubnet"}:
        rules.append(FirewallRule("ipip", "", "management_net", "Calico IP-in-IP between nodes"))
    if network.get("bgp", "Enabled") != "Disabled":
        rules.append(FirewallRule("tcp", "179", "management_net", "Calico BGP between nodes"))
    return rules


def firewall_allowlist(cluster: Cluster, role: str) -> tuple[FirewallRule, ...]:
    """Inbound traffic the host's management interface admits, besides replies (established
    connections), DHCP replies and ICMP; an empty tuple: no firewall for this role."""
    admins = bool(cluster.network.host_firewall.admin_cidrs)
    ssh = [FirewallRule("tcp", "22", "management_net", "SSH: the stack and operators")]
    if admins:
        ssh.append(FirewallRule("tcp", "22", "admin_nets", "SSH: network.hostFirewall.adminCidrs"))
    if role == "sm-host":
        return tuple(ssh)  # opensm speaks InfiniBand only
    if role not in ("control-plane", "gpu-worker"):
        return ()  # login hosts run what their users need: not known here
    rules = list(ssh)
    if role == "control-plane":
        port = str(cluster.kubernetes.control_plane_endpoint.port)
        rules += [FirewallRule("tcp", port, "management_net",
                               "Kubernetes API server and its VIP: kubelets, pods, pulumi"),
                  FirewallRule("tcp", "2379-2380", "control_planes", "etcd: the control planes")]
        if admins:
            rules.append(FirewallRule("tcp", port, "admin_nets",
                                      "Kubernetes API server: network.hostFirewall.adminCidrs"))
    rules += [
        FirewallRule("tcp", "10250", "control_planes",
                     "kubelet API: the API servers and Prometheus"),
        FirewallRule("tcp", "9100", "control_planes", "node-exporter: Prometheus"),
        *_cni_rules(cluster),
        FirewallRule("tcp", "7946", "management_net", "MetalLB speakers (memberlist)"),
        FirewallRule("udp", "7946", "management_net", "MetalLB speakers (memberlist)"),
    ]
    return tuple(rules)


def firewall_ruleset(cluster: Cluster, role: str, hostname: str, stack_key: str) -> str:
    """/etc/nftables.d/gpu-cluster.nft, but for the management interfaces, which the host
    script puts in place of FIREWALL_IFACES_PLACEHOLDER (as a comma-separated list of quoted
    names) once it has found them."""
    rules = firewall_allowlist(cluster, role)
    planes = {ip_address(h.management_ip) for h in cluster.control_plane}
    if (vip := cluster.kubernetes.control_plane_endpoint.vip) is not None:
        planes.add(ip_address(vip))
    defines = [f"define management_ifaces = {{ {FIREWALL_IFACES_PLACEHOLDER} }}",
               f"define management_net = {cluster.network.management_cidr}"]
    if any(r.sources == "control_planes" for r in rules):
        defines.append(f"define control_planes = {{ {', '.join(map(str, sorted(planes)))} }}")
    if any(r.sources == "admin_nets" for r in rules):
        admin = ", ".join(map(str, cluster.network.host_firewall.admin_cidrs))
        defines.append(f"define admin_nets = {{ {admin} }}")
    allow = []
    for r in rules:
        match = "ip protocol ipip" if r.proto == "ipip" else f"{r.proto} dport {r.ports}"
        allow.append(f'    ip saddr ${r.sources} {match} accept comment "{r.purpose}"')
    text = "\n".join([
        f"# Host firewall of {hostname} ({role}): rendered by gpu-cluster from {stack_key};",
        "# do not edit (docs/hosts.md, Host firewall). Port lists: Kubernetes Ports and Protocols,",
        "# Calico network requirements, MetalLB requirements.",
        "# Inbound traffic on the management interface is dropped unless allowed below; other",
        "# interfaces (loopback, InfiniBand rails, cali*, vxlan.calico) are not filtered here.",
        *defines,
        "",
        "table inet gpu_cluster",
        "delete table inet gpu_cluster",
        "table inet gpu_cluster {",
        "  chain input {",
        "    type filter hook input priority filter; policy accept;",
        "    iifname $management_ifaces jump management",
        "  }",
        "",
        "  chain management {",
        "    ct state established,related accept",
        "    ct state invalid drop",
        "    icmp type { echo-request, destination-unreachable, time-exceeded,"
        " parameter-problem } accept",
        "    icmpv6 type { destination-unreachable, packet-too-big, time-exceeded,"
        " parameter-problem, echo-request, nd-router-advert, nd-neighbor-solicit,"
        " nd-neighbor-advert, mld-listener-query } accept",
        '    udp sport 67 udp dport 68 accept comment "DHCP replies"',
        '    udp sport 547 udp dport 546 accept comment "DHCPv6 replies"',
        *allow,
        '    limit rate 10/minute burst 5 packets log prefix "gpu-cluster drop: " level info',
        "    drop",
        "  }",
        "}",
    ])
    assert "'" not in text  # a single-quoted shell value in the script
    return text


FIREWALL_UNIT = f"""\
[Unit]
Description=gpu-cluster host firewall (nftables table inet gpu_cluster)
Documentation=file:{FIREWALL_FILE}
DefaultDependencies=no
Wants=network-pre.target
Before=network-pre.target shutdown.target
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/nft -f {FIREWALL_FILE}
ExecReload=/usr/sbin/nft -f {FIREWALL_FILE}

[Install]
WantedBy=sysinit.target"""


def _hardening_env(cluster: Cluster, role: str, hostname: str, address: object,
                   stack_key: str) -> str:
    """What SSHD_STEPS and FIREWALL_STEPS read, as unindented (single-quoted) values."""
    sshd = sshd_config(stack_key)
    assert "'" not in sshd
    env = f"SSHD_CONFIG='{sshd}'\n"
    if not firewall_allowlist(cluster, role):
        return env
    ep = cluster.kubernetes.control_plane_endpoint
    extra = ep.interface if role == "control-plane" and ep.vip and ep.interface else ""
    # network.hostFirewall.enabled; "off" removes the stack's table, unit and file.
    state = "on" if cluster.network.host_firewall.enabled else "off"
    ssh_cidrs = (cluster.network.management_cidr, *cluster.network.host_firewall.admin_cidrs)
    return env + (f'HOST_FIREWALL="{state}"\n'
                  f'MANAGEMENT_IP="{address}"\n'
                  f'SSH_CIDRS="{" ".join(map(str, ssh_cidrs))}"\n'
                  f'FIREWALL_EXTRA_IFACES="{extra}"\n'
                  "# shellcheck disable=SC2016  # $names in it are nft's own variables\n"
                  f"FIREWALL_RULES='{firewall_ruleset(cluster, role, hostname, stack_key)}'\n"
                  f"FIREWALL_UNIT='{FIREWALL_UNIT}'\n")


def _lnet_env(cluster: Cluster, node: GpuNode) -> str:
    """The files the LNet step writes, as single-quoted multi-line values (not dedent()ed)."""
    from components.planning import lnet  # imported here: platform imports this module

    files = {"LNET_CONF": lnet.lnet_conf(cluster, node),
             "LNET_NETPLAN": lnet.netplan(cluster, node),
             "LNET_SYSCTLS": lnet.sysctls(cluster, node)}
    assert not any("'" in text for text in files.values())
    return "".join(f"{name}='{text}'\n" for name, text in files.items())


def prepare_gpu_node(cluster: Cluster, node: GpuNode, stack_key: str) -> str:

    gpu_op = cluster.platform.gpu_operator
    drives = _data_drive_env(node)
    env = _common_env(cluster) + dedent(
        f"""\
        KERNEL_ARGS="{' '.join(node.template.kernel_args)}"
        MANAGEMENT_MAC="{node.management_mac or ''}"
        RAIL_HCAS="{' '.join(r.hca for r in node.rails)}"
        RAIL_NETDEVS="{' '.join(r.netdev for r in node.rails)}"
        GPU_DRIVER="{gpu_op.driver}"
        GPU_DRIVER_BRANCH="{(gpu_op.driver_version or '580.0.0').split('.')[0]}"
        GPUDIRECT_MODE="dmabuf"
        DATA_DRIVE_COUNT="{drives['count']}"
        DATA_DRIVE_SIZE="{drives['size']}"
        DATA_DRIVE_MIN_BYTES="{drives['min']}"
        DATA_DRIVE_MAX_BYTES="{drives['max']}"
        DATA_DRIVE_MODELS="{drives['models']}"
        SCRATCH_FS="{cluster.storage.scratch.filesystem}"
        SCRATCH_MOUNT="{cluster.storage.scratch.mount_point}"
        LNET_NET="{cluster.storage.lnet_network}"
        LNET_IFACES="{' '.join(r.netdev for r in node.rails)}"
        LUSTRE_CLIENT_VERSION="{cluster.storage.lustre_client.version}"
        """
    ) + f"NOUVEAU_BLACKLIST='{reboot.NOUVEAU_BLACKLIST}'\n" + _lnet_env(cluster, node) + (
        _hardening_env(cluster, "gpu-worker", node.hostname, node.management_ip, stack_key))
    header = HEADER.format(
        title="Host preparation (GPU node)",
        hostname=node.hostname,
        address=node.management_ip,
        stack_key=stack_key,
    )
    # Only the scratch array depends on NVMe drives; every GPU node gets the GPU steps. The
    # drive selection runs first: it only reads, and stops the script before any change.
    scratch = node.template.data_drives is not None
    steps = (BOARD_CHECK + (SCRATCH_SELECT if scratch else "") + KUBE_PREREQS + SSHD_STEPS
             + FIREWALL_STEPS + GPU_STEPS + (SCRATCH_STEPS if scratch else ""))
    return header + env + steps + 'log "host preparation complete"\n'


def dhcp_hosts(nodes: Iterable[GpuNode]) -> str:
    """dnsmasq's --dhcp-hostsfile (`<MAC>,<address>,<hostname>`): the management address each
    GPU node's board gets, for the DHCP/PXE server of the management network."""
    return "".join(f"{n.management_mac},{n.management_ip},{n.hostname}\n"
                   for n in nodes if n.management_mac)


def prepare_host(cluster: Cluster, host: Host, stack_key: str) -> str:
    """Control-plane and SM hosts: Kubernetes prerequisites or the subnet-manager packages;
    every host: the sshd drop-in, and the firewall where the stack knows what the host runs."""
    header = HEADER.format(
        title=f"Host preparation ({host.role})",
        hostname=host.hostname,
        address=host.management_ip,
        stack_key=stack_key,
    )
    env = _hardening_env(cluster, host.role, host.hostname, host.management_ip, stack_key)
    done = 'log "host preparation complete"\n'
    if host.role == "control-plane":
        return (header + _common_env(cluster) + env + KUBE_PREREQS + SSHD_STEPS + FIREWALL_STEPS
                + done)
    if host.role == "sm-host":
        return header + env + CHANGE_TRACKING + dedent(
            """\
            for pkg in opensm infiniband-diags; do
              dpkg -s "$pkg" >/dev/null 2>&1 || apt-get install -y "$pkg"
            done
            """
        ) + SSHD_STEPS + FIREWALL_STEPS + done
    return header + env + CHANGE_TRACKING + SSHD_STEPS + done
