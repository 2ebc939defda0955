"""LNet for the host Lustre client: addresses, multi-rail sysctls and routing, `lnetctl import`.

Pure (no pulumi). The rendered pieces are what host preparation writes on a GPU node
(components/planning/host_scripts.py): the IPoIB addresses of the rail interfaces as a netplan
file, the per-interface sysctls, and /etc/lnet.conf, the YAML `lnetctl import` reads (the same
shape `lnetctl export --backup` writes). docs/hosts.md, "Lustre client and LNet", says why.

o2ib resolves a peer's NID through IPoIB (rdma_cm), so every client NI needs an IPv4 address
on the Lustre servers' IPoIB subnet (the MGS NIDs' addresses are in `storage.lnetAddresses.cidr`).
The NIs are the eight rails, or with a storage fabric the node's storage ports. They share
that one subnet: multi-rail on one subnet needs `arp_ignore=1`,
`arp_announce=2` and a routing table per interface, or the kernel answers ARP for every rail's
address on any rail and sends everything out of one interface.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from components.model.cluster import Cluster
    from components.model.gpu_nodes import GpuNode

# Policy routing: rail r's addresses use table RAIL_TABLE_BASE + r (ip rule "from <addr>").
RAIL_TABLE_BASE = 100
# Debian packages of the Lustre client (Whamcloud's Ubuntu builds, lustre-release debian/):
# the utilities (lnetctl, mount.lustre, lnet.service) and the DKMS kernel modules.
LUSTRE_PACKAGES = ("lustre-client-utils", "lustre-client-modules-dkms")


@dataclass(frozen=True)
class RailAddress:
    rail: int
    netdev: str
    address: ipaddress.IPv4Address
    prefixlen: int

    @property
    def table(self) -> int:
        return RAIL_TABLE_BASE + self.rail

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefixlen}"


# ---------------------------------------------------------------- addresses


def lnet_interfaces(cluster: Cluster, node: GpuNode) -> tuple[tuple[int, str], ...]:
    """(index, netdev) of the interfaces LNet runs on: the node's storage ports when storage
    has a fabric of its own (fabric.storageFabric; the rails then carry only the GPUs'
    traffic), else every rail."""
    sf = cluster.fabric.storage_fabric
    if sf is not None:
        return tuple(enumerate(sf.netdevs))
    return tuple((r.index, r.netdev) for r in node.rails)


def _block_size(cluster: Cluster) -> int:
    """Addresses per LNet interface: the client range split into one equal block per rail
    (or per storage port)."""
    sf = cluster.fabric.storage_fabric
    ports = max(1, len(sf.netdevs if sf is not None else cluster.gpu_nodes.template.hcas))
    return cluster.storage.lnet_addresses.client_range.num_addresses // ports


def node_offset(cluster: Cluster, node: GpuNode) -> int:
    """The node's number from its fixed place in the fabric (SU, slot), counting from 1: as
    stable as its cables, and dense (32 x 32 = 1024 nodes need 1024 addresses per rail)."""
    return (node.su - 1) * cluster.fabric.nodes_per_su + node.slot + 1


def rail_addresses(cluster: Cluster, node: GpuNode) -> tuple[RailAddress, ...]:
    """LNet interface i of a node (rail i, or storage port i): block i of the client range,
    at the node's fabric place (SU, slot). Deterministic per node and interface; adding or
    removing a node moves no other address."""
    la = cluster.storage.lnet_addresses
    base = int(la.client_range.network_address)
    size, offset = _block_size(cluster), node_offset(cluster, node)
    return tuple(RailAddress(i, netdev, ipaddress.IPv4Address(base + i * size + offset),
                             la.cidr.prefixlen)
                 for i, netdev in lnet_interfaces(cluster, node))


def config_problems(cluster: Cluster) -> Iterator[tuple[str, Any, str, str]]:
    """(key path, value, message, fix) for the driver model and the LNet addresses."""
    ofed = cluster.platform.network_operator.ofed
    if ofed == "operator":
        yield ("platform.networkOperator.ofed", ofed,
               "the Network Operator's DOCA driver container replaces ib_core at run time, so "
               "the host Lustre client's ko2iblnd (built against the host's RDMA stack) no "
               "longer loads ('disagrees about version of symbol'), and the container's "
               "pre-flight check stops on lustre -> ko2iblnd -> ib_core: Lustre cannot mount",
               "set ofed: host (DOCA-OFED installed on the host; the Lustre client's DKMS "
               "modules build against it, see docs/hosts.md 'Lustre client and LNet')")
    elif cluster.platform.network_operator.doca_source is None:
        yield ("platform.networkOperator.docaSource", None,
               "is unset: with ofed: host every GPU node installs DOCA-OFED (the RDMA stack the "
               "Lustre client's ko2iblnd is built against) and nothing says from where",
               "name the DOCA repository and its signing key: docaSource: {url: "
               "https://linux.mellanox.com/public/repo/doca/<release>/ubuntu22.04/x86_64/, "
               "keyUrl: …/GPG-KEY-Mellanox.pub, keyFingerprint: <as gpg --show-keys prints "
               "it>} or a site mirror's (docs/hosts.md, 'Package sources')")
    la = cluster.storage.lnet_addresses
    path = "storage.lnetAddresses"
    if not la.client_range.subnet_of(la.cidr):
        yield (f"{path}.clientRange", str(la.client_range), f"is not inside {path}.cidr "
               f"{la.cidr}", "give the clients a range inside the servers' IPoIB subnet")
        return
    for i, fs in enumerate(cluster.storage.lustre):
        for nid in fs.mgs_nids:
            try:
                ip = ipaddress.IPv4Address(nid.rpartition("@")[0])
            except ValueError:
                yield (f"storage.lustre[{i}].mgsNids", nid, "is not an IPv4 NID (o2ib)",
                       "write it as <IPoIB address>@o2ib")
                continue
            if ip not in la.cidr:
                yield (f"storage.lustre[{i}].mgsNids", nid, f"is outside {path}.cidr "
                       f"{la.cidr}: o2ib reaches a peer only on the clients' IPoIB subnet",
                       f"set {path}.cidr to the servers' IPoIB subnet")
            elif ip in la.client_range:
                yield (f"{path}.clientRange", str(la.client_range),
                       f"contains the MGS address {ip} (storage.lustre[{i}].mgsNids): a client "
                       "rail would take a server's address",
                       "keep the client range clear of every Lustre server address")
    size = _block_size(cluster)
    for node in cluster.nodes:
        offset = node_offset(cluster, node)
        if offset >= size:
            ports = len(lnet_interfaces(cluster, node))
            need = 2 ** (max(1, ports) * (offset + 1) - 1).bit_length()
            yield (f"{path}.clientRange", str(la.client_range),
                   f"gives each rail {size} addresses; {node.hostname} (SU {node.su}, slot "
                   f"{node.slot}) is node number {offset}",
                   f"widen the client range to at least {need} addresses (a "
                   f"/{32 - (need - 1).bit_length()})")
            continue
        for ra in rail_addresses(cluster, node):
            if ra.address in (la.cidr.network_address, la.cidr.broadcast_address):
                yield (f"{path}.clientRange", str(la.client_range),
                       f"gives {node.hostname} rail {ra.rail} the reserved address "
                       f"{ra.address} of {la.cidr}",
                       "start the client range past the subnet's first address")


# ---------------------------------------------------------------- rendering


def lnet_document(cluster: Cluster, node: GpuNode) -> dict:
    """The `lnetctl import` document: one o2ib net with every LNet interface (each rail, or
    each storage port) as a local NI (multi-rail), peer discovery on."""
    return {
        "net": [{
            "net type": cluster.storage.lnet_network,
            "local NI(s)": [{"interfaces": {0: netdev}}
                            for _, netdev in lnet_interfaces(cluster, node)],
        }],
        "global": {"discovery": 1},
    }


def lnet_conf(cluster: Cluster, node: GpuNode) -> str:
    """/etc/lnet.conf: what lnet.service (and the host script) hand to `lnetctl import`."""
    text = yaml.dump(lnet_document(cluster, node), Dumper=_DUMPER, sort_keys=False,
                     default_flow_style=False)
    problems = lnet_yaml_problems(text)
    if problems:  # the renderer and the validator must agree
        raise ValueError("rendered lnet.conf is invalid: " + "; ".join(problems))
    return text.rstrip("\n")


def netplan(cluster: Cluster, node: GpuNode) -> str:
    """The rails' IPoIB addresses, persistent (DGX OS configures networking with netplan),
    each with its own routing table: the subnet route from that address out of that
    interface, and a rule sending traffic from the address to the table."""
    subnet = str(cluster.storage.lnet_addresses.cidr)
    lines = ["network:", "  version: 2", "  ethernets:"]
    for ra in rail_addresses(cluster, node):
        lines += [f"    {ra.netdev}:",
                  f"      addresses: [{ra.cidr}]",
                  "      routes:",
                  f"        - {{to: {subnet}, scope: link, from: {ra.address}, "
                  f"table: {ra.table}}}",
                  "      routing-policy:",
                  f"        - {{from: {ra.address}, table: {ra.table}}}"]
    return "\n".join(lines)


def sysctls(cluster: Cluster, node: GpuNode) -> str:
    """Per rail interface: answer ARP only for the interface's own address (arp_ignore=1),
    announce the outgoing interface's address (arp_announce=2), loose reverse-path filter
    (rp_filter=2; the kernel uses the larger of `all` and the interface, Ubuntu sets all=2)."""
    lines = []
    for ra in rail_addresses(cluster, node):
        lines += [f"net.ipv4.conf.{ra.netdev}.arp_ignore = 1",
                  f"net.ipv4.conf.{ra.netdev}.arp_announce = 2",
                  f"net.ipv4.conf.{ra.netdev}.rp_filter = 2"]
    return "\n".join(lines)


# ---------------------------------------------------------------- validation

# The sections `lnetctl import` reads (lnet/utils/lnetctl.c and lnetconfig/liblnetconfig.c,
# the same names `lnetctl export` writes).
_TOP = frozenset({"net", "route", "peer", "routing", "buffers", "global", "numa", "discovery",
                  "max_intf", "drop_asym_route"})
_NET = frozenset({"net type", "local NI(s)"})
_NI = frozenset({"interfaces", "tunables", "lnd tunables", "CPT", "nid", "status"})
_GLOBAL = frozenset({"numa_range", "max_intf", "discovery", "drop_asym_route", "retry_count",
                     "transaction_timeout", "health_sensitivity", "recovery_interval",
                     "router_sensitivity", "lnd_timeout", "response_tracking",
                     "recovery_limit", "max_recovery_ping_interval"})
# libyaml where it is built in (the same documents, several times faster per node).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_NET_TYPE = re.compile(r"^(o2ib|tcp|gni|kfi|ptl4lnd|lo)\d*$")
_NETDEV = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.:]{0,14}$")


def lnet_yaml_problems(text: str) -> list[str]:
    """Why `lnetctl import` would reject (or misread) a document; empty when its shape is
    right: `net` is a list of {net type, local NI(s)}, each NI has `interfaces` {0: <netdev>,
    ...} with contiguous integer keys, no interface twice in one net, known keys only."""
    try:
        doc = yaml.load(text, Loader=_LOADER)  # a safe loader (libyaml where built in)
    except yaml.YAMLError as err:
        return [f"not YAML: {err}"]
    if not isinstance(doc, dict):
        return ["the document must be a mapping of sections (net, route, peer, global, ...)"]
    problems = [f"unknown section {k!r}" for k in doc if k not in _TOP]
    nets = doc.get("net")
    if nets is None:
        problems.append("no 'net' section: nothing to configure")
        return problems
    if not isinstance(nets, list) or not nets:
        return [*problems, "'net' must be a non-empty list"]
    for i, net in enumerate(nets):
        problems += _net_problems(f"net[{i}]", net)
    problems += _global_problems(doc.get("global"))
    return problems


def _net_problems(where: str, net: object) -> list[str]:
    """One `net` entry: known keys, an LNet network type, and a non-empty list of local NIs
    that never name the same interface twice (LNet would bind it once)."""
    if not isinstance(net, dict):
        return [f"{where} must be a mapping"]
    problems = [f"{where}: unknown key {k!r}" for k in net if k not in _NET]
    kind = net.get("net type")
    if not isinstance(kind, str) or not _NET_TYPE.match(kind):
        problems.append(f"{where}: 'net type' {kind!r} is not an LNet network "
                        "(o2ib0, tcp1, ...)")
    nis = net.get("local NI(s)")
    if not isinstance(nis, list) or not nis:
        problems.append(f"{where}: 'local NI(s)' must be a non-empty list")
        return problems
    seen: set[str] = set()
    for j, ni in enumerate(nis):
        problems += _ni_problems(f"{where}.local NI(s)[{j}]", where, ni, seen)
    return problems


def _ni_problems(at: str, where: str, ni: object, seen: set[str]) -> list[str]:
    """One local NI of the net at `where`: known keys and an `interfaces` map {0: <netdev>,
    ...} with contiguous integer keys; adds its interface names to `seen` (the net's so far)."""
    if not isinstance(ni, dict):
        return [f"{at} must be a mapping"]
    problems = [f"{at}: unknown key {k!r}" for k in ni if k not in _NI]
    intfs = ni.get("interfaces")
    if not isinstance(intfs, dict) or not intfs:
        problems.append(f"{at}: 'interfaces' must map 0, 1, ... to interface names")
        return problems
    keys = list(intfs)
    if not all(isinstance(k, int) and not isinstance(k, bool) for k in keys) or set(
            keys) != set(range(len(keys))):
        problems.append(f"{at}: interface keys must be 0..{len(intfs) - 1}, got "
                        f"{list(intfs)}")
    for name in intfs.values():
        if not isinstance(name, str) or not _NETDEV.match(name):
            problems.append(f"{at}: {name!r} is not a network interface name")
        elif name in seen:
            problems.append(f"{at}: interface {name} appears twice in {where}")
        else:
            seen.add(name)
    return problems


def _global_problems(glob: object) -> list[str]:
    """The optional `global` section: a mapping of known tunables with integer values."""
    if glob is None:
        return []
    if not isinstance(glob, dict):
        return ["'global' must be a mapping"]
    problems = [f"global: unknown key {k!r}" for k in glob if k not in _GLOBAL]
    problems += [f"global: {k} must be an integer" for k, v in glob.items()
                 if not isinstance(v, int) or isinstance(v, bool)]
    return problems
