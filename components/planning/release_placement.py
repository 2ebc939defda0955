"""Where each Helm release's pods run (pure, no pulumi).

Every Kubernetes node of the cluster is tainted: the control-plane hosts by kubeadm
(`node-role.kubernetes.io/control-plane:NoSchedule`), the GPU nodes by the stack
(`nvidia.com/gpu=present:NoSchedule`). A chart's controller that tolerates neither has no node
at all. System components therefore go to the control-plane hosts, and node agents
(DaemonSets) tolerate every taint.

Each also gets a system priority (Kubernetes' built-in classes): controllers
`system-cluster-critical`, node agents `system-node-critical`, so a full node evicts or preempts
workload pods before the webhooks, the scheduler or a node's network agent.

For every component of every chart this table names the values keys that place its pods and
set their priority, and the chart's own defaults for them (read from each chart's values.yaml
and templates at the pinned version), so the stack sets only what the chart lacks, and the
cluster twin can stand a probe pod in for each component with exactly the placement and
priority the release would give it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from components.planning.labels import CONTROL_PLANE_LABEL as CONTROL_PLANE
from components.planning.labels import GPU_TAINT
from components.planning.scheduling import tolerates

SYSTEM_SELECTOR = {CONTROL_PLANE: ""}
SYSTEM_TOLERATIONS = [{"key": CONTROL_PLANE, "operator": "Exists", "effect": "NoSchedule"}]
EVERYWHERE = [{"operator": "Exists"}]  # a node agent: every taint, every effect
LINUX = {"kubernetes.io/os": "linux"}
_CP_EQUAL = {"key": CONTROL_PLANE, "operator": "Equal", "value": "", "effect": "NoSchedule"}
CLUSTER_CRITICAL = "system-cluster-critical"  # built into the API server, value 2000000000
NODE_CRITICAL = "system-node-critical"  # value 2000001000


@dataclass(frozen=True)
class Component:
    """One workload of a chart: where its placement lives in the values, and the defaults."""

    name: str
    path: tuple[str, ...]  # values path of the block holding nodeSelector / tolerations
    runs_on: Literal["system", "every-node"]
    default_selector: Mapping[str, str] = field(default_factory=dict)
    default_tolerations: tuple[Mapping[str, str], ...] = ()
    selector_key: str = "nodeSelector"
    tolerations_key: str = "tolerations"
    # values path of its priorityClassName from the values root; None: the chart has no key
    priority: tuple[str, ...] | None = None
    default_priority: str = ""  # the chart's default (or what its template hard-codes)

    @property
    def wanted_priority(self) -> str:
        return NODE_CRITICAL if self.runs_on == "every-node" else CLUSTER_CRITICAL


C = Component
# release -> its components (charts at the versions Pulumi.prod.yaml pins).
COMPONENTS: dict[str, tuple[Component, ...]] = {
    # tigera-operator v3.31: the operator tolerates every taint; calico-node is its own operand.
    "calico": (C("tigera-operator", (), "system", LINUX,
                 ({"effect": "NoExecute", "operator": "Exists"},
                  {"effect": "NoSchedule", "operator": "Exists"}),
                 priority=("priorityClassName",)),),
    "prometheus": (
        C("operator", ("prometheusOperator",), "system", LINUX,
          priority=("prometheusOperator", "priorityClassName")),
        C("operator-webhook-patch", ("prometheusOperator", "admissionWebhooks", "patch"),
          "system", LINUX,
          priority=("prometheusOperator", "admissionWebhooks", "patch", "priorityClassName")),
        C("prometheus", ("prometheus", "prometheusSpec"), "system",
          priority=("prometheus", "prometheusSpec", "priorityClassName")),
        C("alertmanager", ("alertmanager", "alertmanagerSpec"), "system",
          priority=("alertmanager", "alertmanagerSpec", "priorityClassName")),
        C("grafana", ("grafana",), "system", priority=("grafana", "priorityClassName")),
        C("kube-state-metrics", ("kube-state-metrics",), "system",
          priority=("kube-state-metrics", "priorityClassName")),
        C("node-exporter", ("prometheus-node-exporter",), "every-node", LINUX,
          ({"effect": "NoSchedule", "operator": "Exists"},),
          priority=("prometheus-node-exporter", "priorityClassName")),
    ),
    "prometheus-adapter": (C("adapter", (), "system", priority=("priorityClassName",)),),
    # cert-manager has one priority for all of its pods.
    "cert-manager": tuple(
        C(name, path, "system", LINUX, priority=("global", "priorityClassName"))
        for name, path in (("controller", ()), ("webhook", ("webhook",)),
                           ("cainjector", ("cainjector",)),
                           ("startupapicheck", ("startupapicheck",)))),
    "metallb": (
        C("controller", ("controller",), "system",
          priority=("controller", "priorityClassName")),
        # L2 announcements come from the speakers: one on every node that may answer ARP.
        C("speaker", ("speaker",), "every-node", priority=("speaker", "priorityClassName")),
    ),
    "ingress-nginx": (
        C("controller", ("controller",), "system", LINUX,
          priority=("controller", "priorityClassName")),
        C("webhook-patch", ("controller", "admissionWebhooks", "patch"), "system", LINUX,
          priority=("controller", "admissionWebhooks", "patch", "priorityClassName")),
    ),
    # Network Operator 26.4.1 / GPU Operator v26.3: the operators tolerate the control plane.
    # The Network Operator chart has no priority key for its operator at 26.4.1 (it arrives in
    # 26.7). Its bundled Node Feature Discovery chart has one for the worker (a node agent,
    # beside workloads on every GPU node) and one for all of its pods, which the worker's
    # template writes too (its pod spec would name two classes): the master and the garbage
    # collector, on the control-plane hosts only, keep priority 0.
    "network-operator": (
        C("operator", ("operator",), "system", {}, (
            {"key": "node-role.kubernetes.io/master", "operator": "Equal", "value": "",
             "effect": "NoSchedule"}, _CP_EQUAL)),
        C("nfd-master", ("node-feature-discovery", "master"), "system"),
        C("nfd-gc", ("node-feature-discovery", "gc"), "system"),
        C("nfd-worker", ("node-feature-discovery", "worker"), "every-node", {}, (
            {"key": "node-role.kubernetes.io/master", "operator": "Exists",
             "effect": "NoSchedule"},
            {"key": CONTROL_PLANE, "operator": "Exists", "effect": "NoSchedule"},
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
          priority=("node-feature-discovery", "worker", "priorityClassName")),
    ),
    # (its own Node Feature Discovery is off: the Network Operator's serves both)
    "gpu-operator": (C("operator", ("operator",), "system", LINUX, (_CP_EQUAL,),
                       priority=("operator", "priorityClassName"),
                       default_priority=NODE_CRITICAL),),
    # Volcano 1.15.1 names its placement keys differently: one default for every component.
    # Its templates hard-code system-cluster-critical (no values key).
    "volcano": (C("scheduler-controllers-admission", ("custom",), "system",
                  selector_key="default_ns", tolerations_key="default_tolerations",
                  default_priority=CLUSTER_CRITICAL),),
}


def _dig(values: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any]:
    node: Any = values
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def _needs(c: Component) -> dict[str, Any]:
    """What the stack sets for a component: only what its defaults lack."""
    if c.runs_on == "every-node":
        wanted = [GPU_TAINT, {"key": CONTROL_PLANE, "value": "", "effect": "NoSchedule"}]
        if all(tolerates(c.default_tolerations, t) for t in wanted):
            return {}
        return {c.tolerations_key: EVERYWHERE}
    return {c.selector_key: SYSTEM_SELECTOR,
            c.tolerations_key: [*c.default_tolerations, *SYSTEM_TOLERATIONS]
            if not any(t.get("key") == CONTROL_PLANE for t in c.default_tolerations)
            else list(c.default_tolerations)}


def _merge(a: dict[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(
            out.get(k), dict) else v
    return out


def _nested(path: tuple[str, ...], block: Any) -> dict[str, Any]:
    for key in reversed(path):
        block = {key: block}
    return block


def placement_values(release: str) -> dict[str, Any]:
    """The values that give every component of `release` a node and a system priority."""
    out: dict[str, Any] = {}
    for c in COMPONENTS.get(release, ()):
        out = _merge(out, _nested(c.path, _needs(c)))
        if c.priority and not c.default_priority:
            out = _merge(out, _nested(c.priority, c.wanted_priority))
    return out


def with_placement(release: str, values: Mapping[str, Any]) -> dict[str, Any]:
    return _merge(dict(values), placement_values(release))


def probes(release: str, values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """component -> the placement part of its pod spec under `values` (defaults where the
    values set nothing): node selector, tolerations and priority class, for a probe pod
    standing in for it."""
    out = {}
    for c in COMPONENTS.get(release, ()):
        block = _dig(values, c.path)
        selector = block.get(c.selector_key, c.default_selector) or {}
        tolerations = block.get(c.tolerations_key, list(c.default_tolerations)) or []
        spec: dict[str, Any] = {"nodeSelector": dict(selector), "tolerations": list(tolerations)}
        priority = (_dig(values, c.priority[:-1]).get(c.priority[-1]) if c.priority else None
                    ) or c.default_priority
        if priority:
            spec["priorityClassName"] = priority
        out[c.name] = spec
    return out
