"""The namespaces training and serving run in, with their Pod Security levels, and the priority
classes of their work (pure).
"""

from __future__ import annotations

from components.model.cluster import Cluster
from components.planning.labels import LABEL_PREFIX

# The admission policy that admits RDMA pods in training namespaces (planning/pod_security.py).
RDMA_POLICY = "rdma-pods-baseline"


def training_namespaces(cluster: Cluster) -> list[str]:
    return sorted({j.namespace for j in cluster.workloads.training} | {"training"})


def inference_namespaces(cluster: Cluster) -> list[str]:
    return sorted(({s.namespace for s in cluster.workloads.inference} | {"inference"})
                  - set(training_namespaces(cluster)))


def namespace(name: str, enforce: str, audit: str, reason: str) -> dict:
    """A namespace with Pod Security Admission labels (enforce, and warn/audit one level up)."""
    psa = "pod-security.kubernetes.io"
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {f"{psa}/enforce": enforce, f"{psa}/enforce-version": "latest",
                       f"{psa}/warn": audit, f"{psa}/warn-version": "latest",
                       f"{psa}/audit": audit, f"{psa}/audit-version": "latest"},
            "annotations": {f"{LABEL_PREFIX}/pod-security": reason},
        },
    }


# Pod priorities: serving keeps its GPUs; training and the fabric acceptance test wait for free
# GPUs and never preempt anything (a preempted rank would stall its whole NCCL gang).
TRAINING_PRIORITY = "gpu-training"
INFERENCE_PRIORITY = "gpu-inference"


def priority_classes() -> list[dict]:
    def pc(name: str, value: int, preemption: str, description: str) -> dict:
        return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value, "preemptionPolicy": preemption,
                "globalDefault": False, "description": description}

    return [
        pc(INFERENCE_PRIORITY, 100000, "PreemptLowerPriority",
           "vLLM serving: keeps its GPUs while training waits"),
        pc(TRAINING_PRIORITY, 10000, "Never",
           "multi-node training and the NCCL acceptance test: wait for free GPUs, never "
           "preempt (a preempted rank stalls the whole gang)"),
    ]


def namespaces(cluster: Cluster) -> list[dict]:
    training = [namespace(
        ns, "privileged", "baseline",
        f"baseline plus IPC_LOCK and the scratch hostPath, enforced by the "
        f"ValidatingAdmissionPolicy {RDMA_POLICY} (the baseline level forbids both: RDMA pins "
        "memory for the HCAs' DMA); warn/audit report anything beyond baseline")
        for ns in training_namespaces(cluster)]
    inference = [namespace(
        ns, "baseline", "restricted",
        "baseline: vLLM pods need no extra capabilities; warn/audit at restricted")
        for ns in inference_namespaces(cluster)]
    return sorted(training + inference, key=lambda n: n["metadata"]["name"])
