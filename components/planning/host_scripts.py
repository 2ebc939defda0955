"""Host preparation scripts rendered from the model (pure text, no pulumi).

Every script is idempotent: each step checks the state it wants before changing anything, so a
second run changes nothing (tests run them twice against recording stub binaries). No script
ever contains a secret: credentials reach a host only on a command's stdin, as Pulumi secrets.
"""

from __future__ import annotations

from textwrap import dedent

from components.config import Cluster, GpuNode, Host

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
if [ "$(dpkg-query -W -f='${Version}' kubeadm 2>/dev/null || true)" != "$KUBE_PKG_VERSION" ]; then
  log "installing Kubernetes $KUBE_PKG_VERSION packages"
  apt-get install -y --allow-change-held-packages \
    "kubeadm=$KUBE_PKG_VERSION" "kubelet=$KUBE_PKG_VERSION" "kubectl=$KUBE_PKG_VERSION"
  apt-mark hold kubeadm kubelet kubectl
fi
systemctl is-enabled --quiet kubelet || systemctl enable kubelet
"""

GPU_STEPS = r"""
# --- kernel command line: IOMMU pass-through for GPUDirect RDMA peer-to-peer DMA ------------
if ! grep -q 'iommu=pt' /proc/cmdline; then
  if [ ! -f /etc/default/grub.d/90-gpu-cluster.cfg ]; then
    mkdir -p /etc/default/grub.d
    printf 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT %s"\n' "$KERNEL_ARGS" \
      > /etc/default/grub.d/90-gpu-cluster.cfg
    mark grub
    log "kernel arguments staged; they apply at the next planned reboot (drain first)"
  fi
fi
settle grub update-grub

# --- drivers: host-installed or left to the GPU and Network Operators ------------------------
if [ "$GPU_DRIVER" = host ] && ! dpkg -s "nvidia-driver-$GPU_DRIVER_BRANCH-server-open" >/dev/null 2>&1; then
  apt-get install -y "nvidia-driver-$GPU_DRIVER_BRANCH-server-open" nvidia-fabricmanager-"$GPU_DRIVER_BRANCH"
fi
if [ "$GPU_DRIVER" = operator ] && [ -d /sys/module/nouveau ]; then
  log "nouveau is loaded; blacklisting it for the operator-managed driver"
fi
if write_if_changed /etc/modprobe.d/gpu-cluster-blacklist-nouveau.conf 'blacklist nouveau
options nouveau modeset=0'; then
  mark initramfs
fi
settle initramfs update-initramfs -u
# GPUDirect RDMA: DMA-BUF needs the open kernel modules and nothing else; nvidia-peermem is only
# loaded when the platform asks for it (legacy MLNX_OFED stacks).
if [ "$GPUDIRECT_MODE" = peermem ] && [ "$GPU_DRIVER" = host ] && [ ! -d /sys/module/nvidia_peermem ]; then
  modprobe nvidia-peermem
fi

# --- stable IPoIB names: rail r's HCA is ib<r> on every node -----------------------------------
# Pods attach to ib0 (rail 0) and LNet lists ib0..ib7, whatever the kernel enumerated.
rail=0
for hca in $RAIL_HCAS; do
  if [ ! -e "/sys/class/infiniband/$hca/device" ]; then
    echo "rail $rail: HCA $hca not found under /sys/class/infiniband; check the inventory" >&2
    exit 1
  fi
  pci="$(basename "$(readlink -f "/sys/class/infiniband/$hca/device")")"
  if write_if_changed "/etc/systemd/network/10-gpu-cluster-ib$rail.link" "[Match]
Path=pci-$pci
[Link]
Name=ib$rail"; then
    log "rail $rail: $hca ($pci) is named ib$rail from the next boot"
  fi
  rail=$((rail + 1))
done

# --- LNet over InfiniBand for the Lustre client ------------------------------------------------
if write_if_changed /etc/modprobe.d/lustre.conf "options lnet networks=\"$LNET_NETWORKS\""; then
  log "LNet configured: $LNET_NETWORKS (takes effect when lnet next loads)"
fi
"""


SCRATCH_STEPS = r"""
# --- local NVMe drives as one RAID0 scratch volume for data staging --------------------------
if [ ! -e /dev/md/scratch ]; then
  # Drives that already carry the array (a reboot before udev assembled it, an OS reinstall) are
  # assembled, never re-created. mdadm's output is captured first: under pipefail,
  # `mdadm | grep -q` fails when grep exits early (SIGPIPE) or one drive has no superblock.
  # shellcheck disable=SC2086 # the drive list is intentionally split into words
  examined="$(mdadm --examine $NVME_DEVICES 2>/dev/null || true)"
  if grep -q 'Array UUID' <<<"$examined"; then
    log "assembling the existing RAID0 scratch"
    # shellcheck disable=SC2086
    mdadm --assemble /dev/md/scratch $NVME_DEVICES
  else
    log "creating RAID0 scratch on $NVME_DEVICES"
    # shellcheck disable=SC2086
    mdadm --create /dev/md/scratch --run --level=0 --raid-devices="$NVME_COUNT" $NVME_DEVICES
  fi
fi
# Formatted only while no filesystem is there: an interrupted first run is finished, an existing
# filesystem is never formatted again.
if ! blkid -p /dev/md/scratch >/dev/null 2>&1; then
  mkfs."$SCRATCH_FS" /dev/md/scratch
fi
if ! grep -q '/dev/md/scratch' /etc/fstab; then
  printf '/dev/md/scratch %s %s defaults,noatime,nofail 0 0\n' "$SCRATCH_MOUNT" "$SCRATCH_FS" >> /etc/fstab
fi
mkdir -p "$SCRATCH_MOUNT"
mountpoint -q "$SCRATCH_MOUNT" || mount "$SCRATCH_MOUNT"
"""


def _kube_pkg_version(version: str) -> str:
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
            f'KUBE_PKG_VERSION="{_kube_pkg_version(cluster.kubernetes.version)}"\n'
            f'KUBE_REPO="https://pkgs.k8s.io/core:/stable:/v{minor}/deb"\n')


def prepare_gpu_node(cluster: Cluster, node: GpuNode, stack_key: str) -> str:
    gpu_op = cluster.platform.gpu_operator
    lnet_ifaces = ",".join(f"ib{r.index}" for r in node.rails)
    env = _common_env(cluster) + dedent(
        f"""\
        KERNEL_ARGS="iommu=pt"
        RAIL_HCAS="{' '.join(r.hca for r in node.rails)}"
        GPU_DRIVER="{gpu_op.driver}"
        GPU_DRIVER_BRANCH="{(gpu_op.driver_version or '580.0.0').split('.')[0]}"
        GPUDIRECT_MODE="dmabuf"
        NVME_DEVICES="{' '.join('/dev/' + d for d in node.template.nvme_devices)}"
        NVME_COUNT="{len(node.template.nvme_devices)}"
        SCRATCH_FS="{cluster.storage.scratch.filesystem}"
        SCRATCH_MOUNT="{cluster.storage.scratch.mount_point}"
        LNET_NETWORKS="{cluster.storage.lnet_network}({lnet_ifaces})"
        """
    )
    header = HEADER.format(
        title="Host preparation (GPU node)",
        hostname=node.hostname,
        address=node.management_ip,
        stack_key=stack_key,
    )
    # Only the scratch array depends on NVMe drives; every GPU node gets the GPU steps.
    steps = KUBE_PREREQS + GPU_STEPS + (SCRATCH_STEPS if node.template.nvme_devices else "")
    return header + env + steps + 'log "host preparation complete"\n'


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
