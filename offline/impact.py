"""The first lines of a preview: what a change does to hardware and running work.

Read from the diff alone, like the runbook (offline/runbook.py, whose conventions it shares):
existing links that move, cables to plug and to pull (by media and reach, as the port
descriptions carry them), switches to rack or retire, nodes drained or rebooted, and whether
running work sees an outage. The full bill of materials of the new plan is
build/<stack>/fabric/bom.csv.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from .diff import Diff
from .operators import operator_rollouts
from .runbook import (
    CableMove,
    batch_words,
    cable_moves,
    cabling,
    drained_hosts,
    joined_hosts,
    kubernetes_upgrade,
    rebooted_hosts,
    secret_rotations,
    switch_changes,
    upgrade_lanes,
    upgrade_refused,
    upgraded_control_planes,
)


def _span(hosts: list[str]) -> str:
    return ", ".join(hosts) if len(hosts) <= 6 else f"{hosts[0]} … {hosts[-1]}"


def _cables(moves: Iterable[CableMove], side: str) -> str:
    kinds = Counter((getattr(mv, f"{side}_cable") or "cable") for mv in moves)
    return ", ".join(f"{n} x {kind}" for kind, n in sorted(kinds.items()))


# Kubeflow jobs the engine deletes and submits again on a changed spec (components/workloads.py).
JOB_TYPES = ("kubernetes:kubeflow.org/v1:PyTorchJob", "kubernetes:kubeflow.org/v1:MPIJob")


def _acceptance_test(urn: str, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> bool:
    labels = ((new_inputs or {}).get(urn) or {}).get("metadata", {}).get("labels") or {}
    return labels.get("app.kubernetes.io/component") == "nccl-test"


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
    return out


def impact(diff: Diff, new_inputs: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """A short verdict, or one line saying nothing physical changes."""
    changes = diff.changes
    work = cabling(cable_moves(changes, new_inputs))
    switches = switch_changes(changes)
    racked = sorted(sw for sw, a in switches.items() if a == "create")
    retired = sorted(sw for sw, a in switches.items() if a == "delete")
    drained = drained_hosts(changes, new_inputs)
    rebooted = rebooted_hosts(changes)
    rollouts = operator_rollouts(changes, new_inputs)
    by_operator = sorted({h for r in rollouts for h in r.drained})
    upgrade = kubernetes_upgrade(changes)
    # An upgrade `pulumi up` runs (not one the skew policy refuses), batch by batch.
    upgrading = upgrade is not None and not upgrade_refused(*upgrade[:2])
    lanes = upgrade_lanes(new_inputs) if upgrading else {}
    rotations = secret_rotations(changes, new_inputs)
    jobs = [c for c in changes if c.type in JOB_TYPES]
    tests = {c.name for c in jobs if _acceptance_test(c.urn, new_inputs)}
    resubmitted = sorted(c.name for c in jobs if c.action == "replace" and c.name not in tests)
    retested = sorted(c.name for c in jobs if c.action == "replace" and c.name in tests)
    stopped = sorted(c.name for c in jobs if c.action == "delete")
    if not (work.moved or work.recabled or work.pulled or work.plugged or racked or retired
            or drained or rebooted or upgrade or rotations or resubmitted or retested or stopped
            or rollouts):
        return ["Impact: no cable, switch or node is touched; no running work is drained."]
    lines = ["Impact on hardware and running work:"]
    for r in rotations:
        where = f" on {len(r.hosts)} hosts" if r.hosts else ""
        lines.append(f"  {r.secret} rotation {r.old} -> {r.new}: " + (
            "REFUSED, no host authorises the new key yet (authorise it first)"
            if r.unauthorised else
            f"{len(r.commands)} commands re-run{where} with the new secret"))
    if upgrade:
        old_version, new_version, _ = upgrade
        lines.append(f"  Kubernetes {old_version} -> {new_version}: " + (
            "`pulumi up` runs kubeadm's upgrade: the control plane, then the GPU nodes "
            f"{batch_words(lanes)}, each drained" if upgrading
            else "REFUSED, it skips a minor or goes back (kubeadm's version skew policy)"))
    lines += [f"  {r.line()}" for r in rollouts]
    moved = work.existing_links_moved
    lines.append(
        f"  existing links moved: {moved}"
        + (" (the fabric is re-cabled: every host on them is drained)" if moved else ""))
    new, pulled = work.plugged, work.pulled
    lines.append(f"  cables to plug: {len(new)}" + (f" ({_cables(new, 'new')})" if new else "")
                 + f"; to pull: {len(pulled)}"
                 + (f" ({_cables(pulled, 'old')})" if pulled else ""))
    if racked or retired:
        lines.append(f"  switches: rack {len(racked)}" + (f" ({_span(racked)})" if racked else "")
                     + f", retire {len(retired)}" + (f" ({_span(retired)})" if retired else ""))
    if upgrading:
        # Every member, in turn, for its kubelet (the GPU nodes by batch, after the control
        # plane).
        drained = sorted(set(drained) | {h for lane in lanes.values() for b in lane for h in b}
                         | set(upgraded_control_planes(changes)))
    # Each planned reboot drains its node first (the reboot chain's drain); an operator drains
    # the GPU nodes it updates.
    why = [w for w, hosts in (("for the upgrade", upgrading and drained),
                              ("before its reboot", rebooted),
                              ("by the operator updating its driver", by_operator)) if hosts]
    drained = sorted(set(drained) | set(rebooted) | set(by_operator))
    lines.append(f"  nodes drained: {len(drained)}" + (f" ({_span(drained)})" if drained else "")
                 + (f", each in turn {' or '.join(why)}" if why else ""))
    joining = joined_hosts(changes)
    if joining:
        lines.append(f"  nodes added: {len(joining)} ({_span(joining)})")
    if resubmitted:
        lines.append(f"  jobs resubmitted: {len(resubmitted)} ({_span(resubmitted)}): their pods "
                     "restart; training resumes from its last checkpoint")
    if retested:
        lines.append(f"  acceptance test runs again: {_span(retested)} (queued until its GPU "
                     "nodes are free)")
    if stopped:
        lines.append(f"  jobs stopped: {len(stopped)} ({_span(stopped)})")
    if rebooted:
        lines.append(f"  planned reboots: {len(rebooted)} ({_span(rebooted)}), one cluster "
                     "member at a time")
    if upgrading:
        lines.append("  outage: each node's jobs are evicted in turn; the control plane's API "
                     "blips while it upgrades")
    elif moved or (drained and not (rebooted or by_operator)):
        lines.append("  outage: running jobs on the drained nodes are evicted; plan a "
                     "maintenance window" + (" for the re-cabling" if moved else ""))
    elif drained:
        how = [h for h, hosts in (
            ("a node drained for its reboot has its jobs evicted (a training gang restarts "
             "from its last checkpoint)", rebooted),
            ("the operator takes a node only as its upgrade policy above says", by_operator))
            if hosts]
        lines.append(f"  outage: one node at a time leaves service; {'; '.join(how)}; serving "
                     "keeps its other replicas")
    elif resubmitted or stopped:
        lines.append("  outage: the jobs above restart or stop; other running work carries on")
    else:
        lines.append("  outage: none expected" + (" (new links and hosts only)"
                                                  if new or racked or not rotations else ""))
    return lines
