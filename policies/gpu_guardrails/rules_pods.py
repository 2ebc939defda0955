"""Pod rules for every workload: privileged pods only in operator namespaces, secrets from
Secrets, GPU placement by real labels and the GPU taint tolerated.

Props are what the engine passes: camelCase keys, read-only mappings, numbers as floats.
"""

from __future__ import annotations

import re

from pulumi_policy import (
    EnforcementLevel,
    ResourceValidationArgs,
)

from .common import (
    GPU,
    WORKLOAD_TYPES,
    config,
    containers,
    env_of,
    namespace_of,
    pod_containers,
    pod_gpus,
    pod_templates,
)
from .registry import Report, get, is_map, resource_rule

MANDATORY = EnforcementLevel.MANDATORY

DEFAULT_OPERATOR_NAMESPACES = (
    "kube-system", "gpu-operator", "nvidia-network-operator", "tigera-operator",
    "calico-system", "calico-apiserver", "volcano-system", "metallb-system", "ingress-nginx",
    "cert-manager", "lustre-csi-system", "monitoring", "kubeflow",
)


@resource_rule(
    "privileged-only-operator-namespaces",
    "Privileged containers and host namespaces only in operator namespaces",
    MANDATORY,
    WORKLOAD_TYPES,
)
def privileged_only_operator_namespaces(args: ResourceValidationArgs,
                                        report: Report) -> None:
    """Drivers, device plugins and CNIs need the host; a training or inference image does
    not, and a privileged tenant pod owns the node (and its neighbours' GPUs and data).
    Config: namespaces (the operator namespaces)."""
    allowed = set(config(args, "namespaces", DEFAULT_OPERATOR_NAMESPACES))
    ns = namespace_of(args.props)
    if ns in allowed:
        return
    for path, _meta, spec in pod_templates(args.resource_type, args.props):
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            if get(spec, field) is True:
                report(f"{path}.{field} is true in namespace {ns!r}")
        for v in get(spec, "volumes") or ():
            if is_map(get(v, "hostPath")):
                report(f"{path} mounts hostPath {get(v, 'hostPath', 'path')!r} in "
                       f"namespace {ns!r}")
        for cpath, c in pod_containers(path, spec):
            sc = get(c, "securityContext")
            if get(sc, "privileged") is True:
                report(f"{cpath} is privileged in namespace {ns!r}")
            added = {a for a in (get(sc, "capabilities", "add") or ()) if isinstance(a, str)}
            if added & {"SYS_ADMIN", "ALL", "NET_ADMIN", "SYS_PTRACE"}:
                report(f"{cpath} adds {sorted(added)} in namespace {ns!r}")


_SECRETISH = re.compile(r"(TOKEN|PASSWORD|PASSWD|SECRET|PRIVATE_KEY|API_KEY|ACCESS_KEY|"
                        r"CREDENTIAL)", re.I)


@resource_rule(
    "secrets-via-secret-key-ref",
    "Secret-looking env vars come from a Secret (valueFrom.secretKeyRef), never a literal",
    MANDATORY,
    WORKLOAD_TYPES,
)
def secrets_via_secret_key_ref(args: ResourceValidationArgs, report: Report) -> None:
    """A literal lands in the object spec, `kubectl get -o yaml`, the rendered diff and
    Pulumi state; a Pulumi secret in env would also hide the entire spec from the diff."""
    for path, c in containers(args.resource_type, args.props):
        for name, entry in env_of(c).items():
            if not _SECRETISH.search(name):
                continue
            if get(entry, "value") is not None:
                report(f"{path} env {name} is a literal; use valueFrom.secretKeyRef")
            elif get(entry, "valueFrom") is not None and not is_map(
                    get(entry, "valueFrom", "secretKeyRef")):
                report(f"{path} env {name} is not read from a Secret")


@resource_rule(
    "gpu-node-selector-real-label",
    "GPU product node selectors use a value GPU Feature Discovery really sets",
    MANDATORY,
    WORKLOAD_TYPES,
)
def gpu_node_selector_real_label(args: ResourceValidationArgs, report: Report) -> None:
    """GFD labels an H100 SXM `NVIDIA-H100-80GB-HBM3`; a made-up value such as
    `NVIDIA-H100-SXM` matches no node and the pods stay Pending with no error.
    Config: products (accepted values)."""
    products = set(config(args, "products", ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-NVL",
                                             "NVIDIA-H200", "NVIDIA-H100-PCIe")))
    for path, spec in ((p, s) for p, _m, s in pod_templates(args.resource_type, args.props)):
        value = get(spec, "nodeSelector", "nvidia.com/gpu.product")
        if isinstance(value, str) and value not in products:
            report(f"{path}.nodeSelector nvidia.com/gpu.product={value!r} is not a GFD value "
                   f"({sorted(products)})")


@resource_rule(
    "gpu-taint-tolerated",
    "GPU pods tolerate the GPU nodes' nvidia.com/gpu taint",
    MANDATORY,
    WORKLOAD_TYPES,
)
def gpu_taint_tolerated(args: ResourceValidationArgs, report: Report) -> None:
    """GPU nodes are tainted nvidia.com/gpu=present:NoSchedule so nothing else lands on them;
    a GPU pod without the toleration is never scheduled."""
    for path, _meta, spec in pod_templates(args.resource_type, args.props):
        if not pod_gpus(spec):
            continue
        tols = get(spec, "tolerations") or ()
        if not any(get(t, "key") in (GPU, None) and get(t, "operator") == "Exists"
                   or get(t, "key") == GPU and get(t, "value") == "present" for t in tols):
            report(f"{path} has no toleration for the {GPU} taint")
