"""Tunables with no key in the stack file: named, commented defaults in one place, each with the
source it follows. Changing one changes what every host or node gets (the preview shows where).
"""

from __future__ import annotations

# ---------------------------------------------------------------- kernel

# The kernel command line a GPU node boots with unless gpuNodes.template.kernelArgs says
# otherwise, besides DGX OS's own. iommu=pt: IOMMU pass-through for GPUDirect RDMA's
# peer-to-peer DMA (NVIDIA's GPUDirect RDMA and DGX user guides).
GPU_NODE_KERNEL_ARGS = ("iommu=pt",)

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

# What pod networking needs (kubeadm's preflight checks the first three), and the limits large
# jobs reach: memory maps (allocators of big models) and inotify instances (one per container
# runtime watcher).
POD_NETWORK_SYSCTLS = (
    "net.bridge.bridge-nf-call-iptables = 1",
    "net.bridge.bridge-nf-call-ip6tables = 1",
    "net.ipv4.ip_forward = 1",
    "vm.max_map_count = 1048576",
    "fs.inotify.max_user_instances = 8192",
)
# Kernel modules loaded at boot for pod networking (overlayfs for containerd, bridge netfilter
# for kube-proxy).
POD_NETWORK_MODULES = "overlay br_netfilter"

# ---------------------------------------------------------------- kubelet

# Hard eviction: the kubelet evicts pods when a node's free memory or root file system falls
# below these (Kubernetes' own defaults are 100Mi and 10%: 2 GiB leaves room for the GPU
# driver's and NCCL's pinned host memory).
KUBELET_EVICTION_HARD = {"memory.available": "2Gi", "nodefs.available": "10%"}

# ---------------------------------------------------------------- RDMA network

# Pod addresses nv-ipam hands each node on the RDMA network: 8 GPU pods at most, and slack.
PER_NODE_BLOCK = 64
