"""Hosts a diff changes: members leaving (`<host>-member`), joining (`<host>-kubeadm-join`),
decommissioned, drained for their cables, rebooted (`<host>-reboot`), re-prepared in place
(`<host>-prepare`), moved to another address, or logging in another way; the subnet
managers whose files change (`<host>-opensm`). Boards, HCAs and switches replaced are
offline/replacements.py's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..acceptance import gate_urn, gpu_nodes, mark_untested
from ..addresses import address_steps
from ..conventions import names, resource_name, subject
from ..conventions import span as _span
from ..diff import Change
from ..operators import host_driver_change
from ..replacements import replaced_boards, replaced_switches, sm_roles
from .cabling import cable_moves


def hosts_with(changes: Iterable[Change], role: str, action: str) -> list[str]:
    """The hosts whose resource of `role` (a name's role, `names()`) the changes `action`."""
    return sorted(h for c in changes if c.action == action
                  if (h := subject(c.name, role)) is not None)


def rehosted(changes: Iterable[Change]) -> list[tuple[str, str, str]]:
    """(resource, old host, new host) for every command whose connection moved to another
    address: an update in pulumi-command, not a replace."""
    out = []
    for c in changes:
        lines = c.text_diffs.get("connection", []) if c.action == "update" else []
        old = next((ln[len("-host: "):] for ln in lines if ln.startswith("-host: ")), None)
        new = next((ln[len("+host: "):] for ln in lines if ln.startswith("+host: ")), None)
        if old and new and old != new:
            out.append((c.name, old, new))
    return sorted(out)


def _members(new_inputs: Mapping[str, Mapping[str, Any]] | None) -> set[str]:
    """Hosts that are Kubernetes nodes in the new rendering (they have a `<host>-member`)."""
    return {h for urn in new_inputs or {}
            if (h := subject(resource_name(urn), names().MEMBER)) is not None}


def drained_hosts(changes: Iterable[Change],
                  new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Cluster members drained by hand because their cables move, and members leaving. Hosts
    that are not Kubernetes nodes (the subnet-manager hosts) are never drained."""
    changes = list(changes)
    leaving = hosts_with(changes, names().MEMBER, "delete")
    joining = hosts_with(changes, names().KUBEADM_JOIN, "create")
    members = _members(new_inputs)
    peers = {m.split(" ")[0] for mv in cable_moves(changes, new_inputs)
             for m in (mv.old, mv.new) if m}
    moved = {h for h in peers | set(replaced_boards(changes)) if h in members}
    decommissioning = set(hosts_with(changes, names().DECOMMISSION, "create"))
    return sorted(set(leaving) | decommissioning | (moved - set(joining)))


def recabled_hosts(changes: Iterable[Change],
                   new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Members drained because their cables move, that stay in the cluster on the same
    board."""
    changes = list(changes)
    out = set(hosts_with(changes, names().MEMBER, "delete")) | set(replaced_boards(changes))
    out |= set(hosts_with(changes, names().DECOMMISSION, "create"))
    return [h for h in drained_hosts(changes, new_inputs) if h not in out]


def retested_hosts(changes: Iterable[Change],
                   new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """GPU nodes whose links are re-made in place (cables moved, a new switch's ports): when
    the stack gates on the acceptance test, they are marked untested at their drain and tested
    again after their uncordon."""
    if gate_urn(new_inputs) is None:
        return []
    changes = list(changes)
    on_new_switch = {h for s in replaced_switches(changes, new_inputs) for h in s.nodes}
    return sorted((set(recabled_hosts(changes, new_inputs)) | on_new_switch)
                  & gpu_nodes(new_inputs))


def joined_hosts(changes: Iterable[Change]) -> list[str]:
    """Hosts that join the cluster in this change (a kubeadm join of their own is created)."""
    return hosts_with(changes, names().KUBEADM_JOIN, "create")


def rebooted_hosts(changes: Iterable[Change]) -> list[str]:
    """GPU nodes already in the stack whose planned-reboot chain is re-created."""
    changes = list(changes)
    joining = set(hosts_with(changes, names().KUBEADM_JOIN, "create"))
    return sorted(h for h in hosts_with(changes, names().REBOOT, "create")
                  + hosts_with(changes, names().REBOOT, "replace") if h not in joining)


# What a command logs in with: a rotation or a new board behind the same address changes these,
# not what the command runs or where.
_LOGIN = ("privateKey: ", "password: ", "hostKey: ")


def login_only(change: Change) -> bool:
    """An update of only how a command logs in (the key or password it uses, the host key it
    expects), not of what it runs or where: it re-runs the same script, so it asks for no step
    beyond the rotation's or the board's own. (A host's preparation with a new host key is
    where a board swap is read from: it stays.)"""
    lines = [ln for ln in change.text_diffs.get("connection", []) if ln[:1] in ("-", "+")]
    board = subject(change.name, names().PREPARE) and any(
        ln[1:].startswith("hostKey: ") for ln in lines)
    return (change.action == "update" and change.paths == ["connection"] and bool(lines)
            and all(ln[1:].startswith(_LOGIN) for ln in lines) and not board)


def reboot_step(hosts: list[str], driver: tuple[str, str, list[str]] | None) -> str:
    """GPU nodes whose boot settings change (the `<host>-reboot` chain is re-created);
    `driver`: the hosts' GPU driver release change, when it is one of them."""
    which = ", ".join(hosts) if len(hosts) <= 12 else _span(hosts)
    why = (f"the hosts' GPU driver {driver[0]} -> {driver[1]}" if driver
           else "kernel arguments, initramfs, interface names change")
    install = (f"; then the driver, fabric manager and NSCQ of {driver[1]} installed and "
               "held;" if driver else ",")
    return (
        f"planned reboot of {which} ({why}): "
        "`pulumi up` takes each through check -> drain -> reboot -> wait -> uncordon. A node "
        "that is a cluster member takes the kube-system/gpu-cluster-reboot-lock ConfigMap "
        "first, so one member is out at a time: kubectl drain on the control plane (after "
        f"waiting for the gang jobs it shares with other nodes){install} "
        "`shutdown -r +1` on the node, SSH dialled until it is back (about an hour at most), "
        "then a check of the new boot ID, /proc/cmdline, every rail interface"
        + (" and the loaded driver with its fabric manager" if driver else "")
        + ", then uncordon (unless it was cordoned before). A node that needs no reboot "
        "passes through without a drain. Running jobs on a drained node are evicted: plan a "
        "maintenance window")


def sm_step(sms: list[str], new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    """The SM hosts in the order `pulumi up` restarts them: standbys first, the master (as the
    fabric publishes it) last."""
    roles = sm_roles(new_inputs)
    master = {h for h in sms if roles.get(h) == "master"}
    order = sorted(sms, key=lambda h: (h in master, h))
    standbys = [h for h in order if h not in master]
    text = ("subnet-manager files change on " + ", ".join(order) + ": `pulumi up` installs "
            "them and restarts opensm only where content changed, one host at a time")
    if master and standbys:
        return text + (f": the standby {', '.join(standbys)} first, back to STANDBY (sminfo) "
                       f"before the master {', '.join(sorted(master))} restarts; the fabric "
                       "keeps a master throughout, so running work is not interrupted")
    # One subnet manager: the switches keep forwarding on the routes it programmed.
    return text + (" (no standby: while opensm restarts the fabric has no subnet manager; "
                   "established routes keep forwarding, a port that changes meanwhile waits for "
                   "it)")


def membership_steps(changes: list[Change], decommissioning: list[str], leaving: list[str],
                     recabled: list[str], retested: list[str]) -> list[str]:
    """Nodes decommissioned, leaving, or drained before their cables move."""
    steps = []
    decommissioned = set(hosts_with(changes, names().DECOMMISSION, "delete"))
    for host in decommissioning:
        steps.append(
            f"decommission {host}: `pulumi up` cordons and drains it on the control plane "
            "before anything that waits for the cluster changes (the jobs sized by node count "
            "are resized after the drain); its cables, subnet-manager entries and membership "
            "stay. In a later change remove it from gpuNodes (its range and decommission): "
            "that change resets it and frees its ports")
    for host in leaving:
        if host in decommissioned:
            steps.append(f"{host} leaves, drained by its decommission: the Node is deleted, then "
                         f"kubeadm reset on {host}")
        else:
            steps.append(
                f"{host} leaves without a decommission first: `pulumi up` runs deletions after "
                "creates and updates, so its port maps, the SM files and the jobs sized by node "
                f"count change while it still runs work; its cordon and drain come last, then "
                f"kubeadm reset on {host}. To drain first: list it in gpuNodes.decommission, "
                "apply, then remove it")
    for host in recabled:
        steps.append(f"cordon and drain {host} before touching its cables: "
                     f"kubectl drain {host} --ignore-daemonsets --delete-emptydir-data"
                     + (f"; mark it untested ({mark_untested([host])}): its links are tested "
                        "again before work lands there" if host in retested else ""))
    return steps


def host_steps(changes: list[Change], prepared: list[str], joining: list[str],
               leaving: list[str], boards: list[str]) -> list[str]:
    """Planned reboots, and host preparation applied in place."""
    steps = []
    rebooted = rebooted_hosts(changes)
    if rebooted:
        steps.append(reboot_step(sorted(rebooted), host_driver_change(changes)))
    in_place = [h for h in prepared if h not in joining and h not in leaving
                and h not in rebooted and h not in boards]
    if in_place:
        which = (f"{len(in_place)} hosts ({_span(in_place)})" if len(in_place) > 2
                 else " and ".join(in_place))
        steps.append(f"host preparation changes on {which}: applied in place by `pulumi up`; "
                     "boot settings are unchanged, so no reboot and no drain")
    return steps + address_steps(changes)
