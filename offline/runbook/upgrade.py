"""The Kubernetes upgrade a diff implies (a new release in the kubeadm cluster's published
facts): kubeadm's version skew policy, the batches of GPU nodes per SU (the nodes with an
upgrade drain, their placement labels' SU and the batch size the cluster publishes), how long
a drain waits for a gang job (published too), and the steps in kubeadm's order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..conventions import cluster_change, names, published_facts, resource_name, subject
from ..diff import Change
from .hosts import hosts_with

# What the kubeadm cluster (names().CLUSTER_TYPE) publishes where the stack inits the control
# plane (components/planning/facts.py kubernetes_facts).
VERSION, PACKAGES = "facts.kubernetesVersion", "facts.kubernetesPackages"


def kubernetes_upgrade(changes: Iterable[Change]) -> tuple[str, str, str] | None:
    """(old version, new version, new package version) when the Kubernetes release the
    cluster publishes changes, else None."""
    cluster = cluster_change(changes)
    if cluster is None:
        return None
    old, new = cluster.values.get(VERSION, (None, None))
    if not (old and new and old != new):
        return None
    pkg = cluster.values.get(PACKAGES, (None, None))[1]
    return str(old), str(new), str(pkg or f"{new}-*")


def upgrade_refused(old: str, new: str) -> bool:
    """kubeadm's version skew policy: one minor at a time, never back (the program refuses the
    same in components/planning/refusals.py; tests/test_refusals.py holds them equal)."""
    o, n = [int(x) for x in old.split(".")], [int(x) for x in new.split(".")]
    return n < o or n[0] != o[0] or n[1] - o[1] > 1


def other_than_version(change: Change, upgrade: tuple[str, str, str],
                       path: str = "stdin") -> bool:
    """Whether `change` changes more in its script (`path`) than the line kubeadm's
    configuration names the release in, which the upgrade steps carry."""
    release = {f"-kubernetesVersion: v{upgrade[0]}", f"+kubernetesVersion: v{upgrade[1]}"}
    return any(line[:1] + line[1:].strip() not in release
               for line in change.text_diffs.get(path, []))


def _published(new_inputs: Mapping[str, Mapping[str, Any]] | None, key: str) -> str | None:
    """One of the kubeadm cluster's published facts, from its new inputs."""
    found = [str(f[key]) for f in published_facts(new_inputs, names().CLUSTER_TYPE) if key in f]
    return found[0] if found else None


def upgrade_lanes(new_inputs: Mapping[str, Mapping[str, Any]] | None
                  ) -> dict[str, list[list[str]]]:
    """The GPU-node batches of the upgrade, per SU (a lane: its batches in order, the lanes
    side by side): the nodes with an upgrade drain, grouped by their placement labels' SU and
    cut into batches of the size the cluster publishes, as the stack cuts them
    (components/planning/upgrade.py batches)."""
    # Imported here: the program's own `components` package is the first this process imports.
    from components.planning.labels import SU_LABEL
    from components.planning.upgrade import batches

    inputs = new_inputs or {}
    su_of = {str(meta.get("name")): str((meta.get("labels") or {}).get(SU_LABEL, ""))
             for urn, i in inputs.items() if subject(resource_name(urn), names().PLACEMENT)
             for meta in [i.get("metadata") or {}]}
    drained = {h: su_of.get(h, "") for urn in inputs
               if (h := subject(resource_name(urn), names().UPGRADE_DRAIN))}
    size = int(_published(new_inputs, "upgradeBatch") or 1)
    lanes = {su: [list(b) for b in lane] for su, lane in batches(drained, size).items()}
    return dict(sorted(lanes.items(), key=lambda kv: _su_order(kv[0])))


def _su_order(su: str) -> tuple[int, str]:
    digits = su.removeprefix("su")
    return (int(digits), su) if digits.isdigit() else (-1, su)


def upgraded_control_planes(changes: Iterable[Change]) -> list[str]:
    """Control-plane hosts whose upgrade command re-runs (GPU nodes have a drain beside it)."""
    changes = list(changes)
    nodes = set(hosts_with(changes, names().UPGRADE_DRAIN, "update"))
    return sorted(h for h in hosts_with(changes, names().KUBERNETES_UPGRADE, "update")
                  if h not in nodes)


def batch_words(lanes: Mapping[str, list[list[str]]]) -> str:
    size = max((len(b) for lane in lanes.values() for b in lane), default=1)
    words = "one at a time" if size == 1 else f"{size} at a time"
    return words + (f" in each SU, the {len(lanes)} SUs side by side" if len(lanes) > 1 else "")


def _lane_order(lanes: Mapping[str, list[list[str]]]) -> str:
    """`a, then b, …` for one lane; `su1: …; su2: …` for several (two shown, the rest counted)."""
    def order(lane: list[list[str]]) -> str:
        return ", then ".join(" + ".join(b) for b in lane[:4]) + (
            f", … ({len(lane)} batches)" if len(lane) > 4 else "")
    if len(lanes) == 1:
        return order(next(iter(lanes.values())))
    shown = list(lanes.items())[:2]
    return "; ".join(f"{su}: {order(lane)}" for su, lane in shown) + (
        f"; … ({len(lanes)} SUs)" if len(lanes) > len(shown) else "")


def _gang_wait(new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    """How long a drain waits for a gang job, as the cluster publishes it."""
    minutes = _published(new_inputs, "gangWaitMinutes")
    return f"{minutes} min (kubernetes.gangWaitMinutes)" if minutes else \
        "kubernetes.gangWaitMinutes"


def upgrade_steps(old: str, new: str, pkg: str,
                  new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """What `pulumi up` runs, in kubeadm's order (components/planning/upgrade.py): the first
    control plane (`upgrade apply`), the others (`upgrade node`), then the GPU nodes in
    batches, each drained; kubeadm before kubelet and kubectl; one minor at a time."""
    o = [int(x) for x in old.split(".")]
    if upgrade_refused(old, new):
        return [f"REFUSED Kubernetes {old} -> {new}: kubeadm upgrades one minor version at a time "
                "and never downgrades (version skew policy); the upgrade commands would stop on "
                "the control plane. Do not apply this change: set kubernetes.version to a "
                f"1.{o[1] + 1} release first, apply, then the next"]
    v = names()
    resources = {resource_name(urn) for urn in new_inputs or {}}
    upgraded = sorted(h for x in resources if (h := subject(x, v.KUBERNETES_UPGRADE)))
    first = next((h for x in sorted(resources) if (h := subject(x, v.KUBEADM_INIT))),
                 "the first control plane")
    others = sorted(h for h in upgraded if h != first
                    and v.name(v.UPGRADE_DRAIN, h) not in resources
                    and v.name(v.KUBEADM_JOIN, h) in resources)
    lanes = upgrade_lanes(new_inputs)
    steps = [
        f"Kubernetes upgrade {old} -> {new} (packages {pkg}): `pulumi up` runs kubeadm's "
        "upgrade, in this order; every step is a no-op where a host already runs the target. "
        "Before the window, let long gang jobs reach a checkpoint or suspend them (a Kubeflow "
        "job: `kubectl patch <pytorchjob|mpijob> <job> --type=merge -p "
        "'{\"spec\":{\"runPolicy\":{\"suspend\":true}}}'`), or raise "
        "kubernetes.upgradeBatch to cover their nodes, so no batch waits on them",
        f"kubeadm upgrade apply -y v{new} on {first} (its kubeadm package first, then "
        f"`kubeadm upgrade plan`); {first} is then drained for its kubelet and kubectl and "
        "uncordoned",
    ]
    if others:
        steps.append(f"kubeadm upgrade node on each further control plane, one at a time "
                     f"({', '.join(others)}), each then drained for its kubelet and kubectl")
    if lanes:
        steps.append(
            f"the GPU nodes {batch_words(lanes)} (kubernetes.upgradeBatch): "
            f"{_lane_order(lanes)}. Each "
            "is drained from the control plane (PodDisruptionBudgets hold an eviction back; "
            "a running gang job on the batch and other nodes is waited for, up to "
            f"{_gang_wait(new_inputs)}, never split: then `pulumi up` fails naming it), gets "
            f"kubeadm upgrade node and its kubelet and kubectl, and is uncordoned once its "
            f"kubelet reports v{new}")
    return steps
