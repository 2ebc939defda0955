"""Bootstrap and platform rules: kubeadm (tokens, encryption, audit), the Kubernetes provider,
Helm releases and the component version matrix. Resource rules read the commands' inputs
(`create`, `stdin`) — the exact scripts that will run on the hosts."""

from __future__ import annotations

import re
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ResourceValidationArgs,
    StackValidationArgs,
)

from . import compat_data
from .common import KUBEADM_INIT, config
from .registry import Report, chart_name, get, resource_rule, stack_rule
from .resource_names import CLUSTER_TYPE

MANDATORY = EnforcementLevel.MANDATORY
COMMAND = ("command:remote:Command",)
_TTL = re.compile(r"--ttl[= ](\S+)")
_DURATION = re.compile(r"(\d+)(h|m|s)")


def _minutes(value: str) -> float | None:
    value = value.strip("'\"")
    if value.isdigit():
        return None  # kubeadm requires a unit; a bare number is a mistake
    parts = _DURATION.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        return None
    return sum(int(n) * {"h": 60, "m": 1, "s": 1 / 60}[u] for n, u in parts)


@resource_rule(
    "kubeadm-token-ttl-bounded",
    "kubeadm join tokens are created with a short, explicit TTL",
    MANDATORY,
    COMMAND,
)
def kubeadm_token_ttl_bounded(args: ResourceValidationArgs, report: Report) -> None:
    """A bootstrap token lets anything on the management network join as a node and read
    the cluster's CA-signed identity; the default is 24 h and --ttl 0 never expires.
    Config: maxMinutes (120)."""
    create = get(args.props, "create")
    if not isinstance(create, str) or "kubeadm token create" not in create:
        return
    maximum = config(args, "maxMinutes", 120)
    m = _TTL.search(create)
    if not m:
        report("`kubeadm token create` without --ttl (defaults to 24h)")
        return
    minutes = _minutes(m.group(1))
    if minutes is None or minutes <= 0:
        report(f"--ttl {m.group(1)} never expires or is not a duration")
    elif minutes > maximum:
        report(f"--ttl {m.group(1)} is longer than {maximum} minutes")




def _cluster_configuration(args: Any) -> str | None:
    """The stdin of a command that creates an API server from a ClusterConfiguration."""
    stdin = get(args.props, "stdin")
    if (isinstance(stdin, str) and "kind: ClusterConfiguration" in stdin
            and KUBEADM_INIT.search(stdin)):
        return stdin
    return None


@resource_rule(
    "kube-encryption-at-rest",
    "kubeadm's API server encrypts Secrets at rest (encryption-provider-config)",
    MANDATORY,
    COMMAND,
)
def kube_encryption_at_rest(args: ResourceValidationArgs, report: Report) -> None:
    """Join tokens, registry credentials and the TLS keys of the inference endpoint live in
    Secrets; without encryption they sit in plain text in etcd and in every etcd backup."""
    text = _cluster_configuration(args)
    if text is not None and "encryption-provider-config" not in text:
        report("the kubeadm ClusterConfiguration sets no encryption-provider-config")


@resource_rule(
    "kube-audit-logging",
    "kubeadm's API server writes an audit log (audit-policy-file and audit-log-path)",
    MANDATORY,
    COMMAND,
)
def kube_audit_logging(args: ResourceValidationArgs, report: Report) -> None:
    """On a shared GPU cluster the audit log is the only record of who changed a quota,
    exec'd into a training pod or read a Secret."""
    text = _cluster_configuration(args)
    if text is None:
        return
    missing = [f for f in ("audit-policy-file", "audit-log-path") if f not in text]
    if missing:
        report(f"the kubeadm ClusterConfiguration sets no {', '.join(missing)}")


@resource_rule(
    "kubernetes-provider-explicit",
    "Every Kubernetes resource uses the stack's own provider, never the default one",
    MANDATORY,
    ("kubernetes:*",),
)
def kubernetes_provider_explicit(args: ResourceValidationArgs, report: Report) -> None:
    """A default provider reads the ambient kubeconfig: a `pulumi up` from a laptop pointed
    at another cluster would create (or delete) these objects there."""
    prov = args.provider
    if prov is None:
        return  # offline fixtures and providers themselves
    name = prov.name or ""
    if name.startswith("default") or "::default_" in (prov.urn or ""):
        report(f"uses the default provider {prov.urn}; pass the cluster's provider")


@resource_rule(
    "helm-release-atomic",
    "Helm releases are atomic (a failed upgrade rolls back)",
    EnforcementLevel.ADVISORY,
    ("kubernetes:helm.sh/*:Release",),
)
def helm_release_atomic(args: ResourceValidationArgs, report: Report) -> None:
    """A half-applied GPU or Network Operator upgrade leaves nodes with mismatched drivers and
    device plugins: GPUs or RDMA devices disappear from every node until someone repairs it."""
    if get(args.props, "atomic") is not True:
        report(f"release {get(args.props, 'name') or args.name!r} is not atomic")


_RELEASE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)$")


def _kubernetes_minor(resources: Any) -> int | None:
    """The minor of the Kubernetes release the cluster publishes (none where another stack of
    a split site inits the control plane)."""
    for r in resources:
        version = get(r.props, "facts", "kubernetesVersion") \
            if r.resource_type == CLUSTER_TYPE else None
        if isinstance(version, str) and (m := _RELEASE.match(version)):
            return int(m.group(2))
    return None


@stack_rule(
    "component-versions-compatible",
    "Kubernetes, GPU Operator, Network Operator and Volcano versions are a supported set",
    MANDATORY,
)
def component_versions_compatible(args: StackValidationArgs, report: Report) -> None:
    """Each pin is valid alone; the pairs are not: GPU Operator v26.3.2 with Network Operator
    26.4.0 loses GPUDirect RDMA, and operators refuse Kubernetes minors they do not support.
    The matrix is compat_data.py, the one release table the stack reads too."""
    charts: dict[str, tuple[str, str]] = {}
    minor = _kubernetes_minor(args.resources)
    for r in args.resources:
        if r.resource_type.startswith("kubernetes:helm.sh/") and r.resource_type.endswith(
                ":Release"):
            chart, version = chart_name(r.props), get(r.props, "version")
            if chart is not None and isinstance(version, str):
                charts[chart] = (version, r.urn)
    gpu = charts.get("gpu-operator")
    net = charts.get("network-operator")
    if net:
        rng = compat_data.NETWORK_OPERATOR_K8S.get(net[0].lstrip("v"))
        if rng is None:
            report(f"Network Operator {net[0]} is not in the compatibility table", net[1])
        elif minor is not None and not rng[0] <= minor <= rng[1]:
            report(f"Network Operator {net[0]} supports Kubernetes 1.{rng[0]}-1.{rng[1]}, "
                   f"not 1.{minor}", net[1])
    if gpu:
        rng = compat_data.GPU_OPERATOR_K8S.get(gpu[0])
        if rng is None:
            report(f"GPU Operator {gpu[0]} is not in the compatibility table", gpu[1])
        elif minor is not None and not rng[0] <= minor <= rng[1]:
            report(f"GPU Operator {gpu[0]} supports Kubernetes 1.{rng[0]}-1.{rng[1]}, "
                   f"not 1.{minor}", gpu[1])
    if gpu and net:
        reason = compat_data.RDMA_INCOMPATIBLE.get((gpu[0], net[0].lstrip("v")))
        if reason:
            report(reason, net[1])
    vol = charts.get("volcano")
    if vol and compat_data.version_key(vol[0]) < compat_data.version_key(
            compat_data.VOLCANO_HYPERNODE[0]):
        report(f"Volcano {vol[0]} predates HyperNode scheduling "
               f"({compat_data.VOLCANO_HYPERNODE[0]})", vol[1])


@stack_rule(
    "gpu-driver-one-owner",
    "The GPU driver has one owner: the hosts or the GPU Operator's driver container",
    MANDATORY,
)
def gpu_driver_one_owner(args: StackValidationArgs, report: Report) -> None:
    """On a host with its own driver (DGX OS ships one) the GPU Operator's driver manager finds
    it and runs no driver container (nvidia.com/gpu.deploy.driver=pre-installed), so an
    enabled driver container beside host-installed drivers means its version and upgrade
    policy describe nothing that runs; a disabled one with no host driver leaves every GPU
    without a driver; a version on a disabled driver is a pin nothing reads."""
    host: set[str] = set()
    chained = False  # the kubeadm cluster says who owns it (components/planning/facts.py)
    release: tuple[Any, str] | None = None
    for r in args.resources:
        if r.resource_type == CLUSTER_TYPE:
            owner = get(r.props, "facts", "gpuDriverOwner")
            chained |= owner is not None
            if owner == "host":
                host |= {str(get(r.props, "facts", "hostGpuDriver") or "")} - {""}
        elif r.resource_type.endswith(":Release") and chart_name(r.props) == "gpu-operator":
            release = (get(r.props, "values", "driver") or {}, r.urn)
    if release is None:
        return
    driver, urn = release
    enabled = driver.get("enabled", True) is not False  # the chart's default: enabled
    if enabled and host:
        report(f"the hosts install GPU driver {', '.join(sorted(host))} and the GPU Operator "
               "runs its driver container too: it finds the host driver, runs none, and its "
               "version and upgrade policy describe nothing that runs; set "
               "platform.gpuOperator.driver to one owner", urn)
    if not enabled and chained and not host:
        report("the GPU Operator's driver container is disabled and no host installs a GPU "
               "driver: set platform.gpuOperator.driver: host with a driverVersion, or enable "
               "the operator's driver", urn)
    if not enabled and driver.get("version"):
        report(f"driver.version {driver['version']} is set on a disabled driver container: a "
               "pin nothing runs (the hosts' driver is platform.gpuOperator.driverVersion)", urn)
