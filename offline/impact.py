"""The first lines of a preview: what a change does to hardware and running work.

Read from the diff alone, like the runbook (offline/runbook/, whose conventions it shares):
existing links that move, cables to plug and to pull (by media and reach, as the port
descriptions carry them), switches to rack or retire, nodes drained or rebooted, and whether
running work sees an outage. The full bill of materials of the new plan is
build/<stack>/fabric/bom.csv.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .acceptance import acceptance_line, gpu_nodes, recabled_line
from .addresses import address_lines
from .conventions import span
from .diff import Diff
from .operators import OperatorRollout, host_driver_change, operator_rollouts
from .quarantine import detector_lines, quarantine_lines, quarantine_on
from .replacements import (
    HcaSwap,
    SwitchSwap,
    by_host,
    control_planes,
    hca_link,
    host_role,
    replaced_boards,
    replaced_hcas,
    replaced_switches,
)
from .rotations import Rotation, secret_rotations
from .runbook.cabling import CableMove, Cabling, cable_moves, cabling, switch_changes
from .runbook.hosts import drained_hosts, joined_hosts, rebooted_hosts, retested_hosts
from .runbook.settings import endpoint_move, endpoint_refusal
from .runbook.upgrade import (
    batch_words,
    kubernetes_upgrade,
    upgrade_lanes,
    upgrade_refused,
    upgraded_control_planes,
)


def _span(hosts: Sequence[str]) -> str:
    return span(hosts, whole_up_to=6)


def _cables(moves: Iterable[CableMove], side: str) -> str:
    kinds = Counter((getattr(mv, f"{side}_cable") or "cable") for mv in moves)
    return ", ".join(f"{n} x {kind}" for kind, n in sorted(kinds.items()))


# Kubeflow jobs the engine deletes and submits again on a changed spec
# (components/layers/workloads.py).
JOB_TYPES = ("kubernetes:kubeflow.org/v1:PyTorchJob", "kubernetes:kubeflow.org/v1:MPIJob")


def _acceptance_test(urn: str, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> bool:
    labels = ((new_inputs or {}).get(urn) or {}).get("metadata", {}).get("labels") or {}
    return labels.get("app.kubernetes.io/component") == "nccl-test"


# What a new board means, by the host's role (offline/replacements.py host_role).
_BOARD = {
    "gpu-node": ": drained and powered off for the swap; its fabric links are down until it is "
                "back",
    "host": ": drained and powered off for the swap",
    "sm-host": ", a subnet manager's host: not a Kubernetes node (nothing drained); its fabric "
               "link is down until it is back, and the other subnet manager is master meanwhile",
    "control-plane": ", a control plane: powered off for the swap (etcd snapshot and "
                     "certificates saved first)",
}


def refusals(diff: Diff, new_inputs: Mapping[str, Mapping[str, Any]] | None = None
             ) -> list[str]:
    """The changes `pulumi up` must not be let to make, each with why: the impact marks them
    REFUSED and the preview fails on them."""
    out = [f"{r.secret} rotation {r.old} -> {r.new}: no host authorises the new key yet, so "
           "every command would fail to log in (authorise it first: docs/day2.md)"
           for r in secret_rotations(diff.changes, new_inputs) if r.unauthorised]
    upgrade = kubernetes_upgrade(diff.changes)
    if upgrade is not None and upgrade_refused(*upgrade[:2]):
        out.append(f"Kubernetes {upgrade[0]} -> {upgrade[1]}: kubeadm upgrades one minor "
                   "version at a time and never back (its version skew policy)")
    if (moved := endpoint_move(diff.changes)) is not None:
        out.append(endpoint_refusal(*moved).removeprefix("REFUSED "))
    return out


@dataclass
class _Effects:
    """What a diff does to hardware and running work, read once (the runbook's readers)."""

    work: Cabling
    racked: list[str]
    retired: list[str]
    drained: list[str]  # by the stack, for re-cabling, a board or a removal
    rebooted: list[str]
    rollouts: list[OperatorRollout]
    host_driver: tuple[str, str, list[str]] | None  # the hosts' GPU driver: old, new, nodes
    swaps: list[HcaSwap]
    boards: dict[str, str]  # host -> its role
    switches_swapped: list[SwitchSwap]
    upgrade: tuple[str, str, str] | None
    upgrading: bool  # an upgrade `pulumi up` runs (not one the skew policy refuses)
    lanes: dict[str, list[list[str]]]
    control_planes: list[str]  # upgraded, each drained in turn
    members: int  # control planes in the new config (one: its drain stops DNS and ingress)
    endpoint: tuple[str, str] | None  # the API endpoint moving: refused
    rotations: list[Rotation]
    joining: list[str]
    resubmitted: list[str]
    acceptance: list[str]  # the gate's runs: in this `pulumi up`, after re-cabled uncordons
    stopped: list[str]
    # the health checks (detector, quarantine) starting, stopping or changing (quarantine.py)
    health: list[str]
    quarantining: bool  # the control planes run the quarantine after the change

    @property
    def by_operator(self) -> list[str]:
        return sorted({h for r in self.rollouts for h in r.drained})

    def __bool__(self) -> bool:
        w = self.work
        return bool(w.moved or w.recabled or w.pulled or w.plugged or self.racked
                    or self.retired or self.drained or self.rebooted or self.upgrade
                    or self.rotations or self.resubmitted or self.acceptance or self.stopped
                    or self.rollouts or self.swaps or self.boards or self.switches_swapped
                    or self.endpoint or self.health)


def _effects(diff: Diff, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> _Effects:
    changes = diff.changes
    switches = switch_changes(changes)
    upgrade = kubernetes_upgrade(changes)
    upgrading = upgrade is not None and not upgrade_refused(*upgrade[:2])
    jobs = [c for c in changes if c.type in JOB_TYPES]
    tests = {c.name for c in jobs if _acceptance_test(c.urn, new_inputs)}
    boards = {h: host_role(h, new_inputs) for h in replaced_boards(changes)}
    joining = joined_hosts(changes)
    untested = sorted((set(joining) | {h for h, role in boards.items() if role == "gpu-node"})
                      & gpu_nodes(new_inputs))
    retested = retested_hosts(changes, new_inputs)
    run = acceptance_line(changes, new_inputs, untested, retested)
    return _Effects(
        work=cabling(cable_moves(changes, new_inputs)),
        racked=sorted(sw for sw, a in switches.items() if a == "create"),
        retired=sorted(sw for sw, a in switches.items() if a == "delete"),
        drained=drained_hosts(changes, new_inputs), rebooted=rebooted_hosts(changes),
        rollouts=operator_rollouts(changes, new_inputs), swaps=replaced_hcas(changes, new_inputs),
        host_driver=host_driver_change(changes),
        boards=boards,
        switches_swapped=replaced_switches(changes, new_inputs),
        upgrade=upgrade, upgrading=upgrading,
        lanes=upgrade_lanes(new_inputs) if upgrading else {},
        control_planes=upgraded_control_planes(changes) if upgrading else [],
        members=len(control_planes(new_inputs)), endpoint=endpoint_move(changes),
        rotations=secret_rotations(changes, new_inputs), joining=joining,
        resubmitted=sorted(c.name for c in jobs if c.action == "replace" and c.name not in tests),
        acceptance=[*([run] if run else []),
                    *([recabled_line(retested, new_inputs)] if retested else [])],
        stopped=sorted(c.name for c in jobs if c.action == "delete"),
        health=[*detector_lines(changes), *quarantine_lines(changes)],
        quarantining=quarantine_on(new_inputs))


def impact(diff: Diff, new_inputs: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """A short verdict, or one line saying nothing physical changes."""
    e = _effects(diff, new_inputs)
    addresses = address_lines(diff.changes)
    if not e and not addresses:
        return ["Impact: no cable, switch or node is touched; no running work is drained."]
    lines = ["Impact on hardware and running work:", *_what_changes(e, new_inputs)]
    moved, new, pulled = e.work.existing_links_moved, e.work.plugged, e.work.pulled
    media = Counter(e.work.new_media)
    lines.append(
        f"  existing links moved: {moved}"
        + (" (the fabric is re-cabled: every host on them is drained)" if moved else "")
        + (f"; {sum(media.values())} need{'s' * (sum(media.values()) == 1)} a new cable ("
           + ", ".join(f"{n} x {kind}" for kind, n in sorted(media.items())) + ")"
           if media else ""))
    lines.append(f"  cables to plug: {len(new)}" + (f" ({_cables(new, 'new')})" if new else "")
                 + f"; to pull: {len(pulled)}"
                 + (f" ({_cables(pulled, 'old')})" if pulled else ""))
    if e.racked or e.retired:
        lines.append(f"  switches: rack {len(e.racked)}"
                     + (f" ({_span(e.racked)})" if e.racked else "")
                     + f", retire {len(e.retired)}"
                     + (f" ({_span(e.retired)})" if e.retired else ""))
    lines.append(_drain_line(e))
    lines += addresses
    if e.joining:
        lines.append(f"  nodes added: {len(e.joining)} ({_span(e.joining)})")
    if e.resubmitted:
        lines.append(f"  jobs resubmitted: {len(e.resubmitted)} ({_span(e.resubmitted)}): "
                     "their pods restart; training resumes from its last checkpoint")
    lines += e.acceptance
    if e.stopped:
        lines.append(f"  jobs stopped: {len(e.stopped)} ({_span(e.stopped)})")
    if e.rebooted:
        lines.append(f"  planned reboots: {len(e.rebooted)} ({_span(e.rebooted)}), one cluster "
                     "member at a time")
    return [*lines, *e.health, _outage(e)]


def _what_changes(e: _Effects, new_inputs: Mapping[str, Mapping[str, Any]] | None
                  ) -> list[str]:
    """Rotations, the Kubernetes upgrade, operators' roll-outs, new boards and HCAs."""
    lines = []
    for r in e.rotations:
        where = f" on {len(r.hosts)} hosts" if r.hosts else ""
        lines.append(f"  {r.secret} rotation {r.old} -> {r.new}: " + (
            "REFUSED, no host authorises the new key yet (authorise it first)"
            if r.unauthorised else
            f"{len(r.commands)} commands re-run{where} with the new secret"))
    if e.upgrade:
        old_version, new_version, _ = e.upgrade
        lines.append(f"  Kubernetes {old_version} -> {new_version}: " + (
            "`pulumi up` runs kubeadm's upgrade: the control plane, then the GPU nodes "
            f"{batch_words(e.lanes)}, each drained" if e.upgrading
            else "REFUSED, it skips a minor or goes back (kubeadm's version skew policy)"))
    lines += [f"  {r.line()}" for r in e.rollouts]
    if e.host_driver:
        old, new, nodes = e.host_driver
        lines.append(f"  GPU driver {old} -> {new} on the hosts: {len(nodes)} GPU nodes "
                     f"({_span(nodes)}), one member at a time, each drained (after its gang "
                     "wait), the new driver, fabric manager and NSCQ installed, then "
                     "rebooted into it")
    if e.endpoint:
        lines.append(f"  {endpoint_refusal(*e.endpoint)}")
    lines += [f"  board replaced: {h}{_BOARD[role]}" for h, role in sorted(e.boards.items())]
    for w in e.switches_swapped:
        lines.append(
            f"  switch replaced: {w.switch} (GUID {w.old} -> {w.new}): its {len(w.ports)} links "
            f"are down while it is swapped: rails {', '.join(map(str, w.rails))} of "
            f"{len(w.nodes)} GPU nodes ({_span(w.nodes)})"
            + (f", the subnet-manager link of {', '.join(w.others)}" if w.others else "")
            + (f", the storage link{'s' * (len(w.storage) > 1)} of {', '.join(w.storage)}"
               if w.storage else "")
            + f", {w.uplinks} uplinks; its nodes are drained first")
    for host, cards in by_host(e.swaps).items():
        rails = ", ".join(f"rail {s.rail} ({s.hca}) {s.old} -> {s.new}" for s in cards)
        links = ", ".join(hca_link(s, new_inputs) for s in cards)
        lines.append(f"  HCA replaced: {host} {rails}: {host} is drained and powered off for "
                     f"the swap; its link{'s' * (len(cards) > 1)} ({links}) "
                     f"{'are' if len(cards) > 1 else 'is'} down until it is back")
    return lines


def _drain_line(e: _Effects) -> str:
    """Every node drained, and by what: an upgrade (each member in turn, the GPU nodes by
    batch after the control plane), a planned reboot (the chain's drain), an operator updating
    its driver, an HCA swap, or the stack for cables and boards."""
    upgraded = {h for lane in e.lanes.values() for b in lane for h in b} | set(e.control_planes)
    swapped = {s.host for s in e.swaps}
    on_switch = {h for w in e.switches_swapped for h in w.nodes}
    # (why, its nodes, one node or batch at a time): a swap drains its nodes together.
    reasons = [(w, hosts, turn) for w, hosts, turn in (
        ("for the upgrade", (upgraded or set(e.drained)) if e.upgrading else set(), True),
        ("before its reboot", set(e.rebooted), True),
        ("by the operator updating its driver", set(e.by_operator), True),
        ("for its HCA swap", swapped, False),
        ("for the switch swap", on_switch, False)) if hosts]
    why = [w for w, _, _ in reasons]
    drained = sorted(set(e.drained).union(*(hosts for _, hosts, _ in reasons)))
    in_turn = len(drained) > 1 and any(turn for _, _, turn in reasons)
    return (f"  nodes drained: {len(drained)}" + (f" ({_span(drained)})" if drained else "")
            + (f",{' each in turn' * in_turn} {' or '.join(why)}" if why else ""))


def _outage(e: _Effects) -> str:
    """What running work sees."""
    swapped = [h for h, role in e.boards.items() if role == "control-plane"]
    if swapped and e.members <= 1:
        return (f"  outage: the Kubernetes API, cluster DNS and the ingress are down while "
                f"{', '.join(swapped)} is swapped: it is the only control plane (running pods "
                "keep running; nothing new starts)")
    if e.upgrading:
        return ("  outage: each node's jobs are evicted in turn; " + (
            "the only control plane's drain for its kubelet takes cluster DNS and the ingress "
            "down for minutes, and its API blips while it upgrades" if e.members <= 1 else
            "the control planes upgrade one at a time (etcd keeps its quorum, the API stays up "
            "behind the VIP, DNS and the ingress keep a replica on another control plane)"))
    moved = e.work.existing_links_moved
    if moved or e.drained or e.swaps or e.switches_swapped:
        return ("  outage: running jobs on the drained nodes are evicted; plan a maintenance "
                "window" + (" for the re-cabling" if moved else ""))
    if e.rebooted or e.by_operator:
        how = [h for h, hosts in (
            ("a node drained for its reboot has its jobs evicted (a training gang restarts "
             "from its last checkpoint)", e.rebooted),
            ("the operator takes a node only as its upgrade policy above says", e.by_operator))
            if hosts]
        return (f"  outage: one node at a time leaves service; {'; '.join(how)}; serving keeps "
                "its other replicas")
    if e.resubmitted or e.stopped:
        return "  outage: the jobs above restart or stop; other running work carries on"
    if swapped:
        return (f"  outage: none for running work: {', '.join(swapped)} is one of {e.members} "
                "control planes (etcd keeps its quorum, the API stays up behind the VIP, DNS "
                "and the ingress keep a replica on another control plane)")
    if e.boards:  # a subnet manager's host alone
        return ("  outage: none for running work: the fabric keeps a master subnet manager "
                "throughout")
    if e.health and not (e.work.plugged or e.racked or e.rotations):
        return ("  outage: none from this change; from then on a GPU node the health checks "
                "find unfit leaves service on its own, as above" if e.quarantining else
                "  outage: none from this change; from then on an unfit GPU node stays in "
                "service until a person takes it out")
    return "  outage: none expected" + (" (new links and hosts only)" if e.work.plugged
                                        or e.racked or not e.rotations else "")
