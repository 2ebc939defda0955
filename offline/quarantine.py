"""What enabling or changing the node quarantine does, read from the facts the kubeadm cluster
publishes (components/planning/quarantine_setup.py quarantine_facts): the change itself drains
nothing, but from the control planes' next pass a GPU node the health checks find unfit is
taken out of service without anyone running a command."""

from __future__ import annotations

from collections.abc import Iterable

from .conventions import names
from .diff import Change

MAX, DRAINS, TAINTS = ("facts.quarantineMaxNodes", "facts.quarantineDrains",
                       "facts.quarantineTaints")


def _listed(value: object) -> list[str]:
    return [c for c in str(value or "").split(",") if c]


def quarantine_lines(changes: Iterable[Change]) -> list[str]:
    """One impact line when the quarantine starts or its policy changes, else none."""
    cluster = next((c for c in changes if c.type == names().CLUSTER_TYPE), None)
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
