"""Shared by the rule modules: walking pod templates, quantities, NCCL env, policy
config, and the switch CLI / subnet-manager texts that fabric commands carry.

Everything here reads props the way the engine passes them: read-only mappings and sequences
(the analyzer's proxies), camelCase keys, every number a float.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from .registry import get, is_list, is_map, policy_config
from .resource_names import COMPUTE_FABRIC_TYPE, SITE_FACTS_TYPE

WORKLOAD_TYPES = (
    "kubernetes:core/v1:Pod",
    "kubernetes:apps/v1:Deployment",
    "kubernetes:apps/v1:StatefulSet",
    "kubernetes:apps/v1:DaemonSet",
    "kubernetes:batch/v1:Job",
    "kubernetes:kubeflow.org/v1:PyTorchJob",
    "kubernetes:kubeflow.org/v1:MPIJob",
)
TRAINING_JOB_TYPES = ("kubernetes:kubeflow.org/v1:PyTorchJob", "kubernetes:kubeflow.org/v1:MPIJob")
REPLICA_FIELDS = ("pytorchReplicaSpecs", "mpiReplicaSpecs")
GPU = "nvidia.com/gpu"
# `kubeadm init` itself, not one of its phases (e.g. the kubelet settings upload).
KUBEADM_INIT = re.compile(r"^\s*kubeadm init\s+--", re.M)
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
RDMA_RESOURCE_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"
COMMAND_TYPES = ("command:remote:Command",)


def config(args: Any, key: str, default: Any) -> Any:
    """A policy-config property; `args.config` is None when the pack has no config for the
    rule. Numbers in policy config arrive as floats."""
    conf = policy_config(args)
    if isinstance(conf, Mapping) and key in conf and conf[key] is not None:
        value = conf[key]
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    return default


def pod_templates(type_: str, props: Any) -> Iterator[tuple[str, Any, Any]]:
    """(path, template metadata, pod spec) for every pod template a workload object carries."""
    if type_ == "kubernetes:core/v1:Pod":
        spec = get(props, "spec")
        if is_map(spec):
            yield "spec", get(props, "metadata"), spec
        return
    if type_.startswith("kubernetes:kubeflow.org/"):
        for field in REPLICA_FIELDS:
            replicas = get(props, "spec", field)
            if is_map(replicas):
                for role in sorted(replicas):
                    spec = get(replicas, role, "template", "spec")
                    if is_map(spec):
                        yield (f"spec.{field}.{role}.template.spec",
                               get(replicas, role, "template", "metadata"), spec)
        return
    spec = get(props, "spec", "template", "spec")
    if is_map(spec):
        yield "spec.template.spec", get(props, "spec", "template", "metadata"), spec


def pod_specs(type_: str, props: Any) -> Iterator[tuple[str, Any]]:
    for path, _meta, spec in pod_templates(type_, props):
        yield path, spec


def pod_containers(path: str, spec: Any, init: bool = True) -> Iterator[tuple[str, Any]]:
    for field in (("initContainers", "containers") if init else ("containers",)):
        items = get(spec, field)
        if is_list(items):
            for i, c in enumerate(items):
                if is_map(c):
                    yield f"{path}.{field}[{i}]", c


def containers(type_: str, props: Any) -> Iterator[tuple[str, Any]]:
    for path, spec in pod_specs(type_, props):
        yield from pod_containers(path, spec)


def qty(value: Any) -> Any:
    """Numbers arrive as floats: 8, 8.0 and "8" are the same count."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value


_BIN = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DEC = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "": 1}
_QTY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


def quantity_bytes(value: Any) -> float | None:
    """A Kubernetes memory quantity in bytes (None when it is not one)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        return None
    m = _QTY.match(value.strip())
    if not m:
        return None
    unit = m.group(2) or ""
    return float(m.group(1)) * (_BIN.get(unit) or _DEC[unit])


def container_gpus(c: Any) -> int:
    lim = qty(get(c, "resources", "limits", GPU))
    req = qty(get(c, "resources", "requests", GPU))
    val = lim if lim is not None else req
    return val if isinstance(val, int) else 0


def pod_gpus(spec: Any) -> int:
    return sum(container_gpus(c) for _, c in pod_containers("", spec, init=False))


def rdma_resources(c: Any) -> list[str]:
    out = []
    for section in ("limits", "requests"):
        res = get(c, "resources", section)
        if is_map(res):
            out += [k for k in res if k.startswith("rdma/") and k not in out]
    return out


def env_of(c: Any) -> dict[str, Any]:
    """name -> env entry (mapping) of a container."""
    out: dict[str, Any] = {}
    items = get(c, "env")
    if is_list(items):
        for e in items:
            name = get(e, "name")
            if isinstance(name, str):
                out[name] = e
    return out


def env_value(c: Any, name: str) -> str | None:
    e = env_of(c).get(name)
    value = get(e, "value") if e is not None else None
    return value if isinstance(value, str) else None


def network_names(meta: Any) -> list[tuple[str, str | None, str | None]]:
    """(network, namespace, interface) from the Multus networks annotation (list or JSON)."""
    raw = get(meta, "annotations", NETWORKS_ANNOTATION)
    if not isinstance(raw, str) or not raw.strip():
        return []
    raw = raw.strip()
    if raw.startswith("["):
        import json
        try:
            items = json.loads(raw)
        except ValueError:
            return []
        return [(i.get("name", ""), i.get("namespace"), i.get("interface"))
                for i in items if isinstance(i, dict)]
    out = []
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        iface = None
        if "@" in part:
            part, iface = part.split("@", 1)
        ns = None
        if "/" in part:
            ns, part = part.split("/", 1)
        out.append((part, ns, iface))
    return out


def pod_interfaces(meta: Any) -> list[str]:
    """Interfaces a pod has: lo, eth0 (primary CNI) and one per Multus attachment, named net1,
    net2, ... in annotation order unless the annotation names the interface."""
    names = ["lo", "eth0"]
    for i, (_net, _ns, iface) in enumerate(network_names(meta), 1):
        names.append(iface or f"net{i}")
    return names


def name_of(res: Any) -> str:
    meta_name = get(res.props, "metadata", "name")
    return meta_name if isinstance(meta_name, str) else res.name


def namespace_of(props: Any) -> str:
    ns = get(props, "metadata", "namespace")
    return ns if isinstance(ns, str) and ns else "default"


def kind(type_: str) -> str:
    return type_.rsplit(":", 1)[-1]


def gpu_workload(resource: Any) -> bool:
    """Whether any pod template of a resource (rule args or a stack resource) requests GPUs."""
    return any(pod_gpus(spec)
               for _, _, spec in pod_templates(resource.resource_type, resource.props))


# ------------------------------------------------------------------ fabric facts


def cabled_rails(resources: Any) -> dict[str, dict[int, tuple[list[str], list[str]]]]:
    """host -> rail -> (HCAs, switches) the rail is cabled with, from the facts the fabric
    component publishes (`facts.rails`, read from the very switch commands it pushes): the pack
    never parses switch CLI text itself."""
    out: dict[str, dict[int, tuple[list[str], list[str]]]] = {}
    for r in resources:
        if r.resource_type != COMPUTE_FABRIC_TYPE:
            continue
        rails = get(r.props, "facts", "rails")
        for host, by_rail in (rails.items() if is_map(rails) else ()):
            for rail, entry in (by_rail.items() if is_map(by_rail) else ()):
                hcas, switches = get(entry, "hcas"), get(entry, "switches")
                out.setdefault(host, {})[int(rail)] = (
                    [h for h in hcas if isinstance(h, str)] if is_list(hcas) else [],
                    [s for s in switches if isinstance(s, str)] if is_list(switches) else [])
    return out


# ------------------------------------------------------------------ a split site's facts



class Published:
    """An object another stack of a split site creates, as that stack publishes it (its
    `facts.objects` output, registered in this stack by the part's SiteFacts component):
    judged like one of this stack's own resources of that type."""

    def __init__(self, props: Any, facts: Any) -> None:
        self.resource_type = f"kubernetes:{get(props, 'apiVersion')}:{get(props, 'kind')}"
        self.props = props
        self.urn = facts.urn  # findings point at the facts that brought it in
        self.name = str(get(props, "metadata", "name"))


def _site_facts(resources: Any) -> Iterator[Any]:
    return (r for r in resources if r.resource_type == SITE_FACTS_TYPE)


def site_resources(resources: Any) -> list[Any]:
    """This stack's resources, and the objects the other parts of its site publish."""
    published = [Published(o, r) for r in _site_facts(resources)
                 for o in (get(r.props, "facts", "objects") or ())]
    return [*resources, *published]


def published_hcas(resources: Any) -> set[str]:
    """The HCA names the core part's fabric cables (its `facts.hcas` output)."""
    return {h for r in _site_facts(resources)
            for h in (get(r.props, "facts", "hcas") or ()) if isinstance(h, str)}
