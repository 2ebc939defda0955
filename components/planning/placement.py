"""The config model as the fabric planner's input (pure)."""

from __future__ import annotations

import weakref

from components.model.cluster import Cluster, SubnetManager
from components.model.gpu_nodes import GpuNode
from components.planning.fabric.model import (
    FabricNode,
    FabricPlan,
    FabricSpec,
    HcaPort,
    Partition,
    SmHost,
    StorageServer,
)
from components.planning.fabric.planner import kept_slots, leaf_names, plan_fabric


def _storage_servers(cluster: Cluster) -> tuple[StorageServer, ...]:
    return tuple(StorageServer(s.hostname, s.rack, s.port_guids)
                 for s in cluster.fabric.storage_servers)


def fabric_spec(cluster: Cluster) -> FabricSpec:
    """The compute fabric: the GPUs' rails, and the storage servers unless they have a
    fabric of their own."""
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
        storage_servers=() if f.storage_fabric else _storage_servers(cluster),
    )


def storage_fabric_spec(cluster: Cluster) -> FabricSpec | None:
    """The storage fabric (`fabric.storageFabric`), if the config has one: each node's storage
    ports as its rails (one leaf per port in every SU, so losing a leaf leaves every node its
    other path), the storage servers, and one partition at index 0 where the clients are
    limited members and the servers full."""
    f = cluster.fabric
    sf = f.storage_fabric
    if sf is None:
        return None
    return FabricSpec(
        switch_model=f.switch_model, radix=f.radix,
        link_gbps=cluster.gpu_nodes.template.link_gbps,
        nodes_per_su=f.nodes_per_su, rails_per_node=len(sf.hcas), rails_per_leaf=1,
        spines=sf.spines, default_switch_rack=f.switch_rack,
        switch_guids=dict(sf.switch_guids),
        partitions=(Partition(name="storage", pkey=sf.pkey, members="storage",
                              data_path=True),),
        storage_servers=_storage_servers(cluster), purpose="storage",
    )


# The plans of each live model, by identity: planned once (when the config is validated) and
# forgotten with the model. The model is frozen, so its plans never go stale.
_PLANS: dict[int, FabricPlan] = {}
_STORAGE_PLANS: dict[int, FabricPlan | None] = {}


def plan(cluster: Cluster) -> FabricPlan:
    """The (compute) fabric plan of a config."""
    key = id(cluster)
    if key not in _PLANS:
        _PLANS[key] = _plan(cluster)
        weakref.finalize(cluster, _PLANS.pop, key, None)
    return _PLANS[key]


def storage_plan(cluster: Cluster) -> FabricPlan | None:
    """The storage fabric's plan, None when the storage servers are on the compute rails."""
    key = id(cluster)
    if key not in _STORAGE_PLANS:
        _STORAGE_PLANS[key] = _storage_plan(cluster)
        weakref.finalize(cluster, _STORAGE_PLANS.pop, key, None)
    return _STORAGE_PLANS[key]


def _fabric_node(n: GpuNode) -> FabricNode:
    return FabricNode(hostname=n.hostname, su=n.su, slot=n.slot, rack=n.rack,
                      ports=tuple(HcaPort(rail=r.index, hca=r.hca, port_guid=r.port_guid)
                                  for r in n.rails))


def owned_rail_leaves(cluster: Cluster, nodes: tuple[GpuNode, ...]
                      ) -> dict[str, dict[int, str]]:
    """hostname -> rail -> leaf for `nodes`, as the whole plan's `rail_leaves` gives them,
    from their SUs alone (tests/test_fabric_planner.py checks the two agree)."""
    first = min((n.su for n in cluster.nodes), default=0)
    spec = fabric_spec(cluster)
    kept = kept_slots(spec, len(cluster.fabric.subnet_managers))
    leaf = leaf_names([_fabric_node(n) for n in nodes], spec, kept, first)
    return {n.hostname: {r.index: leaf[(n.su, r.index)] for r in n.rails} for n in nodes}


def _sm_hosts(cluster: Cluster, sms: tuple[SubnetManager, ...]) -> list[SmHost]:
    hosts = {h.hostname: h for h in cluster.hosts}
    return [SmHost(hostname=sm.host, priority=sm.priority, rack=hosts[sm.host].rack,
                   port_guid=hosts[sm.host].fabric_port_guid) for sm in sms]


def _plan(cluster: Cluster) -> FabricPlan:
    nodes = [_fabric_node(n) for n in cluster.nodes]
    return plan_fabric(nodes, _sm_hosts(cluster, cluster.fabric.subnet_managers),
                       fabric_spec(cluster))


def _storage_plan(cluster: Cluster) -> FabricPlan | None:
    spec, sf = storage_fabric_spec(cluster), cluster.fabric.storage_fabric
    if spec is None or sf is None:
        return None
    guids = {(n.hostname, p.index): p.port_guid for n in cluster.nodes for p in n.storage_ports}
    nodes = [FabricNode(hostname=n.hostname, su=n.su, slot=n.slot, rack=n.rack,
                        ports=tuple(HcaPort(rail=i, hca=hca, port_guid=guids.get((n.hostname, i)))
                                    for i, hca in enumerate(sf.hcas)))
             for n in cluster.nodes]
    return plan_fabric(nodes, _sm_hosts(cluster, sf.subnet_managers), spec)


def rail_leaves(fabric: FabricPlan) -> dict[str, dict[int, str]]:
    """hostname -> rail -> leaf switch, for node labels."""
    return {n.hostname: {r.rail: r.leaf for r in n.rails} for n in fabric.nodes}
