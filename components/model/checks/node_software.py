"""What each GPU node runs: the topology manager against its GPUs, the pinned driver, GPUDirect
Storage."""

from __future__ import annotations

from collections.abc import Iterator

from components.model.cluster import Cluster
from components.model.fields import Problem


def topology_manager_fits_gpus(c: Cluster) -> Iterator[Problem]:
    """The kubelet's topology policy admits pods that take every GPU."""
    kubelet = c.kubernetes.kubelet
    gpu = c.gpu_nodes.template.gpu
    if kubelet.topology_manager_policy == "single-numa-node" and gpu.count > 1 \
            and gpu.numa_nodes > 1:
        yield Problem("kubernetes.kubelet.topologyManagerPolicy", "single-numa-node",
                      f"rejects pods needing all {gpu.count} GPUs, which span {gpu.numa_nodes} "
                      "NUMA nodes", "use best-effort or restricted with scope pod")


def driver_pinned(c: Cluster) -> Iterator[Problem]:
    """The GPU driver is pinned, whoever owns it: the operator's would follow the chart's
    default, and the hosts' is the release their planned reboots install and check."""
    gpu_op = c.platform.gpu_operator
    if gpu_op.driver_version is None:
        why = ("is unset: the driver would follow the chart's default, so a chart upgrade "
               "would also replace the GPU driver on every node") if gpu_op.driver == "operator" \
            else ("is unset: with driver: host the stack installs and checks this release on "
                  "every node; without it each GPU node keeps whatever driver it came with")
        yield Problem("platform.gpuOperator.driverVersion", None, why,
                      "pin the driver the cluster was qualified with, e.g. driverVersion: "
                      '"580.95.05"')


def gpudirect_storage(c: Cluster) -> Iterator[Problem]:
    """GPUDirect Storage needs a filesystem nvidia-fs serves: XFS or ext4 on local NVMe (the
    scratch array), NFS over RDMA, or a vendor's RDMA filesystem (DDN EXAScaler, WekaFS, VAST,
    IBM Spectrum Scale, BeeGFS: nvidia-fs 2.30, "Key Features"). The stack's shared filesystem
    is the community Lustre client, which is not among them, so GDS serves the scratch array or
    nothing."""
    if c.platform.gpu_operator.gpudirect_storage and c.gpu_nodes.template.data_drives is None:
        yield Problem("platform.gpuOperator.gpudirectStorage", True,
                      "has no filesystem to serve: nvidia-fs supports XFS or ext4 on local NVMe "
                      "and vendors' RDMA filesystems (DDN EXAScaler, WekaFS, VAST, Spectrum "
                      "Scale, BeeGFS), not the community Lustre client the stack mounts, and the "
                      "GPU nodes have no scratch array (gpuNodes.template.dataDrives)",
                      "set gpudirectStorage: false, or give the GPU nodes their NVMe scratch "
                      "array (dataDrives)")
