"""The runbook's text: what a diff asks of people and of `pulumi up`, read once (`_Work`),
then numbered steps in the order a technician takes them and the checks afterwards."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..acceptance import recabled_check, untested
from ..conventions import names, subject
from ..conventions import span as _span
from ..diff import Change, Diff
from ..operators import operator_rollouts
from ..replacements import (
    board_steps,
    hca_steps,
    management_macs,
    replaced_boards,
    replaced_hcas,
    replaced_switches,
    sm_roles,
    switch_swap_steps,
)
from ..rotations import Rotation, rotation_steps, secret_rotations
from .cabling import CableMove, cable_moves, cabling_steps, sm_cable_steps, switch_changes
from .hosts import (
    host_steps,
    hosts_with,
    login_only,
    membership_steps,
    recabled_hosts,
    rehosted,
    retested_hosts,
    sm_step,
)
from .settings import control_plane_settings, endpoint_move, endpoint_refusal, kubelet_roll
from .upgrade import kubernetes_upgrade, other_than_version, upgrade_steps

# Operators whose upgrade touches drivers on every GPU node, in the safe order: the network
# stack (DOCA/OFED) first, the GPU driver (which builds GPUDirect on it) second.
OPERATOR_ORDER = ("network-operator", "gpu-operator")


@dataclass
class _Work:
    """What a diff asks of people and of `pulumi up`, read once from its changes."""

    changes: list[Change]
    leaving: list[str]
    joining: list[str]
    decommissioning: list[str]
    moves: list[CableMove]
    sms: list[str]
    switches: dict[str, str]
    prepared: list[str]
    operators: list[str]
    kubelet: Change | None
    control_plane: list[str]
    upgrade: tuple[str, str, str] | None
    rejoined: list[str]
    rehosted: list[tuple[str, str, str]]
    rebooting: bool
    rotations: list[Rotation]

    @property
    def fabric_touched(self) -> bool:
        """Cables, subnet managers, or a switch added or retired."""
        return bool(self.moves or self.sms or any(a != "update" for a in self.switches.values()))

    def __bool__(self) -> bool:
        return bool(self.leaving or self.joining or self.operators or self.prepared
                    or self.kubelet or self.rebooting or self.upgrade or self.rotations
                    or self.decommissioning or self.control_plane or self.rejoined
                    or self.rehosted or self.fabric_touched)


def _work(diff: Diff, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> _Work:
    # What a rotation or a new board re-runs unchanged is read by `secret_rotations` and
    # `replaced_boards`; every other step is about what changes on a host, a switch or the
    # cluster.
    changes = [c for c in diff.changes if not login_only(c)]
    v = names()
    kubelet = next((c for c in changes if c.name == v.KUBELET_CONFIG and c.layer == "bootstrap"
                    and c.action in ("update", "replace")), None)
    control_plane = control_plane_settings(changes, kubelet)
    upgrade = kubernetes_upgrade(changes)
    if upgrade is not None:
        # The upgrade steps carry the version; only other settings need their own steps.
        if kubelet is not None and not other_than_version(kubelet, upgrade):
            kubelet = None
        control_plane = [h for h in control_plane if other_than_version(
            next(c for c in changes if c.name == v.name(v.KUBEADM_INIT, h)), upgrade)]
    return _Work(
        changes=changes,
        leaving=hosts_with(changes, v.MEMBER, "delete"),
        joining=hosts_with(changes, v.KUBEADM_JOIN, "create"),
        decommissioning=hosts_with(changes, v.DECOMMISSION, "create"),
        moves=cable_moves(changes, new_inputs),
        sms=sorted(h for c in changes if c.action in ("update", "create")
                   if (h := subject(c.name, v.OPENSM)) is not None),
        switches=switch_changes(changes),
        prepared=hosts_with(changes, v.PREPARE, "update"),
        operators=[c.name for name in OPERATOR_ORDER for c in changes
                   if c.type == "kubernetes:helm.sh/v3:Release" and c.name == name
                   and c.action in ("update", "replace")],
        kubelet=kubelet, control_plane=control_plane, upgrade=upgrade,
        # A joined node's guarded join does nothing when re-run: its changed settings stay
        # unapplied. (A join script is the command itself; its credentials are its stdin.)
        # (A control plane's join carries the cluster's version: the upgrade steps apply it.)
        rejoined=sorted(h for c in changes if c.action == "update" and c.text_diffs.get("create")
                        and (upgrade is None or other_than_version(c, upgrade, "create"))
                        if (h := subject(c.name, v.KUBEADM_JOIN)) is not None),
        rehosted=rehosted(changes),
        rebooting=any(subject(c.name, v.REBOOT) for c in changes
                      if c.action in ("create", "replace")),
        rotations=secret_rotations(diff.changes, new_inputs),
    )


def runbook(diff: Diff, stack: str = "prod",
            new_inputs: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """Numbered steps, or [] when the diff needs no physical or node-by-node work."""
    w = _work(diff, new_inputs)
    if not w:
        return []
    # Nodes whose cables move but who stay in the cluster are drained by hand first; a new
    # board's host gets its own step.
    boards = replaced_boards(w.changes)
    recabled = recabled_hosts(w.changes, new_inputs)
    retested = retested_hosts(w.changes, new_inputs)
    steps: list[str] = rotation_steps(w.rotations)
    steps += membership_steps(w.changes, w.decommissioning, w.leaving, recabled, retested)
    steps += board_steps(boards, new_inputs, stack)
    hca_before, hca_after = hca_steps(replaced_hcas(w.changes, new_inputs), new_inputs)
    steps += hca_before
    steps += switch_swap_steps(replaced_switches(w.changes, new_inputs), stack, retested)
    steps += host_steps(w.changes, w.prepared, w.joining, w.leaving, boards)
    steps += _fabric_steps(w, new_inputs)
    steps += hca_after
    macs = management_macs(w.joining, new_inputs)
    steps += [f"{host} joins: " + (
        f"before it powers on, load build/{stack}/network/dhcp-hosts into the management "
        f"network's DHCP/PXE server (its management MAC {mac} gets its address); then "
        if (mac := macs.get(host)) else "") + "`pulumi up` runs its host "
        "preparation, its own join token, guarded kubeadm join, placement labels"
        for host in w.joining]
    steps += _software_steps(w, new_inputs)
    numbered = [f"  {i}. {s}" for i, s in enumerate(steps, 1)]
    checks = _checks(w, recabled, stack,
                     recabled_check(retested, new_inputs) if retested else None)
    return (["Hardware-change runbook (in this order):"] + numbered
            + (["  afterwards:"] + [f"    - {c}" for c in checks] if checks else []))


def _fabric_steps(w: _Work, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Cables, switch settings and the subnet managers."""
    steps = sm_cable_steps(w.moves, new_inputs)
    steps += cabling_steps(w.moves, w.switches, sm_roles(new_inputs))
    if w.switches:
        steps.append("switch port descriptions and settings are applied by `pulumi up`: "
                     + ", ".join(sorted(w.switches)))
    if w.sms:
        steps.append(sm_step(w.sms, new_inputs))
    return steps


def _software_steps(w: _Work, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Operators, Kubernetes, the kubelets and settings kubeadm applies only once."""
    steps = []
    v = names()
    rollouts = {r.release: r for r in operator_rollouts(w.changes, new_inputs)}
    for name in w.operators:
        policy = ("NicClusterPolicy" if name == "network-operator" else "ClusterPolicy")
        order = (" first" if name == "network-operator" else " after the network operator"
                 ) if len(w.operators) > 1 else ""
        steps.append(f"upgrade {name}{order}: the chart's pre-upgrade hook applies its new "
                     f"CRDs; {rollouts[name].line()}; `pulumi up` waits "
                     f"({v.name(v.ROLLOUT, name)}, up to 2 h) until the {policy} reports ready "
                     "before it goes on")
    if w.upgrade is not None:
        steps.extend(upgrade_steps(*w.upgrade, new_inputs))
    if w.kubelet is not None:
        steps.extend(kubelet_roll(w.changes, w.joining, new_inputs))
    if (moved := endpoint_move(w.changes)) is not None:
        steps.append(endpoint_refusal(*moved))
    for host in w.control_plane:
        steps.append(
            f"control-plane settings change in {v.name(v.KUBEADM_INIT, host)}: kubeadm applies "
            "them only at init, and the guarded re-run leaves a running control plane as it is. "
            "Apply them by kubeadm's reconfiguration procedure (the kubeadm-config ConfigMap, "
            "then each control-plane node's static Pod manifests, one node at a time). A "
            "Kubernetes version change is a `kubeadm upgrade`; the pod and service subnets and "
            "the cluster domain cannot change on a running cluster")
    if w.rejoined:
        which = (f"{len(w.rejoined)} joined nodes ({_span(w.rejoined)})" if len(w.rejoined) > 1
                 else w.rejoined[0])
        steps.append(
            f"join settings change for {which}: kubeadm applies them only when a node joins, "
            "and the guarded re-run leaves a joined node as it is. Apply them by hand (e.g. "
            "`kubectl taint` for taints, the static Pod manifest for kube-vip) or drain, remove "
            "and re-add the node")
    for name, old, new in w.rehosted:
        steps.append(
            f"{name} moves from {old} to {new}: `pulumi up` runs its create command on {new} "
            f"and nothing on {old} (pulumi-command updates a command whose host changed; it "
            f"runs no delete on the old host). Undo on {old} by hand what it set up there")
    return steps


def _checks(w: _Work, recabled: list[str], stack: str, retest: str | None) -> list[str]:
    """What to check once `pulumi up` is done; `retest`: the gate's re-run for the re-cabled
    nodes, once they are uncordoned."""
    checks = []
    if w.joining or w.leaving or w.fabric_touched:
        checks.append(f"ibnetdiscover > fabric.dump && make verify-fabric STACK={stack} "
                      "DISCOVERED=fabric.dump   (must report no difference)")
    # The nodes the acceptance test runs on are back in service before it.
    if recabled or w.leaving:
        checks.append("uncordon the drained nodes: " + ", ".join(recabled) if recabled
                      else "confirm the removed nodes are gone: kubectl get nodes")
    if retest:
        checks.append(retest)
    if replace(w, rotations=[]):  # a node, the fabric or the software stack changed
        checks.append("the NCCL acceptance gate passed (`pulumi up` fails otherwise; its log "
                      "has `acceptance test: …` and PASS), and `kubectl get nodes -l "
                      f"{untested()}` lists no node")
    return checks
