"""Component version compatibility, as data, checked when the config is validated.

Each rule cites what it encodes so a reviewer can update it when upstream publishes a new
support matrix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Network Operator release -> Kubernetes minor versions it supports (release notes).
NETWORK_OPERATOR_K8S: dict[str, tuple[int, int]] = {
    "26.4.0": (31, 35),
    "26.4.1": (31, 35),
}

# (GPU Operator, Network Operator) pairs whose GPUDirect RDMA integration is not supported.
RDMA_INCOMPATIBLE: dict[tuple[str, str], str] = {
    ("v26.3.2", "26.4.0"): "GPU Operator 26.3.2 does not support RDMA with Network Operator "
    "26.4.0 (fixed by Network Operator 26.4.1)",
}

# GPU Operator release -> Kubernetes minor versions it supports (platform support matrix).
GPU_OPERATOR_K8S: dict[str, tuple[int, int]] = {
    "v26.3.2": (30, 35),
    "v26.7.0": (31, 35),
}

# Kubeflow Training Operator: the v1 API (PyTorchJob, MPIJob kubeflow.org/v1) and the
# --gang-scheduler-name flag the platform sets live on the release-1.9 branch only; master is
# Trainer v2 (TrainJob). platform/training-operator/kustomization.yaml pins the same ref.
TRAINING_OPERATOR_SERIES = "v1.9."

# Calico (tigera-operator) minor series -> Kubernetes minor versions it is tested with
# (Calico's per-release system requirements).
CALICO_K8S: dict[str, tuple[int, int]] = {
    "v3.30": (31, 33),
    "v3.31": (32, 35),
}

# Volcano releases with the HyperNode (network-topology-aware scheduling) API the stack renders.
VOLCANO_HYPERNODE = ("1.12.0",)


@dataclass(frozen=True)
class _Problem:
    path: str
    value: Any
    message: str
    fix: str


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def _semver(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.lstrip("v").split("-")[0].split("."))


def _kubernetes_range(k8s: str, path: str, name: str, version: str,
                      supported: tuple[int, int] | None, unknown_fix: str,
                      verb: str = "supports") -> Iterator[tuple[str, Any, str, str]]:
    """A component release against the Kubernetes minors its table row allows."""
    if supported is None:
        yield (path, version, "is not in the compatibility table", unknown_fix)
    elif not supported[0] <= _minor(k8s) <= supported[1]:
        yield ("kubernetes.version", k8s,
               f"{name} {version} {verb} Kubernetes 1.{supported[0]}-1.{supported[1]}",
               f"pick a Kubernetes version in that range or another {name} release")


def compatibility_problems(cluster: Any) -> Iterator[tuple[str, Any, str, str]]:
    """Yield (path, value, message, fix) for every incompatible version pair."""
    k8s = cluster.kubernetes.version
    gpu = cluster.platform.gpu_operator.version
    net = cluster.platform.network_operator.version

    yield from _kubernetes_range(
        k8s, "platform.networkOperator.version", "Network Operator", net,
        NETWORK_OPERATOR_K8S.get(net.lstrip("v")), "use one of "
        + ", ".join(sorted(NETWORK_OPERATOR_K8S)) + " or add the release to "
        "components/planning/compat.py with its Kubernetes range")
    yield from _kubernetes_range(
        k8s, "platform.gpuOperator.version", "GPU Operator", gpu, GPU_OPERATOR_K8S.get(gpu),
        "use one of " + ", ".join(sorted(GPU_OPERATOR_K8S)) + " or add the release to "
        "components/planning/compat.py")

    reason = RDMA_INCOMPATIBLE.get((gpu, net.lstrip("v")))
    if reason and cluster.platform.gpu_operator.gpudirect_rdma:
        yield ("platform.networkOperator.version", net,
               f"incompatible with platform.gpuOperator.version {gpu}: {reason}",
               "upgrade the Network Operator (26.4.1 or later) or change the GPU Operator")

    p = cluster.platform
    if p.cni != "calico":
        yield ("platform.cni", p.cni, "has no chart settings in this stack (only calico is "
               "rendered)", "set platform.cni: calico")

    to = p.training_operator.version
    if not to.startswith(TRAINING_OPERATOR_SERIES):
        yield ("platform.trainingOperator.version", to,
               "is not a Training Operator v1.9.x release (the PyTorchJob/MPIJob v1 API and "
               "--gang-scheduler-name)", "use v1.9.4")

    yield from _lnet_problems(cluster)

    calico = cluster.platform.calico.version
    yield from _kubernetes_range(
        k8s, "platform.calico.version", "Calico", calico,
        CALICO_K8S.get(".".join(calico.split(".")[:2])),
        "use one of the series " + ", ".join(sorted(CALICO_K8S)) + " or add it to "
        "components/planning/compat.py with its Kubernetes range", verb="is tested with")

    vol = cluster.platform.volcano.version
    if _semver(vol) < _semver(VOLCANO_HYPERNODE[0]):
        yield ("platform.volcano.version", vol,
               "predates HyperNode network-topology scheduling (Volcano 1.12)",
               "use Volcano 1.12.0 or later (1.15.1 is tested)")


def _lnet(net: str) -> str:
    return net if net[-1:].isdigit() else net + "0"  # o2ib is o2ib0


def _lnet_problems(cluster: Any) -> Iterator[tuple[str, Any, str, str]]:
    """Lustre MGS NIDs must be on the LNet network the hosts configure, or mounts hang."""
    want = cluster.storage.lnet_network
    for i, fs in enumerate(cluster.storage.lustre):
        for nid in fs.mgs_nids:
            if "@" not in nid or _lnet(nid.rpartition("@")[2]) != _lnet(want):
                yield (f"storage.lustre[{i}].mgsNids", nid,
                       f"is not a NID on LNet network {want} (storage.lnetNetwork)",
                       f"write it as <address>@{want} or change storage.lnetNetwork")
