"""What starting, stopping or changing the node health checks does: the detector on the GPU
nodes (its DaemonSet, components/planning/health_detector.py) and the quarantine on the control
planes, read from the facts the kubeadm cluster publishes (components/planning/
quarantine_setup.py quarantine_facts). The change itself drains nothing, but from the control
planes' next pass a GPU node the health checks find unfit is taken out of service without
anyone running a command."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .conventions import cluster_change, names, published_facts
from .diff import Change

MAX, DRAINS, TAINTS = ("facts.quarantineMaxNodes", "facts.quarantineDrains",
                       "facts.quarantineTaints")


def _listed(value: object) -> list[str]:
    return [c for c in str(value or "").split(",") if c]


def quarantine_lines(changes: Iterable[Change]) -> list[str]:
    """One impact line when the quarantine starts or its policy changes, else none."""
    cluster = cluster_change(changes)
    if cluster is None or not any(p in cluster.values for p in (MAX, DRAINS, TAINTS)):
        return []
    old_max, new_max = cluster.values.get(MAX, (None, None))
    drains = _listed(cluster.values.get(DRAINS, (None, None))[1])
    taints = _listed(cluster.values.get(TAINTS, (None, None))[1])
    if old_max is None and new_max is not None:
        return [f"  node quarantine starts on the control planes: from its first pass a GPU "
                f"node with {', '.join(drains)} is tainted and drained (each Kubeflow gang on it "
                f"suspended whole, resumed elsewhere), one with {', '.join(taints)} only "
                f"tainted NoSchedule; at most {new_max} nodes at once, never a control plane "
                "or a subnet manager's host"]
    if new_max is None:
        return ["  node quarantine stops: no GPU node is taken out of service automatically "
                "any more (nodes it tainted stay tainted until released)"]
    parts = [f"at most {old_max} -> {new_max} nodes at once"] if old_max != new_max else []
    for path, what in ((DRAINS, "drained"), (TAINTS, "tainted")):
        old, new = (_listed(v) for v in cluster.values.get(path, (None, None)))
        if path in cluster.values:
            parts += [f"{what} now also for {', '.join(sorted(set(new) - set(old)))}"
                      ] if set(new) - set(old) else []
            parts += [f"no longer {what} for {', '.join(sorted(set(old) - set(new)))}"
                      ] if set(old) - set(new) else []
    return [f"  node quarantine changes: {'; '.join(parts)}"] if parts else []


def _detector(changes: Iterable[Change]) -> Change | None:
    """The detector's DaemonSet changing, if it does."""
    daemonsets = [c for c in changes if c.type == "kubernetes:apps/v1:DaemonSet"]
    if not daemonsets:
        return None
    # Imported only then: the program's own `components` package, as conventions.names().
    from components.planning import health_detector as d

    return next((c for c in daemonsets if c.name == f"daemonset-{d.NAMESPACE}-{d.NAME}"), None)


def detector_lines(changes: Iterable[Change]) -> list[str]:
    """One impact line when the detector starts, stops or restarts with new checks."""
    ds = _detector(changes)
    if ds is None:
        return []
    if ds.action == "create":
        return ["  node health detector starts on every GPU node (node-problem-detector, a pod "
                "each; nothing is drained or restarted): from its first checks it sets the "
                "conditions of docs/health.md on the Node objects"]
    if ds.action == "delete":
        return ["  node health detector stops on every GPU node: the conditions it set stay "
                "on the Node objects as they are, and none is set or cleared any more"]
    # Its pod template changed: new checks or thresholds, or a new SU's rails to mount.
    return ["  node health detector restarts on every GPU node, a tenth of them at a time (no "
            "drain; the conditions stay on the nodes meanwhile)"]


def quarantine_on(new_inputs: Mapping[str, Mapping[str, Any]] | None) -> bool:
    """Whether the control planes run the quarantine after the change."""
    return any(MAX.removeprefix("facts.") in f
               for f in published_facts(new_inputs, names().CLUSTER_TYPE))
