"""InfiniBand fabric rules. Resource rules read the facts the fabric component publishes as
its props (`components/planning/facts.py`: derived from the switch CLI and subnet-manager files
it pushes); the stack rule relates the switch cabling to the Kubernetes nodes' SU labels."""

from __future__ import annotations

from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ResourceValidationArgs,
    StackValidationArgs,
)

from .common import cabled_rails, config, qty
from .registry import Report, get, is_list, is_map, resource_rule, stack_rule
from .resource_names import COMPUTE_FABRIC_TYPE, STORAGE_FABRIC_TYPE
from .vocabulary import SU_LABEL

MANDATORY = EnforcementLevel.MANDATORY
# Both fabrics' components: the compute rails and a storage fabric of its own each have their
# switches, subnet managers and partitions checked alike.
FABRICS = (COMPUTE_FABRIC_TYPE, STORAGE_FABRIC_TYPE)


def _facts(args: Any) -> Any:
    return get(args.props, "facts")


def _switches(args: Any) -> list[tuple[str, Any]]:
    sw = get(_facts(args), "switches")
    return [(n, sw[n]) for n in sorted(sw)] if is_map(sw) else []


@resource_rule(
    "fabric-facts-published",
    "The fabric component publishes its facts, so the fabric rules have something to check",
    MANDATORY,
    FABRICS,
)
def fabric_facts_published(args: ResourceValidationArgs, report: Report) -> None:
    """Every fabric rule reads these facts; without them a miscabled or oversubscribed plan
    would pass review silently instead of failing loudly."""
    facts = _facts(args)
    if not is_map(facts) or not is_map(get(facts, "switches")) or not get(facts, "switches"):
        report("props.facts.switches is missing; pass components.planning.facts.fabric_facts(...)"
               " as the component's props")


@resource_rule(
    "fabric-non-blocking",
    "Every leaf has at least as many switch uplinks as host-facing ports (1:1, non-blocking)",
    MANDATORY,
    FABRICS,
)
def fabric_non_blocking(args: ResourceValidationArgs, report: Report) -> None:
    """All-reduce across nodes runs at the bisection bandwidth: a 2:1 leaf halves the
    inter-node bus bandwidth of every job that spans leaves, and nothing reports it — the
    NCCL test just comes out at 50 %. (~80 cables for 8 DGX H100s would be 4:1.)"""
    for name, s in _switches(args):
        if get(s, "role") != "leaf":
            continue
        down, up = qty(get(s, "hostPorts")), qty(get(s, "switchPorts"))
        if isinstance(down, int) and isinstance(up, int) and up < down:
            report(f"leaf {name}: {down} host ports, {up} uplinks "
                   f"({down / max(up, 1):.2g}:1 oversubscribed)")


@resource_rule(
    "fabric-within-radix",
    "No switch uses a port beyond its radix (QM9700: 64 ports)",
    MANDATORY,
    FABRICS,
)
def fabric_within_radix(args: ResourceValidationArgs, report: Report) -> None:
    """A plan that needs port 65 on a 64-port switch cannot be cabled; the technician finds
    out in the data hall. Config: radix (64)."""
    radix = config(args, "radix", 64)
    for name, s in _switches(args):
        used = qty(get(s, "highestPort"))
        ports = (qty(get(s, "hostPorts")) or 0) + (qty(get(s, "switchPorts")) or 0)
        if isinstance(used, int) and used > radix or ports > radix:
            report(f"switch {name} uses port {used} ({ports} ports) beyond its radix {radix}")


@stack_rule(
    "fabric-one-leaf-per-rail-per-su",
    "Within a scalable unit, rail r of every node is cabled to the same single leaf",
    MANDATORY,
)
def fabric_one_leaf_per_rail_per_su(args: StackValidationArgs, report: Report) -> None:
    """Rail alignment lets NCCL keep rail-r traffic on one leaf (one hop) and makes the ftree
    routing of the SU balanced; a node whose rail lands on another leaf sends that rail's
    traffic over the spines. SU membership comes from the nodes' SU labels (NodePatch), the
    cabling from the fabric's published facts (the switch port descriptions it configures)."""
    su_of: dict[str, str] = {}
    for r in args.resources:
        if r.resource_type == "kubernetes:core/v1:NodePatch":
            su = get(r.props, "metadata", "labels", SU_LABEL)
            host = get(r.props, "metadata", "name")
            if isinstance(su, str) and isinstance(host, str):
                su_of[host] = su
    leaves: dict[tuple[str, int], dict[str, list[str]]] = {}
    for host, rails in sorted(cabled_rails(args.resources).items()):
        for rail, (_, cabled) in sorted(rails.items()):
            switches = sorted(set(cabled))
            if len(switches) > 1:
                report(f"{host} rail {rail} is cabled to {switches}")
            if host in su_of:
                for sw in switches:
                    leaves.setdefault((su_of[host], rail), {}).setdefault(sw, []).append(host)
    for (su, rail), by_leaf in sorted(leaves.items()):
        if len(by_leaf) > 1:
            detail = "; ".join(f"{sw}: {', '.join(h)}" for sw, h in sorted(by_leaf.items()))
            report(f"{su} rail {rail} spans {len(by_leaf)} leaves ({detail})")


@resource_rule(
    "subnet-managers-redundant",
    "At least two subnet managers with distinct priorities in 0..15",
    MANDATORY,
    FABRICS,
)
def subnet_managers_redundant(args: ResourceValidationArgs, report: Report) -> None:
    """With one SM the fabric cannot re-route around a failed link or switch once that SM's
    host is down; equal priorities make master election depend on GUID order and flap after
    a reboot. Config: minimum (2)."""
    minimum = config(args, "minimum", 2)
    sms = get(_facts(args), "subnetManagers")
    sms = list(sms) if is_list(sms) else []
    if len(sms) < minimum:
        report(f"{len(sms)} subnet manager(s); run at least {minimum} (master + standby)")
    prios = [qty(get(s, "priority")) for s in sms]
    for s, p in zip(sms, prios, strict=True):
        if not isinstance(p, int) or not 0 <= p <= 15:
            report(f"subnet manager {get(s, 'host')} has sm_priority {p!r}; use 0..15")
    seen = [p for p in prios if isinstance(p, int)]
    if len(set(seen)) != len(seen):
        report(f"subnet-manager priorities {seen} are not distinct")


@resource_rule(
    "subnet-manager-m-key-protected",
    "Every subnet manager protects the ports' configuration with an M_Key at level 2",
    MANDATORY,
    FABRICS,
)
def subnet_manager_m_key_protected(args: ResourceValidationArgs,
                                   report: Report) -> None:
    """Any pod holding an HCA's umad device can send SMPs. Below M_Key protection level 2 a
    port accepts a Set of its P_Key table or state from anyone (level 1 still returns the key
    to any Get), so a tenant could move itself into another partition."""
    sms = get(_facts(args), "subnetManagers")
    for s in sms if is_list(sms) else ():
        level = qty(get(s, "mKeyProtection"))
        if not isinstance(level, int) or level < 2:
            report(f"subnet manager {get(s, 'host')} sets m_key_protection_level {level}; "
                   "use 2 (Sets need the M_Key, Gets do not return it)")


@resource_rule(
    "subnet-manager-keys-secret",
    "The subnet managers' M_Key, SM_Key and SA_Key come from Pulumi secrets, not the file",
    MANDATORY,
    FABRICS,
)
def subnet_manager_keys_secret(args: ResourceValidationArgs, report: Report) -> None:
    """A key written in the rendered opensm.conf is in the plan, the state and every
    rendering in clear text, and every copy of the file shares it; the stack appends the keys
    on the SM host from the fabricMKey/fabricSmKey/fabricSaKey secrets."""
    sms = get(_facts(args), "subnetManagers")
    for s in sms if is_list(sms) else ():
        in_file = get(s, "keysInFile")
        if is_list(in_file) and in_file:
            report(f"subnet manager {get(s, 'host')}'s rendered opensm.conf sets "
                   f"{', '.join(in_file)}; set the keys as secrets (fabricMKey, fabricSmKey, "
                   "fabricSaKey) instead")


@resource_rule(
    "switch-sm-disabled",
    "When host subnet managers run, every switch has its embedded SM off",
    MANDATORY,
    FABRICS,
)
def switch_sm_disabled(args: ResourceValidationArgs, report: Report) -> None:
    """A QM9700's embedded SM at a higher priority would take mastership from opensm with a
    different routing engine and partition table: pkeys and ftree routing silently lost."""
    sms = get(_facts(args), "subnetManagers")
    if not is_list(sms) or not sms:
        return
    for name, s in _switches(args):
        if get(s, "switchSmDisabled") is not True:
            report(f"switch {name} does not run `no ib sm`")


@resource_rule(
    "partition-pkeys-in-range",
    "Tenant partition keys are distinct and in 0x0001..0x7ffe (0x7fff is the default)",
    MANDATORY,
    FABRICS,
)
def partition_pkeys_in_range(args: ResourceValidationArgs, report: Report) -> None:
    """PKeys are 15 bits; 0x0000 is invalid and 0x7fff the default partition, so a tenant on
    either is not isolated, and two tenants on one pkey see each other's traffic."""
    parts = get(_facts(args), "partitions")
    seen: dict[int, str] = {}
    for p in parts if is_list(parts) else ():
        name, raw = get(p, "name"), get(p, "pkey")
        try:
            key = int(str(raw), 16) & 0x7FFF if isinstance(raw, str) else int(raw)
        except (TypeError, ValueError):
            report(f"partition {name} has pkey {raw!r}")
            continue
        if name == "Default":
            if key != 0x7FFF:
                report(f"the Default partition must be 0x7fff, not {raw}")
            continue
        if not 0x0001 <= key <= 0x7FFE:
            report(f"partition {name} pkey {raw} is outside 0x0001..0x7ffe")
        if key in seen:
            report(f"partitions {seen[key]} and {name} share pkey {raw}")
        seen[key] = name
