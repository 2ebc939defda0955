"""A replaced board, HCA or switch, read from the diff (pure): what it is, what is cabled to
it, and the steps a technician takes around `pulumi up`.

A board is read from the facts its host publishes (a new SSH host key or management MAC
behind the same address), an HCA or a switch from the GUIDs the fabrics publish for the subnet
managers' node-name maps (a new GUID behind the same name). A host's role (GPU node, subnet
manager's host, control plane) decides what the swap takes: a drain, a hand-over of the
master subnet manager, or the API with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .acceptance import mark_untested, retest_step
from .conventions import fact_changes, facts_by_name, names, published_facts, resource_name, subject
from .conventions import ports as _ports
from .conventions import span as _span
from .diff import Change


def sm_roles(new_inputs: Mapping[str, Mapping[str, Any]] | None) -> dict[str, str]:
    """Each subnet-manager host's role, master or standby, as the fabrics publish it
    (components/planning/facts.py fabric_facts)."""
    v = names()
    return {str(sm.get("host")): str(sm.get("role"))
            for facts in published_facts(new_inputs, v.COMPUTE_FABRIC_TYPE, v.STORAGE_FABRIC_TYPE)
            for sm in facts.get("subnetManagers") or ()}


def _swapped(sides: tuple[Any, Any] | None) -> bool:
    """A value published before and after that differs: a new part behind the same name."""
    return sides is not None and None not in sides and sides[0] != sides[1]


def replaced_boards(changes: Iterable[Change]) -> list[str]:
    """Hosts with a new board behind the same name and address, read from the facts each host
    publishes (components/planning/facts.py host_facts): a new SSH host key (a new board, or
    its OS reinstalled) or a new management MAC (a new board that kept its OS drives)."""
    out = []
    for c in changes:
        if c.type != names().HOST_TYPE or c.action != "update" or "facts.address" in c.values:
            continue
        if _swapped(c.values.get("facts.hostKey")) or _swapped(c.values.get("facts.managementMac")):
            out.append(c.name)
    return sorted(out)


def control_planes(new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """The control-plane hosts: each gets the cluster's identities once it serves the API
    (`<host>-identities`, the first one's after `kubeadm init`, the others' after their join)."""
    return sorted(h for urn in new_inputs or {}
                  if (h := subject(resource_name(urn), names().IDENTITIES)) is not None)


def host_role(host: str, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    """What a host is, by the resources the stack gives it: "control-plane" (it serves the
    API), "sm-host" (it runs a subnet manager), "gpu-node" (a planned-reboot chain) or
    "host"."""
    v = names()
    resources = {resource_name(urn) for urn in new_inputs or {}}
    for resource, role in ((v.IDENTITIES, "control-plane"), (v.OPENSM, "sm-host"),
                           (v.REBOOT, "gpu-node")):
        if v.name(resource, host) in resources:
            return role
    return "host"


def host_ports(host: str, new_inputs: Mapping[str, Mapping[str, Any]] | None
               ) -> list[tuple[str, str, int]]:
    """(what: `rail <n>` or the HCA, switch, port) of each of a host's fabric cables, from
    the switches' port maps: a GPU node's rails, a subnet manager host's HCA."""
    out = []
    for urn, inputs in (new_inputs or {}).items():
        if (sw := subject(resource_name(urn), names().SWITCH_CONFIG)) is None:
            continue
        for port, desc in _ports().port_descriptions(str(inputs.get("stdin", ""))).items():
            if (peer := _ports().hca_peer(desc)) is not None:
                if peer[0] == host:
                    out.append((f"rail {peer[1]}", sw, port))
            elif (words := _ports().split_cable(desc)[0].split(" "))[0] == host:
                out.append((" ".join(words[1:]) or "fabric", sw, port))
    return sorted(out, key=lambda t: (_natural(t[0]), t[1], t[2]))


def _natural(label: str) -> tuple[Any, ...]:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", label))


@dataclass(frozen=True)
class HcaSwap:
    """A host's HCA on one rail with a new port GUID: a new card behind the same cable."""

    host: str
    rail: int
    hca: str
    old: str
    new: str


def replaced_hcas(changes: Iterable[Change],
                  new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[HcaSwap]:
    """HCAs whose port GUID changes while their host and rail stay, from the GUIDs the fabrics
    publish for the subnet managers (a replaced board's are part of its own step)."""
    changes = list(changes)
    boards = set(replaced_boards(changes))
    v = names()
    hcas = {(host, rail): (entry.get("hcas") or ["?"])[0]
            for facts in published_facts(new_inputs, v.COMPUTE_FABRIC_TYPE, v.STORAGE_FABRIC_TYPE)
            for host, rails in (facts.get("rails") or {}).items()
            for rail, entry in rails.items()}
    found = {(path[0], int(path[1])): sides for path, sides in _guid_changes(changes, "railGuids")
             if len(path) == 2}
    return [HcaSwap(host, rail, hcas.get((host, str(rail)), "?"), old, new)
            for (host, rail), (old, new) in sorted(found.items()) if host not in boards]


def _guid_changes(changes: Iterable[Change], key: str
                  ) -> Iterable[tuple[tuple[str, ...], tuple[Any, Any]]]:
    """(path under the fabrics' published `key`, (old, new)) of each GUID that changes."""
    v = names()
    return ((path, sides) for c in changes if c.action == "update"
            and c.type in (v.COMPUTE_FABRIC_TYPE, v.STORAGE_FABRIC_TYPE)
            for path, sides in fact_changes(c, key).items() if _swapped(sides))


def hca_link(swap: HcaSwap, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    """Where the swapped card's cable lands: `<switch> port <n>`."""
    return next((f"{sw} port {port}" for what, sw, port in host_ports(swap.host, new_inputs)
                 if what == f"rail {swap.rail}"), f"its rail-{swap.rail} leaf port")


@dataclass(frozen=True)
class SwitchSwap:
    """A switch replaced by another chassis (an RMA): a new GUID behind the same name, and every
    cable on it moved port for port."""

    switch: str
    old: str
    new: str
    nodes: tuple[str, ...]  # hosts with a rail on it
    rails: tuple[int, ...]
    others: tuple[str, ...]  # subnet-manager hosts cabled to it
    uplinks: int  # links to other switches
    ports: tuple[str, ...]  # "port <n>: <peer>", in port order
    storage: tuple[str, ...] = ()  # storage server ports cabled to it ("lustre-01 port1")


def replaced_switches(changes: Iterable[Change],
                      new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[SwitchSwap]:
    """Switches whose GUID changes in what the fabrics publish for the subnet managers
    (fabric.switchGuids): a new chassis behind the same name, with what is cabled to it (its
    port map)."""
    found = {path[0]: sides for path, sides in _guid_changes(changes, "switchGuids")
             if len(path) == 1}
    out = []
    for sw, sides in sorted(found.items()):
        config = next((inputs for urn, inputs in (new_inputs or {}).items()
                       if resource_name(urn) == names().name(names().SWITCH_CONFIG, sw)), {})
        descs = _ports().port_descriptions(str(config.get("stdin", "")))
        hcas = [peer for d in descs.values() if (peer := _ports().hca_peer(d))]
        uplinks = [d for d in descs.values() if _ports().switch_peer(d)]
        # Neither a rail nor a switch: a subnet-manager host ("sm-02 mlx5_0") or a storage
        # server port (the planner names its HCAs port<i>: "lustre-01 port1").
        peers = [_ports().split_cable(d)[0] for d in descs.values()
                 if not _ports().hca_peer(d) and not _ports().switch_peer(d)]
        storage = sorted(p for p in peers if p.split(" ")[-1].startswith("port"))
        others = sorted({p.split(" ")[0] for p in peers if p not in storage})
        out.append(SwitchSwap(sw, sides[0], sides[1], tuple(sorted({h for h, _, _ in hcas})),
                              tuple(sorted({r for _, r, _ in hcas})), tuple(others), len(uplinks),
                              tuple(f"port {port}: {_ports().split_cable(d)[0]}"
                                    for port, d in sorted(descs.items())), tuple(storage)))
    return out


def switch_swap_steps(swaps: list[SwitchSwap], stack: str, untested: Sequence[str] = ()
                      ) -> list[str]:
    """Before `pulumi up`: the new switch reachable with the stack's password, the nodes on it
    drained (and marked untested where the gate tests them again), every cable moved to the
    same port of the new chassis."""
    steps = []
    for s in swaps:
        nodes = _span(s.nodes, whole_up_to=6)
        marked = [h for h in s.nodes if h in untested]
        steps.append(
            f"switch replacement of {s.switch} (GUID {s.old} -> {s.new}): every link on it goes "
            f"down while it is swapped. First, from the new switch's console, give it its "
            f"management address (fabric.switchManagementIps) and the admin password (the "
            f"switchPassword secret), so `pulumi up` can log in; kubectl drain the "
            f"{len(s.nodes)} nodes with a rail on it ({nodes})"
            + (f" and mark them untested ({mark_untested(marked)})" if marked else "")
            + (f"; {', '.join(s.others)} lose{'s' * (len(s.others) == 1)} "
               f"{'its' if len(s.others) == 1 else 'their'} subnet-manager link (the other "
               "subnet manager is, or takes over as, master)" if s.others else "")
            + (f"; the storage link{'s' * (len(s.storage) > 1)} of {', '.join(s.storage)} "
               "go down (each server's other ports, on other leaves, keep it reachable)"
               if s.storage else "")
            + f". Label each cable by port, swap the chassis, and plug every cable into the "
            f"same port of the new one ({len(s.ports)} ports: {'; '.join(s.ports)}). `pulumi "
            "up` then sends the switch its configuration and the subnet managers its new GUID; "
            f"check `make verify-fabric STACK={stack}`, then uncordon the nodes"
            + (" (they stay untested until the gate's re-run below)" if marked else ""))
    return steps


def by_host(swaps: list[HcaSwap]) -> dict[str, list[HcaSwap]]:
    """HCA swaps grouped by host: one drain and power-off for all of a node's cards."""
    out: dict[str, list[HcaSwap]] = {}
    for s in swaps:
        out.setdefault(s.host, []).append(s)
    return out


def hca_steps(swaps: list[HcaSwap], new_inputs: Mapping[str, Mapping[str, Any]] | None
               ) -> tuple[list[str], list[str]]:
    """Before `pulumi up`: drain, power off, swap the cards and re-seat their cables; after it:
    power on and check. The subnet managers learn the new GUIDs while the node is off: applied
    earlier, an old card would leave its partitions while the node still runs work."""
    before, after = [], []
    for host, cards in by_host(swaps).items():
        which = "; ".join(f"rail {s.rail} ({s.hca}, port GUID {s.old} -> {s.new}, cabled to "
                          f"{hca_link(s, new_inputs)})" for s in cards)
        before.append(
            f"HCA swap in {host}: {which}. kubectl drain {host} --ignore-daemonsets "
            "--delete-emptydir-data; power it off (its BMC); replace the "
            f"card{'s' * (len(cards) > 1)} and re-seat each cable into the same rail. Then "
            "apply (`pulumi up`) while it is off: the subnet managers drop the old GUIDs and "
            "admit the new ones")
        checks = ", ".join(f"`ibstat {s.hca}` port GUID {s.new}" for s in cards)
        after.append(f"power on {host}; check {checks}, each link Active at the rail's rate; "
                     f"then {retest_step(host, new_inputs)}")
    return before, after


def management_mac(host: str, new_inputs: Mapping[str, Mapping[str, Any]] | None
                   ) -> str | None:
    """The MAC the management network's DHCP/PXE server must know the host by (its
    preparation checks it), if the stack has one for it."""
    return management_macs([host], new_inputs).get(host)


def management_macs(hosts: Iterable[str], new_inputs: Mapping[str, Mapping[str, Any]] | None
                    ) -> dict[str, str]:
    """`management_mac` of each of `hosts` that has one, from the facts hosts publish."""
    facts = facts_by_name(new_inputs, names().HOST_TYPE)
    return {h: str(mac) for h in hosts if (mac := (facts.get(h) or {}).get("managementMac"))}


def board_steps(hosts: list[str], new_inputs: Mapping[str, Mapping[str, Any]] | None,
                 stack: str) -> list[str]:
    """A board replaced behind the same name, as its role needs: drain (a GPU node), hand over
    the master subnet manager (an SM host), save etcd and the certificates (a control plane);
    then swap, re-seat every cable where it was (by switch port), and `pulumi up` re-applies
    what is done once per board."""
    return [_board_step(host, new_inputs, stack) for host in hosts]


def _board_step(host: str, new_inputs: Mapping[str, Mapping[str, Any]] | None,
                stack: str) -> str:
    seats = "; ".join(f"{what}: {sw} port {port}"
                      for what, sw, port in host_ports(host, new_inputs))
    cables = f"re-seat its cables exactly where they were ({seats or 'none'})"
    mac = management_mac(host, new_inputs)
    dhcp = (f"its management MAC is now {mac}: first load build/{stack}/network/dhcp-hosts "
            "into the management network's DHCP/PXE server. " if mac else "")
    role = host_role(host, new_inputs)
    if role == "sm-host":
        master = sm_roles(new_inputs).get(host) == "master"
        return (
            f"board replacement of {host}, the {'master' if master else 'standby'} subnet "
            f"manager's host (not a Kubernetes node: nothing to drain): {dhcp}"
            + ("Check `sminfo` on the standby shows it STANDBY, then stop opensm here "
               "(systemctl stop opensm) so the standby takes over. " if master else "")
            + f"Power it off, swap the board, {cables}; power it on. `pulumi up` then prepares "
            "it and installs its subnet-manager files. Check `sminfo` and "
            f"`make verify-fabric STACK={stack}`")
    if role == "control-plane":
        return _control_plane_board(host, dhcp, len(control_planes(new_inputs)))
    return (
        f"board replacement of {host}: {dhcp}kubectl drain {host} --ignore-daemonsets "
        f"--delete-emptydir-data; power it off, swap the board, {cables}; power it on with DGX "
        "OS. `pulumi up` then re-applies its BMC settings, prepares it (a planned reboot if "
        "needed) and joins it with a fresh token. Check `ibstat` port GUIDs against the "
        f"inventory and `make verify-fabric STACK={stack}`, then kubectl uncordon {host}")


def _control_plane_board(host: str, dhcp: str, members: int) -> str:
    """A control plane's board: the only one (the API down) or one of several (etcd keeps
    its quorum, DNS and the ingress keep a replica on another control plane)."""
    if members <= 1:
        return (
            f"board replacement of {host}, the only control plane: {dhcp}from power-off until "
            "it is back, the Kubernetes API, the scheduler, the controllers, cluster DNS and the "
            "ingress are down (running pods keep running; nothing new starts). Before: `etcdctl "
            "snapshot save` and copy /etc/kubernetes/pki off it. Power it off, swap the board "
            "keeping its OS drives (etcd's data and the certificates are on them), power it on; "
            "with new drives, restore the certificates and the snapshot before its kubelet "
            "starts (kubeadm's etcd restore). `pulumi up` then prepares it; its guarded "
            "`kubeadm init` leaves a running control plane as it is. Check `kubectl get nodes`")
    return (
        f"board replacement of {host}, one of {members} control planes (etcd keeps its quorum "
        f"with {members - 1}; the API stays up behind the VIP): {dhcp}Before: `etcdctl "
        f"snapshot save` on another control plane, then `kubectl drain {host} "
        "--ignore-daemonsets` (CoreDNS and the ingress controller move one replica at a time: "
        "their disruption budgets). Power it off, swap the board keeping its OS drives (its "
        "etcd member's data and the certificates are on them), power it on; with new drives, "
        "first remove its etcd member from another control plane (`etcdctl member remove`) "
        "and `kubectl delete node` it, then join it again with `kubeadm join --control-plane` "
        "(the stack's join runs once per host). `pulumi up` then prepares it. Check "
        f"`kubectl get nodes` and `etcdctl endpoint health --cluster`, then kubectl uncordon "
        f"{host}")
