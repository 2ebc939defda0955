"""Which part of a split site builds what: the one table the wiring, the planning and the
bring-up report read (an unsplit stack builds everything). Pure: it reads the model only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from components.model.cluster import Cluster
from components.model.gpu_nodes import GpuNode

NodeScope = Literal["all", "own SUs", "none"]


@dataclass(frozen=True)
class Builds:
    """What one stack builds. `nodes`: the GPU nodes it prepares and joins (all of them, its
    own SUs', or none); the core prepares the control plane and subnet-manager hosts."""

    core: bool  # the control plane and SM hosts, the switches and subnet managers, kubeadm init
    nodes: NodeScope
    fabric_plan: bool  # the whole fabric plan: the core's switches, the platform's HyperNodes
    platform: bool  # the platform's releases and the storage layer's volumes
    workloads: bool
    reaches_core: bool  # reads the core's outputs (its kubeconfig) through a stack reference


UNSPLIT = Builds(core=True, nodes="all", fabric_plan=True, platform=True, workloads=True,
                 reaches_core=False)
PARTS: dict[str, Builds] = {
    "core": Builds(core=True, nodes="none", fabric_plan=True, platform=False, workloads=False,
                   reaches_core=False),
    # A nodes part names its own nodes' leaves (placement.owned_rail_leaves), no whole plan.
    "nodes": Builds(core=False, nodes="own SUs", fabric_plan=False, platform=False,
                    workloads=False, reaches_core=True),
    "platform": Builds(core=False, nodes="none", fabric_plan=True, platform=True,
                       workloads=False, reaches_core=True),
    "workloads": Builds(core=False, nodes="none", fabric_plan=False, platform=False,
                        workloads=True, reaches_core=True),
}


def builds(cluster: Cluster) -> Builds:
    return UNSPLIT if cluster.split is None else PARTS[cluster.split.part]


def owned_nodes(cluster: Cluster) -> tuple[GpuNode, ...]:
    """The GPU nodes this stack prepares and joins."""
    match builds(cluster).nodes:
        case "all":
            return cluster.nodes
        case "own SUs":
            sus = cluster.split.sus if cluster.split is not None else ()
            return tuple(n for n in cluster.nodes if n.su in sus)
    return ()
