"""GPU nodes as the program sees them: the template, range, override and inventory facts
merged into one record per node (pure; derived from the model, never part of it)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, NamedTuple

from components.model.fields import (
    DNS_LABEL,
    IPv4,
    Problem,
    check_guid,
    check_hca,
    check_host_key,
    check_mac,
)
from components.model.gpu_nodes_section import GpuNodes, GpuSpec, NodeOverride, NodeTemplate
from components.model.inventory import Inventory


@dataclass(frozen=True)
class Rail:
    index: int
    hca: str
    netdev: str
    port_guid: str | None


@dataclass(frozen=True)
class StoragePort:
    """Storage port `index` as the inventory read it (fabric.storageFabric.hcas[index])."""

    index: int
    hca: str | None
    port_guid: str | None


@dataclass(frozen=True)
class GpuNode:
    """One GPU server after template, range, override and inventory are merged."""

    hostname: str
    management_ip: IPv4
    bmc_address: IPv4 | None
    rack: str
    su: int
    slot: int
    rails: tuple[Rail, ...]
    ssh_host_key: str | None
    management_mac: str | None
    template: NodeTemplate
    origin: str  # key path that defined the node, for error messages
    storage_ports: tuple[StoragePort, ...] = ()  # the inventory's, with a storage fabric

    @property
    def gpu(self) -> GpuSpec:
        return self.template.gpu


class NodeExpansion(NamedTuple):
    nodes: tuple[GpuNode, ...]  # sorted by hostname
    problems: tuple[Problem, ...]  # reported with the config's other problems


def expand_nodes(spec: GpuNodes, inventory: Inventory) -> NodeExpansion:
    """Merge template, range, override and inventory facts; collect (never raise) problems."""
    src = inventory.source
    nodes: list[GpuNode] = []
    problems: list[Problem] = []
    for r_i, rng in enumerate(spec.ranges):
        where = f"gpuNodes.ranges[{r_i}]"
        if rng.count > len(rng.racks) * rng.nodes_per_rack:
            problems.append(Problem(f"{where}.racks", list(rng.racks),
                                    f"{rng.count} nodes do not fit {len(rng.racks)} rack(s) of "
                                    f"{rng.nodes_per_rack}", "list enough racks for the range"))
        for i in range(rng.count):
            host = rng.hostname(i)
            if not DNS_LABEL.match(host):
                problems.append(Problem(f"{where}.prefix", rng.prefix,
                                        f"makes hostname {host!r}, not an RFC 1123 label",
                                        "keep prefix + number within 63 characters"))
                continue
            ov = spec.overrides.get(host, NodeOverride())
            facts = inventory.nodes.get(host)
            try:
                mgmt = ov.management_ip or rng.management_ip_start + i
                bmc = ov.bmc_address or (rng.bmc_address_start + i
                                         if rng.bmc_address_start else None)
            except ipaddress.AddressValueError:
                problems.append(Problem(f"{where}.managementIpStart",
                                        str(rng.management_ip_start),
                                        f"{rng.count} consecutive addresses run past "
                                        "255.255.255.255", "start the range lower"))
                break
            hcas = ov.hcas or spec.template.hcas
            netdevs = ov.netdevs or spec.template.netdevs
            rails = []
            for r, hca in enumerate(hcas):
                fact = facts.rails.get(r) if facts else None
                if fact and fact.hca and ov.hcas and fact.hca != hca:
                    problems.append(Problem(f"gpuNodes.overrides.{host}.hcas[{r}]", hca,
                                            f"{src} says rail {r} is {fact.hca}",
                                            "make the override and the inventory agree"))
                guid = ov.port_guids[r] if ov.port_guids and r < len(ov.port_guids) else (
                    fact.port_guid if fact else None)
                rails.append(Rail(index=r, hca=(fact.hca if fact and fact.hca else hca),
                                  netdev=netdevs[r] if r < len(netdevs) else "",
                                  port_guid=guid))
            node = GpuNode(
                hostname=host, management_ip=mgmt, bmc_address=bmc,
                rack=ov.rack or rng.racks[min(i // rng.nodes_per_rack, len(rng.racks) - 1)],
                su=ov.su or rng.su,
                slot=ov.slot if ov.slot is not None else rng.first_slot + i,
                rails=tuple(rails),
                ssh_host_key=facts.ssh_host_key if facts else None,
                management_mac=facts.management_mac if facts else None,
                template=spec.template, origin=where,
                storage_ports=tuple(StoragePort(i, f.hca, f.port_guid) for i, f in sorted(
                    facts.storage_ports.items())) if facts else (),
            )
            if facts:
                problems += _fact_problems(node, facts, src, spec.template.gpu.count)
            nodes.append(_normalised(node))
    return NodeExpansion(tuple(sorted(nodes, key=lambda n: n.hostname)), tuple(problems))


def _fact_problems(node: GpuNode, facts: Any, src: str, rails: int) -> list[Problem]:
    """Inventory facts get the same checks as values in the stack file."""
    out = []
    checks: list[tuple[str, Any, Any]] = [(f"rail {r.index} hca", r.hca, check_hca)
                                          for r in node.rails]
    checks += [(f"rail {r.index} portGuid", r.port_guid, check_guid)
               for r in node.rails if r.port_guid]
    checks += [(f"storage port {p.index} hca", p.hca, check_hca) for p in node.storage_ports]
    checks += [(f"storage port {p.index} portGuid", p.port_guid, check_guid)
               for p in node.storage_ports if p.port_guid]
    checks += [("managementMac", node.management_mac, check_mac),
               ("sshHostKey", node.ssh_host_key, check_host_key)]
    for what, value, check in checks:
        if value is None:
            continue
        try:
            check(value)
        except ValueError as err:
            msg, _, fix = str(err).partition(" || ")
            out.append(Problem("inventoryFile", value, f"{src}: {node.hostname} {what} {msg}",
                               fix or "correct the inventory file"))
    for r in sorted(facts.rails):
        if r >= rails:
            out.append(Problem("inventoryFile", r, f"{src}: {node.hostname} has rail {r} but "
                               f"nodes have {rails} rails (0..{rails - 1})",
                               "remove the row or fix its rail number"))
    return out


def _normalised(node: GpuNode) -> GpuNode:
    """Lower-case GUIDs and MACs from the inventory so comparisons are exact."""
    rails = tuple(Rail(r.index, r.hca, r.netdev, r.port_guid.lower() if r.port_guid else None)
                  for r in node.rails)
    storage = tuple(StoragePort(p.index, p.hca, p.port_guid.lower() if p.port_guid else None)
                    for p in node.storage_ports)
    mac = node.management_mac.lower() if isinstance(node.management_mac, str) else None
    return GpuNode(**{**node.__dict__, "rails": rails, "management_mac": mac,
                      "storage_ports": storage})


