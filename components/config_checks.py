"""What pydantic cannot see field by field: the relations between fields of a built model —
duplicates, overlaps, references, GPU arithmetic, SU slots, version pairs. Every check takes the
model and yields a Problem with its key path and fix; nothing here builds or changes the model."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from components.compat import compatibility_problems
from components.config import Cluster, StorageServer
from components.config_types import Problem
from components.planning import lnet
from components.planning.rdma import PER_NODE_BLOCK
from components.planning.ssh_keys import key_id
from components.planning.workloads import mount_root  # where a job mounts a path's volume

# kubeadm leaves kube-controller-manager's --node-cidr-mask-size at 24: every node gets a /24 of
# the pod CIDR, and a node that finds none left never gets a pod network (it stays NotReady).
NODE_CIDR_MASK = 24
# nccl-tests busbw below half of the fabric's line rate: a fabric that slow is broken (a rail
# down, PCIe or GPUDirect RDMA off), not slow (docs/acceptance.md).
MIN_NCCL_EFFICIENCY = 0.5
# Mounting a volume over these hides what the container image needs to run.
_SYSTEM_DIRS = frozenset({"", "bin", "boot", "dev", "etc", "lib", "lib64", "proc", "run", "sbin",
                          "sys", "usr", "var"})

def _netdev_problems(key: str, netdevs: Sequence[str], rails: int,
                     rail0: str | None = None) -> Iterator[Problem]:
    """One IPoIB interface per rail, each once; rail 0's is the master of the pods'
    attachment, one name cluster-wide (`rail0`: the template's, for an override)."""
    if len(netdevs) != rails:
        yield Problem(key, list(netdevs), f"{len(netdevs)} rail interfaces for {rails} rails",
                      "list the IPoIB interface of every rail's HCA, in rail order "
                      "(`ibdev2netdev`: mlx5_0 ==> ibp24s0)")
        return
    for path, value, first in _duplicates([(f"{key}[{r}]", n) for r, n in enumerate(netdevs)]):
        yield Problem(path, value, f"interface already used by {first}",
                      "each rail has its own HCA and so its own interface; check `ibdev2netdev`")
    if rail0 and netdevs and netdevs[0] != rail0:
        yield Problem(f"{key}[0]", netdevs[0],
                      f"rail 0 differs from the template's {rail0}, the one interface the pods' "
                      "RDMA attachment uses as master on every node",
                      f"name rail 0's port {rail0} on this node too (a systemd .link file with a "
                      "name outside ibN), or cable the node so rail 0 is that port")


# ---------------------------------------------------------------- semantic checks


def _duplicates(items: list[tuple[str, Any]]) -> Iterator[tuple[str, Any, str]]:
    """Yield (path, value, first_path) for every value already seen at an earlier path."""
    seen: dict[Any, str] = {}
    for path, value in items:
        if value is None:
            continue
        if value in seen:
            yield path, value, seen[value]
        else:
            seen[value] = path


def _credential_problems(c: Cluster) -> Iterator[Problem]:
    creds = c.credentials
    if creds.ssh_public_key is None:
        if c.environment == "production":
            yield Problem("credentials.sshPublicKey", None, "is required in production: "
                          "without it a new SSH key reaches every host unreviewed",
                          "paste the public half of sshPrivateKey (`ssh-keygen -y -f <key>`)")
        if creds.ssh_authorized_keys:
            yield Problem("credentials.sshAuthorizedKeys", len(creds.ssh_authorized_keys),
                          "needs credentials.sshPublicKey (the key in use is always authorised)",
                          "set credentials.sshPublicKey to the public half of sshPrivateKey")
        return
    seen = {key_id(creds.ssh_public_key): "credentials.sshPublicKey"}
    for i, key in enumerate(creds.ssh_authorized_keys):
        path = f"credentials.sshAuthorizedKeys[{i}]"
        if key_id(key) in seen:
            yield Problem(path, key_id(key), f"is the key of {seen[key_id(key)]} again",
                          "list each key once (the key in use is authorised already)")
        seen.setdefault(key_id(key), path)


Check = Callable[[Cluster], Iterator[Problem]]


def _node_expansion(c: Cluster) -> Iterator[Problem]:
    """What merging template, ranges, overrides and inventory found (`gpu_nodes`)."""
    yield from c.expansion.problems


def _hostname_paths(c: Cluster) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(key path, hostname) of every host, then of every GPU node."""
    return ([(f"hosts[{i}].hostname", h.hostname) for i, h in enumerate(c.hosts)],
            [(f"{n.origin} ({n.hostname})", n.hostname) for n in c.nodes])


def _management_ips(c: Cluster) -> list[tuple[str, Any]]:
    """(key path, management address) of every host and GPU node."""
    return ([(f"hosts[{i}].managementIp", h.management_ip) for i, h in enumerate(c.hosts)]
            + [(f"{n.origin} ({n.hostname}).managementIp", n.management_ip) for n in c.nodes])


def _decommissioned_nodes_exist(c: Cluster) -> Iterator[Problem]:
    """Nodes being decommissioned are nodes of this stack."""
    nodes = c.nodes
    defined = {n.hostname for n in nodes}
    for i, host in enumerate(c.gpu_nodes.decommission):
        if host not in defined:
            yield Problem(f"gpuNodes.decommission[{i}]", host, "is not a GPU node of this stack",
                          "name a node its gpuNodes ranges define; once a node is removed from "
                          "the ranges, drop it from decommission too")


def _ssh_user_not_root(c: Cluster) -> Iterator[Problem]:
    """Planned reboots need a login that /run/nologin keeps out."""
    if c.ssh_user == "root":
        # A planned reboot schedules `shutdown -r +1`, whose /run/nologin keeps the check after
        # the reboot from logging in before the host went down; pam_nologin exempts root.
        yield Problem("sshUser", c.ssh_user, "root logins pass /run/nologin, so the check after "
                      "a planned reboot could run on the host before it went down",
                      "log in as an unprivileged user with passwordless sudo (e.g. ubuntu)")


def _unique_hostnames(c: Cluster) -> Iterator[Problem]:
    """Every host and GPU node has its own name (names become Kubernetes names)."""
    host_paths, node_paths = _hostname_paths(c)
    storage = [(f"fabric.storageServers[{i}].hostname", s.hostname)
               for i, s in enumerate(c.fabric.storage_servers)]
    for path, value, first in _duplicates(host_paths + node_paths + storage):
        yield Problem(path, value, f"hostname already used at {first}",
                      "give every host a unique hostname (node names become Kubernetes names)")


def _unique_addresses(c: Cluster) -> Iterator[Problem]:
    """Management and BMC addresses: each used once, inside the management network."""
    nodes = c.nodes
    ips = _management_ips(c)
    for path, value, first in _duplicates(ips):
        yield Problem(path, str(value), f"management IP already used at {first}",
                      "give every host its own management IP")
    for path, ip in ips:
        if ip not in c.network.management_cidr:
            yield Problem(path, str(ip), f"outside network.managementCidr "
                          f"{c.network.management_cidr}",
                          "use an address inside the management network or widen it")
    bmcs = [(f"hosts[{i}].bmcAddress", h.bmc_address) for i, h in enumerate(c.hosts)]
    bmcs += [(f"{n.origin} ({n.hostname}).bmcAddress", n.bmc_address) for n in nodes]
    for path, value, first in _duplicates(bmcs):
        yield Problem(path, str(value), f"BMC address already used at {first}",
                      "give every BMC its own address")


def _known_hosts(c: Cluster) -> Iterator[Problem]:
    """Overrides and inventory rows name hosts the stack defines."""
    nodes = c.nodes
    host_paths, node_paths = _hostname_paths(c)
    known = {h for _, h in host_paths + node_paths}
    gpu_hosts = {n.hostname for n in nodes}
    for host in sorted(set(c.gpu_nodes.overrides) - gpu_hosts):
        yield Problem(f"gpuNodes.overrides.{host}", host,
                      "overrides a node no gpuNodes range defines",
                      "fix the hostname or add the node to a gpuNodes range (hosts[] entries "
                      "are configured in place)")
    defined = known | {r.hostname(i) for r in c.gpu_nodes.ranges for i in range(r.count)}
    for host in sorted(set(c.inventory.nodes) - defined):
        yield Problem("inventoryFile", host,
                      f"{c.inventory.source} describes a host the stack does not define",
                      "remove the host from the inventory or add it to gpuNodes")


def _rail_hcas(c: Cluster) -> Iterator[Problem]:
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
        for path, value, first in _duplicates([(f"{where}.rails[{r.index}].hca", r.hca)
                                               for r in n.rails]):
            yield Problem(path, value, f"HCA already used by {first}",
                          "each rail needs its own HCA; check `ibstat -l` on the host")
        own = c.gpu_nodes.overrides.get(n.hostname)
        if own and (own.netdevs is not None or own.hcas is not None):
            key = (f"gpuNodes.overrides.{n.hostname}.netdevs" if own.netdevs is not None
                   else "gpuNodes.template.netdevs")
            yield from _netdev_problems(key, [r.netdev for r in n.rails if r.netdev],
                                        len(n.rails), template.netdevs[0])


def _unique_guids(c: Cluster) -> Iterator[Problem]:
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
    for path, value, first in _duplicates(guids):
        yield Problem(path, value, f"GUID already used at {first}",
                      "GUIDs are unique per port; re-read them with `ibstat` on each host")


def _su_slots(c: Cluster) -> Iterator[Problem]:
    """A slot in an SU is a fixed set of leaf ports: in range, one node each."""
    nodes = c.nodes
    per_su = c.fabric.nodes_per_su
    for n in nodes:
        if n.slot >= per_su:
            yield Problem(f"{n.origin} ({n.hostname}).slot", n.slot,
                          f"SU slot outside 0..{per_su - 1}",
                          f"an SU holds {per_su} nodes: start a new range with su: {n.su + 1}")
    for path, value, first in _duplicates([(f"{n.origin} ({n.hostname})", (n.su, n.slot))
                                           for n in nodes]):
        yield Problem(path, f"su {value[0]} slot {value[1]}", f"same SU slot as {first}",
                      "give each node its own slot (firstSlot or an override)")


def _control_plane_quorum(c: Cluster) -> Iterator[Problem]:
    """An odd etcd quorum, and a free VIP inside the management network for HA."""
    ips = _management_ips(c)
    cp = c.control_plane
    if len(cp) not in (1, 3, 5):
        yield Problem("hosts", [h.hostname for h in cp],
                      f"{len(cp)} control-plane hosts: etcd needs an odd quorum",
                      "use 1 control-plane host, or 3 (or 5) with kubernetes."
                      "controlPlaneEndpoint.vip set")
    elif len(cp) > 1 and c.kubernetes.control_plane_endpoint.vip is None:
        yield Problem("kubernetes.controlPlaneEndpoint.vip", None,
                      f"{len(cp)} control-plane hosts need a virtual IP",
                      "set a free management-network address as the kube-vip VIP")
    vip = c.kubernetes.control_plane_endpoint.vip
    if vip is not None and vip not in c.network.management_cidr:
        yield Problem("kubernetes.controlPlaneEndpoint.vip", str(vip),
                      "VIP outside network.managementCidr", "pick a management-network address")
    for path, ip in ips:
        if vip is not None and ip == vip:
            yield Problem("kubernetes.controlPlaneEndpoint.vip", str(vip),
                          f"is also {path}", "give kube-vip an address no host uses")


def _subnet_managers(c: Cluster) -> Iterator[Problem]:
    """Subnet managers on sm-hosts, one each, distinct priorities, two in production."""
    roles = {h.hostname: h.role for h in c.hosts}
    sms = c.fabric.subnet_managers
    for i, sm in enumerate(sms):
        if roles.get(sm.host) != "sm-host":
            yield Problem(f"fabric.subnetManagers[{i}].host", sm.host,
                          "is not a host with role sm-host",
                          "name a hosts[] entry whose role is sm-host")
    for path, value, first in _duplicates([(f"fabric.subnetManagers[{i}].priority", s.priority)
                                           for i, s in enumerate(sms)]):
        yield Problem(path, value, f"same sm_priority as {first}",
                      "give the master the highest priority (e.g. 15) and the standby a lower one")
    for path, value, first in _duplicates([(f"fabric.subnetManagers[{i}].host", s.host)
                                           for i, s in enumerate(sms)]):
        yield Problem(path, value, f"subnet manager host repeated ({first})",
                      "run one opensm per SM host")
    if c.environment == "production" and len(sms) < 2:
        yield Problem("fabric.subnetManagers", [s.host for s in sms],
                      "production needs a master and a standby subnet manager",
                      "add a second sm-host with a lower priority")


def _storage_fabric(c: Cluster) -> Iterator[Problem]:
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
    for path, value, first in _duplicates([(f"{key}.subnetManagers[{i}].priority", s.priority)
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
    for path, value, first in _duplicates([(f"{key}.hcas[{i}]", h)
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


def _partitions(c: Cluster) -> Iterator[Problem]:
    """Partitions: distinct pkeys and names, one data path, each isolating something."""
    for path, value, first in _duplicates([(f"fabric.partitions[{i}].pkey", hex(p.pkey))
                                           for i, p in enumerate(c.fabric.partitions)]):
        yield Problem(path, value, f"pkey already used by {first}", "give each tenant its own pkey")
    for path, value, first in _duplicates([(f"fabric.partitions[{i}].name", p.name)
                                           for i, p in enumerate(c.fabric.partitions)]):
        yield Problem(path, value, f"partition name already used by {first}",
                      "give each partition its own name")
    yield from _partition_problems(c.fabric.partitions, c.fabric.storage_servers)


def _address_plan(c: Cluster) -> Iterator[Problem]:
    """Management, pod, service, RDMA, load-balancer and LNet ranges are disjoint and sized."""
    nets = [("network.managementCidr", c.network.management_cidr),
            ("kubernetes.podCidr", c.kubernetes.pod_cidr),
            ("kubernetes.serviceCidr", c.kubernetes.service_cidr),
            ("network.rdmaCidr", c.network.rdma_cidr),
            ("network.loadBalancerCidr", c.network.load_balancer_cidr)]
    if c.network.bmc_cidr:
        nets.append(("network.bmcCidr", c.network.bmc_cidr))
    nets.append(("storage.lnetAddresses.cidr", c.storage.lnet_addresses.cidr))
    for i, (pa, a) in enumerate(nets):
        for pb, b in nets[i + 1:]:
            if a.overlaps(b):
                yield Problem(pb, str(b), f"overlaps {pa} {a}",
                              "use disjoint ranges for management, pods, services, RDMA and "
                              "the Lustre servers' IPoIB subnet")
    yield from _pod_cidr_problems(c)
    rdma = c.network.rdma_cidr
    need = (len(c.nodes) + 1) * PER_NODE_BLOCK  # nv-ipam's block per node, and a spare
    if need > rdma.num_addresses:
        yield Problem("network.rdmaCidr", str(rdma), f"holds {rdma.num_addresses} addresses, "
                      f"fewer than {len(c.nodes)} GPU nodes x {PER_NODE_BLOCK} pod addresses "
                      "per node (+ one spare block)",
                      f"use a /{rdma.max_prefixlen - (need - 1).bit_length()} or larger")
    first, last = c.network.ingress_pool
    lb = c.network.load_balancer_cidr
    if first > last or first not in lb or last not in lb:
        yield Problem("network.ingressPool", [str(first), str(last)],
                      "not an ascending range inside network.loadBalancerCidr",
                      "give MetalLB [first, last] addresses on the service network "
                      f"({lb}), never on the management network")


def _topology_manager_fits_gpus(c: Cluster) -> Iterator[Problem]:
    """The kubelet's topology policy admits pods that take every GPU."""
    kubelet = c.kubernetes.kubelet
    gpu = c.gpu_nodes.template.gpu
    if kubelet.topology_manager_policy == "single-numa-node" and gpu.count > 1 \
            and gpu.numa_nodes > 1:
        yield Problem("kubernetes.kubelet.topologyManagerPolicy", "single-numa-node",
                      f"rejects pods needing all {gpu.count} GPUs, which span {gpu.numa_nodes} "
                      "NUMA nodes", "use best-effort or restricted with scope pod")


def _training_jobs(c: Cluster) -> Iterator[Problem]:
    """Training jobs: their file systems, whole nodes, parallelism adding up."""
    serving_nodes = c.in_service_nodes
    gpus = c.gpu_nodes.template.gpu.count
    for i, j in enumerate(c.workloads.training):
        path = f"workloads.training[{i}]"
        ds, ck = c.lustre(j.dataset), c.lustre(j.checkpoints)
        if ds is None or ds.purpose != "dataset":
            yield Problem(f"{path}.dataset", j.dataset, "is not a storage.lustre dataset",
                          "name a storage.lustre entry with purpose: dataset")
        if ck is None or ck.purpose != "checkpoints":
            yield Problem(f"{path}.checkpoints", j.checkpoints,
                          "is not a storage.lustre checkpoints file system",
                          "name a storage.lustre entry with purpose: checkpoints")
        if j.nodes > len(serving_nodes):
            yield Problem(f"{path}.nodes", j.nodes,
                          f"more nodes than the {len(serving_nodes)} GPU nodes in service",
                          "lower nodes or add GPU nodes")
        if j.gpus_per_node != gpus:
            yield Problem(f"{path}.gpusPerNode", j.gpus_per_node,
                          f"multi-node training takes whole nodes of {gpus} GPUs",
                          f"set gpusPerNode: {gpus}")
        world = j.nodes * j.gpus_per_node
        if j.tensor_parallel * j.pipeline_parallel * j.data_parallel != world:
            yield Problem(f"{path}.dataParallel", j.data_parallel,
                          f"TP {j.tensor_parallel} x PP {j.pipeline_parallel} x DP "
                          f"{j.data_parallel} != {world} GPUs ({j.nodes} nodes x "
                          f"{j.gpus_per_node})",
                          f"make tensorParallel x pipelineParallel x dataParallel = {world}")
        if j.tensor_parallel > j.gpus_per_node:
            yield Problem(f"{path}.tensorParallel", j.tensor_parallel,
                          "tensor parallelism crosses nodes (it needs NVLink bandwidth)",
                          f"keep tensorParallel <= {j.gpus_per_node}; use pipeline parallelism "
                          "across nodes")
        if j.elastic_min_nodes is not None and j.elastic_min_nodes > j.nodes:
            yield Problem(f"{path}.elasticMinNodes", j.elastic_min_nodes, "exceeds nodes",
                          "set elasticMinNodes <= nodes")
        if j.launcher == "mpijob" and j.elastic_min_nodes is not None \
                and j.elastic_min_nodes < j.nodes:
            yield Problem(f"{path}.elasticMinNodes", j.elastic_min_nodes,
                          "an MPIJob has a fixed world size (mpirun -np)",
                          "drop elasticMinNodes or use launcher: pytorchjob")


def _driver_pinned(c: Cluster) -> Iterator[Problem]:
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


def _gpudirect_storage(c: Cluster) -> Iterator[Problem]:
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


def _capacity(c: Cluster) -> Iterator[Problem]:
    """Training and serving at their maximum fit the nodes in service."""
    yield from _capacity_problems(c, len(c.in_service_nodes))


def _nccl_test(c: Cluster) -> Iterator[Problem]:
    """The acceptance test: a meaningful floor, GPUDirect RDMA, nodes and network that exist."""
    serving_nodes = c.in_service_nodes
    nt = c.workloads.nccl_test
    if nt is not None:
        if nt.min_efficiency < MIN_NCCL_EFFICIENCY:
            yield Problem("workloads.ncclTest.minEfficiency", nt.min_efficiency,
                          f"below {MIN_NCCL_EFFICIENCY:.0%} of the fabric's bus bandwidth, "
                          "which only a broken fabric reaches: a degraded fabric would pass "
                          "the acceptance gate",
                          f"use {MIN_NCCL_EFFICIENCY} or more (1.0: 46 GB/s per NDR rail, "
                          "docs/acceptance.md)")
        if nt.gate and not c.platform.gpu_operator.gpudirect_rdma:
            yield Problem("platform.gpuOperator.gpudirectRdma", False,
                          "the NCCL acceptance gate requires GPUDirect RDMA (NET/IB .../GDRDMA "
                          "in NCCL's log) and would fail every `pulumi up`",
                          "keep gpudirectRdma: true; or, outside production, set "
                          "workloads.ncclTest.gate: false")
        if nt.nodes is not None and nt.nodes > len(serving_nodes):
            yield Problem("workloads.ncclTest.nodes", nt.nodes,
                          f"more nodes than the {len(serving_nodes)} GPU nodes in service",
                          "lower nodes or leave it unset to test every GPU node")
        if nt.namespace not in {j.namespace for j in c.workloads.training}:
            yield Problem("workloads.ncclTest.namespace", nt.namespace,
                          "has no RDMA network attachment (only training namespaces get one)",
                          "use the namespace of a workloads.training job")


def _inference_services(c: Cluster) -> Iterator[Problem]:
    """Inference: weights, sharding, replicas and GPUs that fit."""
    gpus = c.gpu_nodes.template.gpu.count
    for i, s in enumerate(c.workloads.inference):
        path = f"workloads.inference[{i}]"
        w = c.lustre(s.weights)
        if w is None or w.purpose != "model-weights":
            yield Problem(f"{path}.weights", s.weights, "is not a storage.lustre model-weights "
                          "file system", "name a storage.lustre entry with purpose: model-weights")
        if s.gpus_per_pod % s.tensor_parallel:
            yield Problem(f"{path}.tensorParallel", s.tensor_parallel,
                          f"does not divide gpusPerPod {s.gpus_per_pod}",
                          "vLLM runs gpusPerPod / tensorParallel engines of tensorParallel GPUs "
                          "each in the pod: pick a tensorParallel that divides gpusPerPod")
        a = s.autoscaling
        if a.min_replicas > a.max_replicas:
            yield Problem(f"{path}.autoscaling.minReplicas", a.min_replicas,
                          f"above maxReplicas {a.max_replicas}", "set minReplicas <= maxReplicas")
        if c.environment == "production" and a.min_replicas < 2:
            yield Problem(f"{path}.autoscaling.minReplicas", a.min_replicas,
                          "one replica in production means downtime on every node drain",
                          "keep at least 2 replicas in production")
        if s.gpus_per_pod > gpus:
            yield Problem(f"{path}.gpusPerPod", s.gpus_per_pod, f"nodes have {gpus} GPUs",
                          f"use at most {gpus} GPUs per pod")
        elif s.gpus_per_pod < gpus:
            # One replica per node (anti-affinity), and training and the NCCL test take whole
            # nodes: nothing else would ever use the rest of a serving node's GPUs.
            yield Problem(f"{path}.gpusPerPod", s.gpus_per_pod,
                          f"one replica per node leaves {gpus - s.gpus_per_pod} of each "
                          f"serving node's {gpus} GPUs idle",
                          f"set gpusPerPod to {gpus}: vLLM then serves with {gpus} GPUs / "
                          "tensorParallel engines side by side in the pod (data parallel)")
        if a.max_replicas * s.gpus_per_pod > c.total_gpus:
            yield Problem(f"{path}.autoscaling.maxReplicas", a.max_replicas,
                          f"{a.max_replicas} x {s.gpus_per_pod} GPUs exceeds the cluster's "
                          f"{c.total_gpus}", "lower maxReplicas or gpusPerPod")


def _unique_names(c: Cluster) -> Iterator[Problem]:
    """Workload and file system names are unique."""
    for path, value, first in _duplicates(
        [(f"workloads.training[{i}].name", (j.namespace, j.name))
         for i, j in enumerate(c.workloads.training)]
        + [(f"workloads.inference[{i}].name", (s.namespace, s.name))
           for i, s in enumerate(c.workloads.inference)]
    ):
        yield Problem(path, "/".join(value), f"workload name already used at {first}",
                      "give each workload its own name")
    for path, value, first in _duplicates([(f"storage.lustre[{i}].name", fs.name)
                                           for i, fs in enumerate(c.storage.lustre)]):
        yield Problem(path, value, f"file system name already used at {first}",
                      "give each Lustre file system its own name")


def _split_part(c: Cluster) -> Iterator[Problem]:
    """A split stack's part owns what its part may own; only the core lists the parts, and
    the references are filled in, never written."""
    sp = c.split
    if sp is None:
        return
    if sp.part != "core" and sp.parts:
        yield Problem("split.parts", sorted(sp.parts), f"only the core part lists the site's "
                      f"parts, not part {sp.part}", "remove split.parts")
    if sp.part != "core":
        return  # the rest of a part's split is read from the core's parts, checked there
    for key, value in (("kubernetesStack", sp.kubernetes_stack),
                       ("platformStack", sp.platform_stack)):
        if value is not None:
            yield Problem(f"split.{key}", value, "is filled in for the other parts from their "
                          "gpu-cluster:site, never written in the core", f"remove split.{key}")
    if sp.sus:
        yield Problem("split.sus", list(sp.sus), "only a nodes part owns SUs, not part core",
                      "remove split.sus")
    yield from _site_parts(sp.parts, sorted({n.su for n in c.nodes}))


def _site_parts(parts: Mapping[str, Any], sus: list[int]) -> Iterator[Problem]:
    """The core's `parts`: each SU owned by exactly one nodes part, one platform part (which a
    workloads part needs) and one workloads part at most."""
    owners: dict[int, list[str]] = {}
    for stack, part in sorted(parts.items()):
        path = f"split.parts.{stack}.sus"
        if part.part == "nodes" and (not part.sus or set(part.sus) - set(sus)):
            yield Problem(path, list(part.sus), f"a nodes part owns existing SUs (this "
                          f"cluster has {sus})", "list the SUs whose GPU nodes it manages")
        if part.part != "nodes" and part.sus:
            yield Problem(path, list(part.sus), f"only a nodes part owns SUs, not part "
                          f"{part.part}", "remove its sus")
        for su in part.sus if part.part == "nodes" else ():
            owners.setdefault(su, []).append(stack)
    for su, stacks in sorted(owners.items()):  # each owner is told who the others are
        for stack in stacks if len(stacks) > 1 else ():
            yield Problem(f"split.parts.{stack}.sus", list(parts[stack].sus),
                          f"SU {su} is also owned by part "
                          f"{', '.join(s for s in stacks if s != stack)}: both would join, "
                          "and reset, its nodes", "give each SU to exactly one nodes part")
    if parts and (orphans := [su for su in sus if su not in owners]):
        yield Problem("split.parts", sorted(parts), f"no nodes part owns SU(s) {orphans}: "
                      "their GPU nodes would never join", "add them to a nodes part's sus")
    for kind in ("platform", "workloads"):
        named = sorted(s for s, p in parts.items() if p.part == kind)
        if len(named) > 1:
            yield Problem("split.parts", named, f"a site has one {kind} part",
                          f"keep one of {named}")
    kinds = {p.part for p in parts.values()}
    if "workloads" in kinds and "platform" not in kinds:
        yield Problem("split.parts", sorted(parts), "a workloads part reads the queues and "
                      "network attachments the platform part publishes, and there is none",
                      "add a part with part: platform")


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
    for path, value, first in _duplicates(signature):
        yield Problem(path, value[0], f"same members as {first.rsplit('.', 1)[0]}: a second "
                      "P_Key over the same ports isolates nothing",
                      "remove it, or give it other members (portGuids)")

def _lnet_problems(c: Cluster) -> Iterator[Problem]:
    """The driver model the host Lustre client needs, and the LNet addresses (lnet.py)."""
    yield from (Problem(*p) for p in lnet.config_problems(c))


def _pod_cidr_problems(c: Cluster) -> Iterator[Problem]:
    pod = c.kubernetes.pod_cidr
    kubelets = len(c.control_plane) + len(c.nodes)
    blocks = 2 ** (NODE_CIDR_MASK - pod.prefixlen) if pod.prefixlen <= NODE_CIDR_MASK else 0
    if blocks < kubelets:
        need = NODE_CIDR_MASK - (kubelets - 1).bit_length()
        wider = ipaddress.ip_network(f"{pod.network_address}/{need}", strict=False)
        yield Problem("kubernetes.podCidr", str(pod),
                      f"holds {blocks} per-node /{NODE_CIDR_MASK} pod ranges for {kubelets} "
                      "nodes (kubeadm gives each node a /24); the rest would never get a pod "
                      "network", f"use a /{need} or larger, e.g. {wider}, clear of the other "
                      "ranges")


def _checkpoint_problems(c: Cluster) -> Iterator[Problem]:
    """Checkpoints must be writable, on the checkpoint file system, and mounted where nothing
    else is: a job that cannot write them loses every hour since the last good one."""
    for i, fs in enumerate(c.storage.lustre):
        if fs.purpose == "checkpoints" and "ro" in fs.mount_options:
            yield Problem(f"storage.lustre[{i}].mountOptions", list(fs.mount_options),
                          "mounts the checkpoint file system read-only: every checkpoint "
                          "write fails", "drop ro (datasets and weights are mounted read-only "
                          "by their claims already)")
    for i, j in enumerate(c.workloads.training):
        path = f"workloads.training[{i}]"
        for key, value in (("checkpointPath", j.checkpoint_path),
                           ("datasetPath", j.dataset_path)):
            parts = value.split("/")
            if not value.startswith("/") or ".." in parts or "." in parts or "//" in value:
                yield Problem(f"{path}.{key}", value,
                              "is not a normalised absolute path: it would resolve outside "
                              "the volume mounted for it", "write an absolute path such as "
                              + ("/checkpoints/<job>" if key == "checkpointPath"
                                 else "/data/<set>"))
            elif mount_root(value).strip("/") in _SYSTEM_DIRS:
                yield Problem(f"{path}.{key}", value,
                              f"would mount the volume over the image's {mount_root(value)}",
                              "use a directory of its own, e.g. "
                              + ("/checkpoints/<job>" if key == "checkpointPath"
                                 else "/data/<set>"))
        if mount_root(j.checkpoint_path) == mount_root(j.dataset_path):
            yield Problem(f"{path}.checkpointPath", j.checkpoint_path,
                          f"is outside the checkpoint mount: {mount_root(j.dataset_path)} is "
                          "where the dataset is mounted, read-only",
                          "put checkpoints under a mount of their own, e.g. /checkpoints/"
                          f"{j.name}")


# Images that carry no training script of the cluster's own: the script must come from a
# mounted file system (NGC's PyTorch container has only NVIDIA's examples under /workspace).
STOCK_TRAINING_IMAGES = ("nvcr.io/nvidia/pytorch:",)


def _script_problems(c: Cluster) -> Iterator[Problem]:
    for i, j in enumerate(c.workloads.training):
        mounts = sorted({mount_root(j.dataset_path), mount_root(j.checkpoint_path)})
        if j.image.startswith(STOCK_TRAINING_IMAGES) and mount_root(j.script) not in mounts:
            yield Problem(f"workloads.training[{i}].script", j.script,
                          f"is in neither the stock image {j.image} nor a file system the job "
                          f"mounts ({', '.join(mounts)}): torchrun would exit with "
                          "'No such file or directory' on every node",
                          f"put the script on the dataset file system (e.g. {mounts[-1]}/code/"
                          "train.py) or set image to a build of your own that contains it")


def _capacity_problems(c: Cluster, nodes: int) -> Iterator[Problem]:
    """Training and serving run at once after the acceptance test: training takes whole nodes,
    each serving replica a node of its own (anti-affinity; rollouts replace in place)."""
    training = c.workloads.training
    serving = c.workloads.inference
    train_nodes = sum(j.nodes for j in training)
    gpus = c.gpu_nodes.template.gpu.count
    # A job or service that alone does not fit is reported by its own check.
    if not serving or any(j.nodes > nodes for j in training) or any(
            x.autoscaling.max_replicas * x.gpus_per_pod > nodes * gpus for x in serving):
        return
    widest = max(range(len(serving)), key=lambda i: serving[i].autoscaling.max_replicas)
    s = serving[widest]
    need = s.autoscaling.max_replicas
    if train_nodes + need > nodes:
        yield Problem(f"workloads.inference[{widest}].autoscaling.maxReplicas",
                      s.autoscaling.max_replicas,
                      f"{s.name} needs {need} nodes of its own (one replica per node) beside "
                      f"the {train_nodes} nodes training takes: {train_nodes + need} > {nodes} "
                      "GPU nodes, so its last replicas would wait forever",
                      f"lower maxReplicas to {max(nodes - train_nodes, 0)} or train on "
                      "fewer nodes")
        return
    train_gpus = sum(j.nodes * j.gpus_per_node for j in training)
    serve_gpus = sum(x.autoscaling.max_replicas * x.gpus_per_pod for x in serving)
    if train_gpus + serve_gpus > nodes * gpus:
        yield Problem(f"workloads.inference[{widest}].autoscaling.maxReplicas",
                      s.autoscaling.max_replicas,
                      f"training ({train_gpus} GPUs) and serving at its maximum "
                      f"({serve_gpus} GPUs) exceed the cluster's {nodes * gpus} GPUs",
                      "lower maxReplicas or train on fewer nodes")


# Every check by name, in the order its problems are reported. Each takes the built model and
# yields Problems; none changes the model or depends on another's result.
CHECKS: dict[str, Check] = {
    "node-expansion": _node_expansion,
    "decommissioned-nodes-exist": _decommissioned_nodes_exist,
    "ssh-user-not-root": _ssh_user_not_root,
    "ssh-keys": _credential_problems,
    "unique-hostnames": _unique_hostnames,
    "unique-addresses": _unique_addresses,
    "known-hosts": _known_hosts,
    "rail-hcas": _rail_hcas,
    "unique-guids": _unique_guids,
    "su-slots": _su_slots,
    "control-plane-quorum": _control_plane_quorum,
    "subnet-managers": _subnet_managers,
    "storage-fabric": _storage_fabric,
    "partitions": _partitions,
    "address-plan": _address_plan,
    "topology-manager-fits-gpus": _topology_manager_fits_gpus,
    "training-jobs": _training_jobs,
    "checkpoints": _checkpoint_problems,
    "driver-pinned": _driver_pinned,
    "gpudirect-storage": _gpudirect_storage,
    "training-script": _script_problems,
    "capacity": _capacity,
    "nccl-test": _nccl_test,
    "inference-services": _inference_services,
    "unique-names": _unique_names,
    "lustre-lnet": _lnet_problems,
    "split-part": _split_part,
    "versions": compatibility_problems,
}


def semantic_problems(c: Cluster) -> Iterator[Problem]:
    """Every check's problems, each tagged with the check's name."""
    for name, check in CHECKS.items():
        for problem in check(c):
            yield replace(problem, check=name)
