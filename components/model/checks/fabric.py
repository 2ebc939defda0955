"""The InfiniBand fabrics: each node's rails, GUIDs, SU slots, subnet managers, the storage fabric
and the partitions."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from components.model.checks.common import duplicates
from components.model.cluster import Cluster, StorageServer
from components.model.fields import Problem


def _netdev_problems(key: str, netdevs: Sequence[str], rails: int,
                     rail0: str | None = None) -> Iterator[Problem]:
    """One IPoIB interface per rail, each once; rail 0's is the master of the pods'
    attachment, one name cluster-wide (`rail0`: the template's, for an override)."""
    if len(netdevs) != rails:
        yield Problem(key, list(netdevs), f"{len(netdevs)} rail interfaces for {rails} rails",
                      "list the IPoIB interface of every rail's HCA, in rail order "
                      "(`ibdev2netdev`: mlx5_0 ==> ibp24s0)")
        return
    for path, value, first in duplicates([(f"{key}[{r}]", n) for r, n in enumerate(netdevs)]):
        yield Problem(path, value, f"interface already used by {first}",
                      "each rail has its own HCA and so its own interface; check `ibdev2netdev`")
    if rail0 and netdevs and netdevs[0] != rail0:
        yield Problem(f"{key}[0]", netdevs[0],
                      f"rail 0 differs from the template's {rail0}, the one interface the pods' "
                      "RDMA attachment uses as master on every node",
                      f"name rail 0's port {rail0} on this node too (a systemd .link file with a "
                      "name outside ibN), or cable the node so rail 0 is that port")


def rail_hcas(c: Cluster) -> Iterator[Problem]:
    """One HCA and one IPoIB interface per GPU rail, each used once per node."""
    nodes = c.nodes
    gpus = c.gpu_nodes.template.gpu.count
    template_hcas = c.gpu_nodes.template.hcas
    if len(template_hcas) != gpus:
        yield Problem("gpuNodes.template.hcas", list(template_hcas),
                      f"{len(template_hcas)} compute HCAs for {gpus} GPUs",
                      "list exactly one compute HCA per GPU rail (rail r = position r)")
    template = c.gpu_nodes.template
    yield from _netdev_problems("gpuNodes.template.netdevs", template.netdevs, gpus)
    for n in nodes:
        where = f"{n.origin} ({n.hostname})"
        own_hcas = n.hostname in c.gpu_nodes.overrides and \
            c.gpu_nodes.overrides[n.hostname].hcas is not None
        if len(n.rails) != gpus and own_hcas:
            yield Problem(f"{where}.hcas", [r.hca for r in n.rails],
                          f"{len(n.rails)} compute HCAs for {gpus} GPUs",
                          "list exactly one compute HCA per GPU rail (rail r = position r)")
        for path, value, first in duplicates([(f"{where}.rails[{r.index}].hca", r.hca)
                                               for r in n.rails]):
            yield Problem(path, value, f"HCA already used by {first}",
                          "each rail needs its own HCA; check `ibstat -l` on the host")
        own = c.gpu_nodes.overrides.get(n.hostname)
        if own and (own.netdevs is not None or own.hcas is not None):
            key = (f"gpuNodes.overrides.{n.hostname}.netdevs" if own.netdevs is not None
                   else "gpuNodes.template.netdevs")
            yield from _netdev_problems(key, [r.netdev for r in n.rails if r.netdev],
                                        len(n.rails), template.netdevs[0])


def unique_guids(c: Cluster) -> Iterator[Problem]:
    """Port and switch GUIDs are unique across nodes, hosts, the stack and the inventory."""
    nodes = c.nodes
    guids = [(f"inventory:{n.hostname}.rails[{r.index}].portGuid", r.port_guid)
             for n in nodes for r in n.rails]
    guids += [(f"inventory:{n.hostname}.storage{p.index}.portGuid", p.port_guid)
              for n in nodes for p in n.storage_ports]
    guids += [(f"hosts[{i}].fabricPortGuid", h.fabric_port_guid) for i, h in enumerate(c.hosts)]
    guids += [(f"fabric.storageServers[{i}].portGuids[{j}]", g)
              for i, s in enumerate(c.fabric.storage_servers) for j, g in enumerate(s.port_guids)]
    guids += [(f"fabric.switchGuids.{k}", v) for k, v in sorted(c.fabric.switch_guids.items())]
    if c.fabric.storage_fabric is not None:
        guids += [(f"fabric.storageFabric.switchGuids.{k}", v)
                  for k, v in sorted(c.fabric.storage_fabric.switch_guids.items())]
    guids += [(f"inventory:switches.{k}", v)
              for k, v in sorted(c.inventory.switch_guids.items())]
    for path, value, first in duplicates(guids):
        yield Problem(path, value, f"GUID already used at {first}",
                      "GUIDs are unique per port; re-read them with `ibstat` on each host")


def su_slots(c: Cluster) -> Iterator[Problem]:
    """A slot in an SU is a fixed set of leaf ports: in range, one node each."""
    nodes = c.nodes
    per_su = c.fabric.nodes_per_su
    for n in nodes:
        if n.slot >= per_su:
            yield Problem(f"{n.origin} ({n.hostname}).slot", n.slot,
                          f"SU slot outside 0..{per_su - 1}",
                          f"an SU holds {per_su} nodes: start a new range with su: {n.su + 1}")
    for path, value, first in duplicates([(f"{n.origin} ({n.hostname})", (n.su, n.slot))
                                           for n in nodes]):
        yield Problem(path, f"su {value[0]} slot {value[1]}", f"same SU slot as {first}",
                      "give each node its own slot (firstSlot or an override)")


def subnet_managers(c: Cluster) -> Iterator[Problem]:
    """Subnet managers on sm-hosts, one each, distinct priorities, two in production."""
    roles = {h.hostname: h.role for h in c.hosts}
    sms = c.fabric.subnet_managers
    for i, sm in enumerate(sms):
        if roles.get(sm.host) != "sm-host":
            yield Problem(f"fabric.subnetManagers[{i}].host", sm.host,
                          "is not a host with role sm-host",
                          "name a hosts[] entry whose role is sm-host")
    for path, value, first in duplicates([(f"fabric.subnetManagers[{i}].priority", s.priority)
                                           for i, s in enumerate(sms)]):
        yield Problem(path, value, f"same sm_priority as {first}",
                      "give the master the highest priority (e.g. 15) and the standby a lower one")
    for path, value, first in duplicates([(f"fabric.subnetManagers[{i}].host", s.host)
                                           for i, s in enumerate(sms)]):
        yield Problem(path, value, f"subnet manager host repeated ({first})",
                      "run one opensm per SM host")
    if c.environment == "production" and len(sms) < 2:
        yield Problem("fabric.subnetManagers", [s.host for s in sms],
                      "production needs a master and a standby subnet manager",
                      "add a second sm-host with a lower priority")


def storage_fabric(c: Cluster) -> Iterator[Problem]:
    """A storage fabric of its own: its subnet managers on sm-hosts of their own, storage ports
    that are not compute rails, one interface name per port, and servers to carry."""
    sf = c.fabric.storage_fabric
    yield from _storage_port_facts(c)
    if sf is None:
        return
    key = "fabric.storageFabric"
    roles = {h.hostname: h.role for h in c.hosts}
    compute_sms = {sm.host for sm in c.fabric.subnet_managers}
    for i, sm in enumerate(sf.subnet_managers):
        if roles.get(sm.host) != "sm-host":
            yield Problem(f"{key}.subnetManagers[{i}].host", sm.host,
                          "is not a host with role sm-host",
                          "name a hosts[] entry whose role is sm-host")
        elif sm.host in compute_sms:
            yield Problem(f"{key}.subnetManagers[{i}].host", sm.host,
                          "also runs the compute fabric's subnet manager: an SM host has one "
                          "fabric port (hosts[].fabricPortGuid), on one fabric",
                          "give the storage fabric sm-hosts of its own")
    for path, value, first in duplicates([(f"{key}.subnetManagers[{i}].priority", s.priority)
                                           for i, s in enumerate(sf.subnet_managers)]):
        yield Problem(path, value, f"same sm_priority as {first}",
                      "give the master the highest priority (e.g. 15) and the standby a lower one")
    if c.environment == "production" and len(sf.subnet_managers) < 2:
        yield Problem(f"{key}.subnetManagers", [s.host for s in sf.subnet_managers],
                      "production needs a master and a standby subnet manager on each fabric",
                      "add a second sm-host with a lower priority")
    rails = set(c.gpu_nodes.template.hcas)
    for i, hca in enumerate(sf.hcas):
        if hca in rails:
            yield Problem(f"{key}.hcas[{i}]", hca, "is a compute rail (gpuNodes.template.hcas)",
                          "name the storage ConnectX-7 ports (DGX H100: mlx5_7 and mlx5_1, "
                          "port 1 of each storage card; `ibdev2netdev` lists them)")
    for path, value, first in duplicates([(f"{key}.hcas[{i}]", h)
                                           for i, h in enumerate(sf.hcas)]):
        yield Problem(path, value, f"HCA already listed at {first}", "list each storage port once")
    if len(sf.netdevs) != len(sf.hcas):
        yield Problem(f"{key}.netdevs", list(sf.netdevs),
                      f"{len(sf.netdevs)} interface names for {len(sf.hcas)} storage HCAs",
                      "list one IPoIB interface per storage HCA, in the same order")
    netdevs = set(c.gpu_nodes.template.netdevs)
    for i, netdev in enumerate(sf.netdevs):
        if netdev in netdevs:
            yield Problem(f"{key}.netdevs[{i}]", netdev,
                          "is a compute rail's interface (gpuNodes.template.netdevs)",
                          "use the storage port's IPoIB interface (`ibdev2netdev`)")
    if not c.fabric.storage_servers:
        yield Problem(f"{key}", "no fabric.storageServers",
                      "a storage fabric with no storage server on it carries nothing",
                      "list the Lustre servers' ports under fabric.storageServers, or remove "
                      "fabric.storageFabric")


def _storage_port_facts(c: Cluster) -> Iterator[Problem]:
    """The inventory's storage-port rows (`storage<i>`) name ports the config has."""
    sf = c.fabric.storage_fabric
    hcas = sf.hcas if sf is not None else ()
    for n in c.nodes:
        for p in n.storage_ports:
            where = f"inventoryFile ({n.hostname} storage{p.index})"
            if p.index >= len(hcas):
                yield Problem(where, p.index, f"storage port {p.index} but fabric.storageFabric "
                              f"has {len(hcas)} storage HCAs",
                              "remove the row, or configure fabric.storageFabric.hcas")
            elif p.hca is not None and p.hca != hcas[p.index]:
                yield Problem(where, p.hca, f"the host calls storage port {p.index} {p.hca}, "
                              f"fabric.storageFabric.hcas[{p.index}] says {hcas[p.index]}",
                              "make the inventory and fabric.storageFabric.hcas agree")


def partitions(c: Cluster) -> Iterator[Problem]:
    """Partitions: distinct pkeys and names, one data path, each isolating something."""
    for path, value, first in duplicates([(f"fabric.partitions[{i}].pkey", hex(p.pkey))
                                           for i, p in enumerate(c.fabric.partitions)]):
        yield Problem(path, value, f"pkey already used by {first}", "give each tenant its own pkey")
    for path, value, first in duplicates([(f"fabric.partitions[{i}].name", p.name)
                                           for i, p in enumerate(c.fabric.partitions)]):
        yield Problem(path, value, f"partition name already used by {first}",
                      "give each partition its own name")
    yield from _partition_problems(c.fabric.partitions, c.fabric.storage_servers)


def _partition_problems(parts: Sequence[Any], servers: Sequence[StorageServer]
                        ) -> Iterator[Problem]:
    """One partition carries the data path at P_Key index 0 with every compute port full;
    every other one must isolate something."""
    data_path = [i for i, p in enumerate(parts) if p.data_path]
    if len(data_path) != 1:
        yield Problem("fabric.partitions", [p.name for p in parts],
                      f"{len(data_path)} partitions are marked dataPath; NCCL, the pods' IPoIB "
                      "attachment and LNet use the P_Key at index 0, which must be one "
                      "partition where every compute port is a full member (on the Default "
                      "partition compute ports are limited and cannot reach each other)",
                      "mark exactly one partition dataPath: true (members: compute)")
    for i in data_path:
        if parts[i].members == "storage":
            yield Problem(f"fabric.partitions[{i}].members", parts[i].members,
                          "the data path partition makes compute ports limited members: "
                          "NCCL ranks could not reach each other",
                          "use members: compute (servers as portGuids)")
        if not parts[i].ipoib:
            yield Problem(f"fabric.partitions[{i}].ipoib", False,
                          "the pods' IPoIB attachment and LNet (o2ib) need IPoIB on the data "
                          "path partition", "set ipoib: true")
    storage = {g: f"fabric.storageServers[{i}]" for i, s in enumerate(servers)
               for g in s.port_guids}
    for i, p in enumerate(parts):
        for j, g in enumerate(p.port_guids):
            if g in storage:
                yield Problem(f"fabric.partitions[{i}].portGuids[{j}]", g,
                              f"is a port of {storage[g]}, which every compute and storage "
                              "partition has as a full member already",
                              "remove it from portGuids (portGuids are for servers the fabric "
                              "plan does not cable)")
        if p.members == "storage" and not p.port_guids and not storage:
            yield Problem(f"fabric.partitions[{i}].portGuids", [],
                          "a storage partition makes compute ports limited members; with no "
                          "full member (server port) nobody can talk on it",
                          "list the storage servers in fabric.storageServers")
    signature = [(f"fabric.partitions[{i}].members",
                  (p.members, tuple(sorted(p.port_guids)))) for i, p in enumerate(parts)]
    for path, value, first in duplicates(signature):
        yield Problem(path, value[0], f"same members as {first.rsplit('.', 1)[0]}: a second "
                      "P_Key over the same ports isolates nothing",
                      "remove it, or give it other members (portGuids)")
