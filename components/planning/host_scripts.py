"""Host preparation scripts rendered from the model (pure text, no pulumi).

Every script is idempotent: each step checks the state it wants before changing anything, so a
second run changes nothing (tests run them twice against recording stub binaries). No script
ever contains a secret: credentials reach a host only on a command's stdin, as Pulumi secrets.
"""

from __future__ import annotations

from collections.abc import Iterable
from textwrap import dedent

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
if ! grep -qsF "$KUBE_REPO/ /" /etc/apt/sources.list.d/kubernetes.list; then
  install -d -m 0755 /etc/apt/keyrings /etc/apt/sources.list.d
  curl -fsSL "$KUBE_REPO/Release.key" \
    | gpg --batch --yes --dearmor -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
  printf 'deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] %s/ /\n' "$KUBE_REPO" \
    > /etc/apt/sources.list.d/kubernetes.list
  apt-get update
fi

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


def _common_env(cluster: Cluster) -> str:
    modules = "overlay br_netfilter"
    sysctls = "\n".join(
        [
            "net.bridge.bridge-nf-call-iptables = 1",
            "net.bridge.bridge-nf-call-ip6tables = 1",
            "net.ipv4.ip_forward = 1",
            "vm.max_map_count = 1048576",
            "fs.inotify.max_user_instances = 8192",
        ]
    )
    minor = ".".join(cluster.kubernetes.version.split(".")[:2])
    # Not dedent(): the multi-line SYSCTLS value would leave the lines indented.
    return (f'MODULES="{modules}"\n'
            f'SYSCTLS="{sysctls}"\n'
            f'KUBE_PKG_VERSION="{kube_pkg_version(cluster.kubernetes.version)}"\n'
            f'KUBE_REPO="https://pkgs.k8s.io/core:/stable:/v{minor}/deb"\n')


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
    ) + f"NOUVEAU_BLACKLIST='{reboot.NOUVEAU_BLACKLIST}'\n" + _lnet_env(cluster, node)
    header = HEADER.format(
        title="Host preparation (GPU node)",
        hostname=node.hostname,
        address=node.management_ip,
        stack_key=stack_key,
    )
    # Only the scratch array depends on NVMe drives; every GPU node gets the GPU steps. The
    # drive selection runs first: it only reads, and stops the script before any change.
    scratch = node.template.data_drives is not None
    steps = (BOARD_CHECK + (SCRATCH_SELECT if scratch else "") + KUBE_PREREQS + GPU_STEPS
             + (SCRATCH_STEPS if scratch else ""))
    return header + env + steps + 'log "host preparation complete"\n'


def dhcp_hosts(nodes: Iterable[GpuNode]) -> str:
    """dnsmasq's --dhcp-hostsfile (`<MAC>,<address>,<hostname>`): the management address each
    GPU node's board gets, for the DHCP/PXE server of the management network."""
    return "".join(f"{n.management_mac},{n.management_ip},{n.hostname}\n"
                   for n in nodes if n.management_mac)


def prepare_host(cluster: Cluster, host: Host, stack_key: str) -> str:
    """Control-plane and SM hosts: Kubernetes prerequisites or the subnet-manager packages."""
    header = HEADER.format(
        title=f"Host preparation ({host.role})",
        hostname=host.hostname,
        address=host.management_ip,
        stack_key=stack_key,
    )
    if host.role == "control-plane":
        return header + _common_env(cluster) + KUBE_PREREQS + 'log "host preparation complete"\n'
    if host.role == "sm-host":
        return header + dedent(
            """\
            for pkg in opensm infiniband-diags; do
              dpkg -s "$pkg" >/dev/null 2>&1 || apt-get install -y "$pkg"
            done
            log "host preparation complete"
            """
        )
    return header + 'log "nothing to prepare"\n'
