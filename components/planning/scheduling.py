"""The scheduler's node filters that decide whether a pod has a node at all (pure): taints and
tolerations, nodeSelector and required node affinity, with Kubernetes' own matching rules.
Resources are not weighed here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol


class Node(Protocol):
    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, str], ...]


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, str]) -> bool:
    """Kubernetes' rule: a toleration matches a taint when the effects match (or it names none)
    and the key matches (or it names none with operator Exists), and the values match for
    operator Equal (the default)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        op = t.get("operator", "Equal")
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t["key"] != taint["key"]:
            continue
        if op == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"node selector operator {op} is not handled")


def fits(pod_spec: Mapping[str, Any], node: Node) -> bool:
    """Whether the scheduler's TaintToleration, NodeSelector and required NodeAffinity filters
    let a pod with this spec onto the node (resources are not weighed here)."""
    tolerations = pod_spec.get("tolerations") or []
    if not all(tolerates(tolerations, t) for t in node.taints
               if t["effect"] in ("NoSchedule", "NoExecute")):
        return False
    if any(node.labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(all(_matches(e, node.labels) for e in term.get("matchExpressions")
                                or []) for term in terms)


def homes(pod_spec: Mapping[str, Any], nodes: Iterable[Node]) -> list[str]:
    """The planned nodes a pod with this spec may be scheduled on."""
    return [n.name for n in nodes if fits(pod_spec, n)]
