"""Component version compatibility, checked when the config is validated.

Every table is the policy pack's (policies/gpu_guardrails/compat_data.py): one entry there per
release, each citing its source; the checks here and the pack's rules read the same entries, so
a new release is one edit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from components.model import pack_data
from components.model.cluster import Cluster
from components.model.fields import Problem

DATA_FILE = "policies/gpu_guardrails/compat_data.py"
DATA = pack_data.load("compat_data")
NETWORK_OPERATOR_RELEASES: dict[str, dict] = DATA.NETWORK_OPERATOR_RELEASES
NETWORK_OPERATOR_K8S: dict[str, tuple[int, int]] = DATA.NETWORK_OPERATOR_K8S
GPU_OPERATOR_K8S: dict[str, tuple[int, int]] = DATA.GPU_OPERATOR_K8S
RDMA_INCOMPATIBLE: dict[tuple[str, str], str] = DATA.RDMA_INCOMPATIBLE
VOLCANO_HYPERNODE: tuple[str, ...] = DATA.VOLCANO_HYPERNODE
TRAINING_OPERATOR_SERIES: str = DATA.TRAINING_OPERATOR_SERIES
TRAINING_OPERATOR_COMMITS: dict[str, str] = DATA.TRAINING_OPERATOR_COMMITS
CALICO_K8S: dict[str, tuple[int, int]] = DATA.CALICO_K8S
VLLM_FLOOR: tuple[int, int, int] = DATA.VLLM_FLOOR


def training_operator_unpinned(version: str) -> str:
    return (f"has no commit in TRAINING_OPERATOR_COMMITS: the Training Operator {version} is "
            "fetched by the commit of its tag, never by the tag itself (a tag can be moved)")


def training_operator_pin_fix(version: str) -> str:
    return (f'add "{version}": "<commit>" to TRAINING_OPERATOR_COMMITS in '
            f"{DATA_FILE}, the Origin.Hash of https://proxy.golang.org/"
            f"github.com/kubeflow/training-operator/@v/{version}.info")


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def _kubernetes_range(k8s: str, path: str, name: str, version: str,
                      supported: tuple[int, int] | None, unknown_fix: str,
                      verb: str = "supports") -> Iterator[Problem]:
    """A component release against the Kubernetes minors its table row allows."""
    if supported is None:
        yield Problem(path, version, "is not in the compatibility table", unknown_fix)
    elif not supported[0] <= _minor(k8s) <= supported[1]:
        yield Problem("kubernetes.version", k8s,
               f"{name} {version} {verb} Kubernetes 1.{supported[0]}-1.{supported[1]}",
               f"pick a Kubernetes version in that range or another {name} release")


def compatibility_problems(cluster: Cluster) -> Iterator[Problem]:
    """Yield (path, value, message, fix) for every incompatible version pair."""
    k8s = cluster.kubernetes.version
    gpu = cluster.platform.gpu_operator.version
    net = cluster.platform.network_operator.version

    yield from _kubernetes_range(
        k8s, "platform.networkOperator.version", "Network Operator", net,
        NETWORK_OPERATOR_K8S.get(net.lstrip("v")), "use one of "
        + ", ".join(sorted(NETWORK_OPERATOR_K8S)) + " or add the release "
        f"to {DATA_FILE} (its Kubernetes range and images)")
    yield from _kubernetes_range(
        k8s, "platform.gpuOperator.version", "GPU Operator", gpu, GPU_OPERATOR_K8S.get(gpu),
        "use one of " + ", ".join(sorted(GPU_OPERATOR_K8S))
        + f" or add the release to {DATA_FILE}")

    reason = RDMA_INCOMPATIBLE.get((gpu, net.lstrip("v")))
    if reason and cluster.platform.gpu_operator.gpudirect_rdma:
        yield Problem("platform.networkOperator.version", net,
               f"incompatible with platform.gpuOperator.version {gpu}: {reason}",
               "upgrade the Network Operator (26.4.1 or later) or change the GPU Operator")

    p = cluster.platform
    if p.cni != "calico":
        yield Problem("platform.cni", p.cni, "has no chart settings in this stack (only calico is "
               "rendered)", "set platform.cni: calico")

    to = p.training_operator.version
    if not to.startswith(TRAINING_OPERATOR_SERIES):
        yield Problem("platform.trainingOperator.version", to,
               "is not a Training Operator v1.9.x release (the PyTorchJob/MPIJob v1 API and "
               "--gang-scheduler-name)", "use v1.9.4")
    elif to not in TRAINING_OPERATOR_COMMITS:
        yield Problem("platform.trainingOperator.version", to, training_operator_unpinned(to),
               training_operator_pin_fix(to))

    yield from _lnet_problems(cluster)
    yield from _vllm_problems(cluster)

    calico = cluster.platform.calico.version
    yield from _kubernetes_range(
        k8s, "platform.calico.version", "Calico", calico,
        CALICO_K8S.get(".".join(calico.split(".")[:2])),
        "use one of the series " + ", ".join(sorted(CALICO_K8S)) + f" or add it to {DATA_FILE} "
        "with its Kubernetes range", verb="is tested with")

    vol = cluster.platform.volcano.version
    if DATA.version_key(vol) < DATA.version_key(VOLCANO_HYPERNODE[0]):
        yield Problem("platform.volcano.version", vol,
               "predates HyperNode network-topology scheduling (Volcano 1.12)",
               "use Volcano 1.12.0 or later (1.15.1 is tested)")


# The vLLM release from an image's tag, in any registry: `…:v0.32.0`, `…:0.32.0`, a digest may
# follow (the pack's no-remote-code-from-models reads it the same way).
_VLLM_TAG = re.compile(r":v?(\d+)\.(\d+)\.(\d+)(?:[-+][\w.]+)?(?:@sha256:[0-9a-f]{64})?$")


def _vllm_problems(cluster: Cluster) -> Iterator[Problem]:
    floor = ".".join(map(str, VLLM_FLOOR))
    for i, svc in enumerate(cluster.workloads.inference):
        m = _VLLM_TAG.search(svc.image)
        if m is None:
            yield Problem(f"workloads.inference[{i}].image", svc.image,
                          "names no vLLM release in its tag, so its security floor cannot be "
                          "checked",
                          f"tag it with the vLLM version it holds, e.g. vllm/vllm-openai:v{floor}"
                          f" (a digest may follow: …:v{floor}@sha256:…)")
        elif tuple(int(g) for g in m.groups()) < VLLM_FLOOR:
            yield Problem(f"workloads.inference[{i}].image", svc.image,
                          f"is a vLLM release before {floor}, whose OpenAI server has published "
                          "security flaws",
                          f"use vllm/vllm-openai:v{floor} or later")


def _lnet(net: str) -> str:
    return net if net[-1:].isdigit() else net + "0"  # o2ib is o2ib0


def _lnet_problems(cluster: Cluster) -> Iterator[Problem]:
    """Lustre MGS NIDs must be on the LNet network the hosts configure, or mounts hang."""
    want = cluster.storage.lnet_network
    for i, fs in enumerate(cluster.storage.lustre):
        for nid in fs.mgs_nids:
            if "@" not in nid or _lnet(nid.rpartition("@")[2]) != _lnet(want):
                yield Problem(f"storage.lustre[{i}].mgsNids", nid,
                       f"is not a NID on LNet network {want} (storage.lnetNetwork)",
                       f"write it as <address>@{want} or change storage.lnetNetwork")
