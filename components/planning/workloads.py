"""What every workload's pods are built from (pure): NCCL's environment, the RDMA pod's security
exceptions, whole-node resources, gang scheduling and the topology constraint, the MPI launcher.
`training`, `acceptance` and `inference` render the objects themselves.

NCCL's environment is derived from the inventory (the compute HCAs of the nodes) and from the
platform layer (the RDMA resource, and the interface the RDMA network attachment creates in the
pod), so a job cannot name an interface or HCA that is not there. Gang scheduling and the
network-topology constraint are derived from the replica count and the fabric's HyperNodes.

Pod security: inference pods meet the Pod Security Standards' restricted profile. Pods on the
RDMA fabric need one exception each, written on the pod as `gpucluster.io/pod-security-exceptions`
(IPC_LOCK, and running as UID 0 so that capability is effective); nothing else is relaxed — no
privileged containers, no host network/PID/IPC, no hostPath, no privilege escalation.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from components.model.cluster import Cluster
from components.planning import labels, namespaces, rdma

EXCEPTIONS_ANNOTATION = "gpucluster.io/pod-security-exceptions"
# A policy rule set aside for one object, with the reason, on the object itself: every stack
# gets it, and the preview lists it as suppressed.
POLICY_SUPPRESS_ANNOTATION = labels.POLICY_SUPPRESS_ANNOTATION
RDMA_EXCEPTIONS = {
    "capabilities.add=IPC_LOCK": "RDMA registers (pins) GPU and host memory for the HCAs' DMA; "
                                 "without IPC_LOCK ibv_reg_mr fails and NCCL falls back to "
                                 "sockets",
    "runAsNonRoot=unset": "Kubernetes adds capabilities to the bounding and permitted sets only; "
                          "IPC_LOCK is effective for UID 0 alone",
}
LAUNCHER_EXCEPTIONS = {
    "runAsNonRoot=unset": "mpirun runs as the image's root user (OMPI_ALLOW_RUN_AS_ROOT) and "
                          "execs into root workers; the launcher holds no capabilities at all",
}
VOLCANO = "volcano"
TRAINING_QUEUE = "training"
# ---------------------------------------------------------------- NCCL


def compute_hcas(cluster: Cluster) -> list[str]:
    """Compute HCAs in rail order, the union over nodes (names may differ between nodes)."""
    by_rail: dict[int, list[str]] = {}
    for node in cluster.nodes:
        for rail in node.rails:
            names = by_rail.setdefault(rail.index, [])
            if rail.hca not in names:
                names.append(rail.hca)
    return [h for _, names in sorted(by_rail.items()) for h in sorted(names)]


def nccl_env(cluster: Cluster, debug: str | None = None) -> list[dict[str, str]]:
    """NCCL's environment for native InfiniBand (no RoCE knobs such as NCCL_IB_GID_INDEX)."""
    # '=' makes NCCL match names exactly: plain 'mlx5_1' would also select mlx5_10, mlx5_11,
    # and plain 'net1' any interface starting with net1.
    hcas = "=" + ",".join(f"{h}:1" for h in compute_hcas(cluster))
    env = {
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": hcas,
        "NCCL_SOCKET_IFNAME": "=" + rdma.POD_RDMA_INTERFACE,
        # GPU and HCA of a rail share a PCIe switch on DGX-class servers.
        "NCCL_NET_GDR_LEVEL": "PXB",
        "NCCL_DEBUG": debug or ("WARN" if cluster.environment == "production" else "INFO"),
    }
    return [{"name": k, "value": v} for k, v in env.items()]


# ---------------------------------------------------------------- pod building blocks


def rdma_security() -> dict:
    return {"allowPrivilegeEscalation": False, "privileged": False,
            "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}}


def shm_volume(size: str) -> dict:
    # /dev/shm defaults to 64 MiB in a container; NCCL and data loaders need far more.
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def claim_volumes(claims: dict[str, str]) -> list[dict]:
    return [{"name": name, "persistentVolumeClaim": {"claimName": claim}}
            for name, claim in claims.items()]


def whole_node_resources(cluster: Cluster, gpus: int, cpu: int | str, memory: str) -> dict:
    res = {"nvidia.com/gpu": str(gpus), rdma.rdma_resource(cluster): "1",
           "cpu": str(cpu), "memory": memory}
    return {"requests": res, "limits": dict(res)}


def su_label_key(cluster: Cluster) -> str:
    """The node label whose value names a node's tier-1 HyperNode (its SU).

    Bootstrap labels every GPU node with its SU, and the platform names the SU's tier-1
    HyperNode the same way (tests check the two agree node by node).
    """
    return labels.SU_LABEL


def largest_su(cluster: Cluster) -> int:
    counts: dict[int, int] = {}
    for n in cluster.nodes:
        counts[n.su] = counts.get(n.su, 0) + 1
    return max(counts.values())


def topology_affinity(cluster: Cluster, group: dict[str, str], nodes: int,
                      mode: str = "hard") -> dict | None:
    """Keep a gang inside one tier-1 HyperNode (an SU: one hop through its leaves).

    Volcano's own constraint is PodGroup `spec.networkTopology`, but Training Operator v1.9
    creates the PodGroup of a PyTorchJob/MPIJob itself and rewrites its spec on every sync
    (minMember, queue, priorityClassName, minResources only), and Volcano reads the
    `volcano.sh/network-topology-*` annotations only from pods it makes PodGroups for. So the
    same tier-1 constraint is expressed as pod affinity on the label the tier-1 HyperNodes
    select (Volcano's predicates plugin evaluates it for every pod of the gang). A job larger
    than an SU crosses the spine (tier 2, the whole fabric): nothing to constrain.
    """
    if nodes <= 1 or nodes > largest_su(cluster):
        return None
    term = {"labelSelector": {"matchLabels": group}, "topologyKey": su_label_key(cluster)}
    if mode == "hard":
        return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": term}]}}


def tested_nodes_only(affinity: dict | None = None) -> dict:
    """`affinity` and: never on a GPU node that has not passed the acceptance test yet."""
    return {**(affinity or {}), "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": labels.UNTESTED_LABEL, "operator": "DoesNotExist"}]}]}}}


def gpu_pod_spec(cluster: Cluster, containers: list[dict], volumes: list[dict],
                 affinity: dict | None, untested: bool = False) -> dict:
    """A GPU pod through Volcano; on tested nodes only (with an acceptance gate) unless
    `untested` (the acceptance test's own workers, which the gate pins to the nodes it
    tests)."""
    if cluster.acceptance_gated and not untested:
        affinity = tested_nodes_only(affinity)
    spec: dict[str, Any] = {
        "schedulerName": VOLCANO,
        "priorityClassName": namespaces.TRAINING_PRIORITY,
        "nodeSelector": {"nvidia.com/gpu.product": cluster.gpu_nodes.template.gpu.product_label},
        "tolerations": [labels.gpu_toleration()],
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": containers,
        "volumes": volumes,
    }
    if affinity:
        spec["affinity"] = affinity
    return spec


def rdma_metadata(labels: dict[str, str]) -> dict:
    return {
        "labels": labels,
        "annotations": {
            "k8s.v1.cni.cncf.io/networks": rdma.RDMA_NETWORK,
            EXCEPTIONS_ANNOTATION: json.dumps(RDMA_EXCEPTIONS, sort_keys=True),
        },
    }


def run_policy(job_backoff: int, min_available: int, queue: str = TRAINING_QUEUE) -> dict:
    return {
        "backoffLimit": job_backoff,
        # When the job ends, pods still running (MPI workers idling in `sleep`) are deleted and
        # give their GPUs back; finished pods stay, with the logs the NCCL gate reads.
        "cleanPodPolicy": "Running",
        # Gang scheduling: Volcano starts all pods or none.
        "schedulingPolicy": {"minAvailable": min_available, "queue": queue},
    }


def mpi_launcher(image: str, command: str, env: list[dict]) -> dict:
    """The mpirun pod: CPU only, may run on a GPU node (it tolerates the taint, asks no GPU)."""
    res = {"cpu": "2", "memory": "4Gi"}
    return {
        "metadata": {"annotations": {EXCEPTIONS_ANNOTATION: json.dumps(LAUNCHER_EXCEPTIONS)}},
        "spec": {
            "schedulerName": VOLCANO,
            "priorityClassName": namespaces.TRAINING_PRIORITY,  # a member of the job's gang
            "tolerations": [labels.gpu_toleration()],
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "launcher",
                "image": image,
                "command": ["/bin/bash", "-c"],
                "args": [command],
                "env": env + [{"name": "OMPI_ALLOW_RUN_AS_ROOT", "value": "1"},
                              {"name": "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "value": "1"}],
                "resources": {"requests": res, "limits": dict(res)},
                "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }


def mpirun_command(env: list[dict], np: int | str, per_node: int, program: list[str]
                   ) -> str:
    """mpirun over the workers (the operator's kubectl-exec agent), forwarding NCCL's env."""
    forward = " ".join(f"-x {e['name']}" for e in env)
    return (f"mpirun --allow-run-as-root -np {np} -npernode {per_node} --bind-to none "
            f"-x LD_LIBRARY_PATH -x PATH {forward} " + shlex.join(program))
