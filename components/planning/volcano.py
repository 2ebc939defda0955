"""Volcano's scheduler configuration, its queues and the HyperNodes that mirror the fabric's tiers
(pure).
"""

from __future__ import annotations

from components.model.cluster import Cluster
from components.planning.fabric.model import FabricPlan
from components.planning.labels import LABEL_PREFIX


def volcano_scheduler_config() -> str:
    """Gang scheduling, GPU bin-packing, and SU-level packing over the HyperNodes.

    The Training Operator's PodGroups carry no `networkTopology`, so no job gets Volcano's hard
    HyperNode constraint (the SU constraint is the pods' own affinity, see
    workloads.topology_affinity). The HyperNodes still place every pod: for pods without a
    network topology, network-topology-aware scores each node by how full its HyperNodes
    already are (hypernode.binpack.normal-pod.*, on by default in Volcano 1.15;
    batchNodeOrderFnForNormalPods), so GPU work fills an SU before it opens the next and whole
    SUs stay free for the largest gangs. Weighted on GPUs here, like binpack."""
    return "\n".join([
        'actions: "enqueue, allocate, backfill"',
        "tiers:",
        "- plugins:",
        "  - name: priority",
        "  - name: gang",
        "    enablePreemptable: false",
        "  - name: conformance",
        "- plugins:",
        "  - name: drf",
        "    enablePreemptable: false",
        "  - name: predicates",
        "  - name: proportion",
        "  - name: nodeorder",
        # GPU pods fill partly used nodes first, keeping whole nodes free for training gangs;
        # one Deployment's serving replicas stay apart by their own anti-affinity.
        "  - name: binpack",
        "    arguments:",
        "      binpack.weight: 10",
        "      binpack.resources: nvidia.com/gpu",
        "      binpack.resources.nvidia.com/gpu: 10",
        "  - name: network-topology-aware",
        "    arguments:",
        "      hypernode.binpack.normal-pod.enable: true",
        "      hypernode.binpack.resources: nvidia.com/gpu",
        "      hypernode.binpack.resources.nvidia.com/gpu: 10",
        "",
    ])


def queue_capabilities(cluster: Cluster) -> dict[str, int]:
    """GPUs each Volcano queue may hold, derived from the workloads that must fit in it.

    Volcano's proportion plugin enqueues a PodGroup only while its queue's allocated GPUs plus
    the group's minResources stay within the queue's capability, so each cap is what its jobs
    need together: every training job's whole nodes; every serving replica at its maximum
    (rollouts replace in place, no surge pod); and the NCCL acceptance test on its nodes, run
    alone before the others start (its queue is empty afterwards).
    """
    gpus = cluster.gpu_nodes.template.gpu.count
    caps = {
        "training": sum(j.nodes * j.gpus_per_node for j in cluster.workloads.training),
        "inference": sum(s.autoscaling.max_replicas * s.gpus_per_pod
                         for s in cluster.workloads.inference),
    }
    test = cluster.workloads.nccl_test
    if test is not None:
        caps["acceptance"] = (test.nodes or len(cluster.in_service_nodes)) * gpus
    return caps


def queues(cluster: Cluster) -> list[dict]:
    """One queue per kind of work, capped at what that work needs (queue_capabilities)."""
    return [
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
         "metadata": {"name": name},
         "spec": {"weight": 1, "reclaimable": False,
                  "capability": {"nvidia.com/gpu": str(cap)}}}
        for name, cap in queue_capabilities(cluster).items()
    ]


def su_hypernode(su: int) -> str:
    """Tier-1 HyperNode of SU n; equals the node label labels.SU_LABEL of its members."""
    return f"su{su}"


def hypernodes(plan: FabricPlan) -> list[dict]:
    """HyperNodes from the fabric plan.

    Tier 1 = the nodes of one SU: every rail of every node in it lands on that SU's leaves, so
    traffic between them crosses one leaf. Tier 2 = the spine layer above the SUs (one
    `spine` HyperNode in a two-tier tree; one per pod of spines in a three-tier tree, with a
    tier-3 `core` above them). Members are listed by name, so a node added, removed or moved to
    another SU shows up in the preview diff of its HyperNode.
    """
    leaves: dict[int, list[str]] = {}
    pods: dict[int, set[int]] = {}
    for sw in plan.switches:
        if sw.role == "leaf" and sw.su is not None:
            leaves.setdefault(sw.su, []).append(sw.name)
            if sw.pod is not None:
                pods.setdefault(sw.pod, set()).add(sw.su)
    objs = [
        _hypernode(su_hypernode(su), 1, "su",
                   [("Node", h) for h in hosts],
                   {f"{LABEL_PREFIX}/su": su_hypernode(su)},
                   {f"{LABEL_PREFIX}/switches": ",".join(sorted(leaves.get(su, [])))})
        for su, hosts in plan.su_members().items()
    ]
    spines = sorted(s.name for s in plan.switches if s.role == "spine")
    if plan.tiers == 2:
        objs.append(_hypernode("spine", 2, "spine",
                               [("HyperNode", su_hypernode(su)) for su in plan.su_members()],
                               {}, {f"{LABEL_PREFIX}/switches": ",".join(spines)}))
    else:
        for pod, sus in sorted(pods.items()):
            members = [su for su in plan.su_members() if su in sus]
            pod_spines = [s.name for s in plan.switches if s.role == "spine" and s.pod == pod]
            objs.append(_hypernode(f"spine-p{pod}", 2, "spine",
                                   [("HyperNode", su_hypernode(su)) for su in members], {},
                                   {f"{LABEL_PREFIX}/switches": ",".join(sorted(pod_spines))}))
        cores = sorted(s.name for s in plan.switches if s.role == "core")
        objs.append(_hypernode("core", 3, "core",
                               [("HyperNode", f"spine-p{pod}") for pod in sorted(pods)], {},
                               {f"{LABEL_PREFIX}/switches": ",".join(cores)}))
    return objs


def _hypernode(name: str, tier: int, tier_name: str, members: list[tuple[str, str]],
               labels: dict[str, str], annotations: dict[str, str]) -> dict:
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name, "labels": {f"{LABEL_PREFIX}/tier": str(tier), **labels},
                     "annotations": annotations},
        "spec": {"tier": tier, "tierName": tier_name,
                 "members": [{"type": t, "selector": {"exactMatch": {"name": n}}}
                             for t, n in members]},
    }
