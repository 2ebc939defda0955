"""The config model as the fabric planner's input (pure)."""

from __future__ import annotations

import weakref

from components.config import Cluster
from components.gpu_nodes import GpuNode
from components.planning.fabric.model import (
    FabricNode,
    FabricPlan,
    FabricSpec,
    HcaPort,
    Partition,
    SmHost,
    StorageServer,
)
from components.planning.fabric.planner import leaf_names, plan_fabric


def fabric_spec(cluster: Cluster) -> FabricSpec:
    f = cluster.fabric
    return FabricSpec(
        switch_model=f.switch_model,
        radix=f.radix,
        link_gbps=cluster.gpu_nodes.template.link_gbps,
        nodes_per_su=f.nodes_per_su,
        rails_per_node=cluster.gpu_nodes.template.gpu.count,
        rails_per_leaf=f.rails_per_leaf,
        spines=f.spines,
        default_switch_rack=f.switch_rack,
        switch_guids=dict(f.switch_guids) | dict(cluster.inventory.switch_guids),
        partitions=tuple(Partition(name=p.name, pkey=p.pkey, members=p.members, ipoib=p.ipoib,
                                   data_path=p.data_path, port_guids=p.port_guids)
                         for p in f.partitions),
        storage_servers=tuple(StorageServer(s.hostname, s.rack, s.port_guids)
                              for s in f.storage_servers),
    )


# The plan of each live model, by identity: planned once (when the config is validated) and
# forgotten with the model. The model is frozen, so its plan never goes stale.
_PLANS: dict[int, FabricPlan] = {}


def plan(cluster: Cluster) -> FabricPlan:
    """The fabric plan of a config."""
    key = id(cluster)
    if key not in _PLANS:
        _PLANS[key] = _plan(cluster)
        weakref.finalize(cluster, _PLANS.pop, key, None)
    return _PLANS[key]


def _fabric_node(n: GpuNode) -> FabricNode:
    return FabricNode(hostname=n.hostname, su=n.su, slot=n.slot, rack=n.rack,
                      ports=tuple(HcaPort(rail=r.index, hca=r.hca, port_guid=r.port_guid)
                                  for r in n.rails))


def plans_fabric(cluster: Cluster) -> bool:
    """Whether this stack needs the whole fabric plan: the core part (its switches and subnet
    managers) and the platform (its HyperNodes), or an unsplit stack. A nodes part names its
    nodes' leaves (`owned_rail_leaves`); the workloads part needs neither."""
    return cluster.split is None or cluster.split.part in ("core", "platform")


def owned_rail_leaves(cluster: Cluster, nodes: tuple[GpuNode, ...]
                      ) -> dict[str, dict[int, str]]:
    """hostname -> rail -> leaf for `nodes`, as the whole plan's `rail_leaves` gives them,
    from their SUs alone (tests/test_fabric_planner.py checks the two agree)."""
    first = min((n.su for n in cluster.nodes), default=0)
    leaf = leaf_names([_fabric_node(n) for n in nodes], fabric_spec(cluster),
                      bool(cluster.fabric.subnet_managers), first)
    return {n.hostname: {r.index: leaf[(n.su, r.index)] for r in n.rails} for n in nodes}


def _plan(cluster: Cluster) -> FabricPlan:
    nodes = [_fabric_node(n) for n in cluster.nodes]
    hosts = {h.hostname: h for h in cluster.hosts}
    sms = [
        SmHost(hostname=sm.host, priority=sm.priority, rack=hosts[sm.host].rack,
               port_guid=hosts[sm.host].fabric_port_guid)
        for sm in cluster.fabric.subnet_managers
    ]
    return plan_fabric(nodes, sms, fabric_spec(cluster))


def rail_leaves(fabric: FabricPlan) -> dict[str, dict[int, str]]:
    """hostname -> rail -> leaf switch, for node labels."""
    return {n.hostname: {r.rail: r.leaf for r in n.rails} for n in fabric.nodes}
