"""The Kubernetes nodes the stack plans, as the scheduler will see them (pure, no pulumi).

Labels, taints and allocatable resources as kubeadm, GPU Feature Discovery and the device
plugins set them, so "does this pod have a node at all?" can be answered before anything runs
(`scheduling.homes`) — and the cluster twin creates the very same Node objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from components.model.cluster import Cluster
from components.planning import kubeadm, placement, rdma
from components.planning.labels import CONTROL_PLANE_LABEL, CONTROL_PLANE_TAINT, GPU_TAINT

# Memory of one H100 SXM 80GB as GPU Feature Discovery reports it (MiB).
H100_MEMORY_MIB = "81559"
# The control-plane hosts' size is not part of the config: a typical management server.
CONTROL_PLANE_CPU, CONTROL_PLANE_MEMORY = "32", "256Gi"
# The kubelet's root file system (ephemeral-storage) less the 10% nodefs eviction threshold:
# a DGX H100 boots from 2 x 1.92 TB NVMe in RAID 1 (1.75 TiB); a management server's 480 GB.
GPU_NODE_EPHEMERAL, CONTROL_PLANE_EPHEMERAL = "1610Gi", "400Gi"


@dataclass(frozen=True)
class PlannedNode:
    name: str
    role: str  # control-plane | gpu-worker
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, str], ...]
    allocatable: Mapping[str, str] = field(default_factory=dict)
    # Labels its kubelet registers that a later step removes (kubeadm.REGISTERED_LABELS:
    # until the acceptance gate passed there); not in `labels`, the steady state.
    registered: Mapping[str, str] = field(default_factory=dict)


def _allocatable(cpu: int, memory_gib: int, cluster: Cluster) -> tuple[str, str]:
    """What the kubelet leaves to pods: capacity minus system and kube reservations."""
    k = cluster.kubernetes.kubelet
    cpus = cpu - int(k.system_reserved_cpu) - int(k.kube_reserved_cpu)
    reserved = sum(int(q.removesuffix("Gi")) for q in (k.system_reserved_memory,
                                                      k.kube_reserved_memory)
                   if q.endswith("Gi"))
    return str(cpus), f"{memory_gib - reserved}Gi"


def planned_nodes(cluster: Cluster) -> list[PlannedNode]:
    """Every node that joins the cluster: the control-plane hosts, then the GPU nodes."""
    common = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    pods = str(cluster.kubernetes.kubelet.max_pods)
    nodes = [
        PlannedNode(h.hostname, "control-plane",
                    {**common, "kubernetes.io/hostname": h.hostname, CONTROL_PLANE_LABEL: "",
                     "node.kubernetes.io/exclude-from-external-load-balancers": ""},
                    (CONTROL_PLANE_TAINT,),
                    {"cpu": CONTROL_PLANE_CPU, "memory": CONTROL_PLANE_MEMORY, "pods": pods,
                     "ephemeral-storage": CONTROL_PLANE_EPHEMERAL})
        for h in cluster.control_plane
    ]
    leaves = placement.rail_leaves(placement.plan(cluster))
    for n in cluster.nodes:
        cpu, memory = _allocatable(n.template.cpu_cores, n.template.memory_gib, cluster)
        labels = {**common, "kubernetes.io/hostname": n.hostname,
                  **kubeadm.node_labels(cluster, n, leaves.get(n.hostname)),
                  # GPU Feature Discovery
                  "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(n.gpu.count),
                  "nvidia.com/gpu.memory": H100_MEMORY_MIB}
        nodes.append(PlannedNode(
            n.hostname, "gpu-worker", labels, (GPU_TAINT,),
            {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": GPU_NODE_EPHEMERAL,
             "nvidia.com/gpu": str(n.gpu.count),
             # The RDMA shared device plugin: rdmaHcaMax pods may share the node's HCAs.
             rdma.rdma_resource(cluster): str(rdma.RDMA_HCA_MAX)},
            dict(kubeadm.REGISTERED_LABELS) if cluster.acceptance_gated else {}))
    return nodes
