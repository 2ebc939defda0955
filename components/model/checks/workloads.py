"""Training jobs and inference services: their mounts and scripts, the NCCL test, what the GPUs can
hold, unique names."""

from __future__ import annotations

from collections.abc import Iterator

from components.model.checks.common import duplicates
from components.model.cluster import Cluster, mount_root
from components.model.fields import Problem

# nccl-tests busbw below half of the fabric's line rate: a fabric that slow is broken (a rail
# down, PCIe or GPUDirect RDMA off), not slow (docs/acceptance.md).
MIN_NCCL_EFFICIENCY = 0.5


# Mounting a volume over these hides what the container image needs to run.
_SYSTEM_DIRS = frozenset({"", "bin", "boot", "dev", "etc", "lib", "lib64", "proc", "run", "sbin",
                          "sys", "usr", "var"})


def training_jobs(c: Cluster) -> Iterator[Problem]:
    """Training jobs: their file systems, whole nodes, parallelism adding up."""
    serving_nodes = c.in_service_nodes
    gpus = c.gpu_nodes.template.gpu.count
    for i, j in enumerate(c.workloads.training):
        path = f"workloads.training[{i}]"
        ds, ck = c.lustre(j.dataset), c.lustre(j.checkpoints)
        if ds is None or ds.purpose != "dataset":
            yield Problem(f"{path}.dataset", j.dataset, "is not a storage.lustre dataset",
                          "name a storage.lustre entry with purpose: dataset")
        if ck is None or ck.purpose != "checkpoints":
            yield Problem(f"{path}.checkpoints", j.checkpoints,
                          "is not a storage.lustre checkpoints file system",
                          "name a storage.lustre entry with purpose: checkpoints")
        if j.nodes > len(serving_nodes):
            yield Problem(f"{path}.nodes", j.nodes,
                          f"more nodes than the {len(serving_nodes)} GPU nodes in service",
                          "lower nodes or add GPU nodes")
        if j.gpus_per_node != gpus:
            yield Problem(f"{path}.gpusPerNode", j.gpus_per_node,
                          f"multi-node training takes whole nodes of {gpus} GPUs",
                          f"set gpusPerNode: {gpus}")
        world = j.nodes * j.gpus_per_node
        if j.tensor_parallel * j.pipeline_parallel * j.data_parallel != world:
            yield Problem(f"{path}.dataParallel", j.data_parallel,
                          f"TP {j.tensor_parallel} x PP {j.pipeline_parallel} x DP "
                          f"{j.data_parallel} != {world} GPUs ({j.nodes} nodes x "
                          f"{j.gpus_per_node})",
                          f"make tensorParallel x pipelineParallel x dataParallel = {world}")
        if j.tensor_parallel > j.gpus_per_node:
            yield Problem(f"{path}.tensorParallel", j.tensor_parallel,
                          "tensor parallelism crosses nodes (it needs NVLink bandwidth)",
                          f"keep tensorParallel <= {j.gpus_per_node}; use pipeline parallelism "
                          "across nodes")
        if j.elastic_min_nodes is not None and j.elastic_min_nodes > j.nodes:
            yield Problem(f"{path}.elasticMinNodes", j.elastic_min_nodes, "exceeds nodes",
                          "set elasticMinNodes <= nodes")
        if j.launcher == "mpijob" and j.elastic_min_nodes is not None \
                and j.elastic_min_nodes < j.nodes:
            yield Problem(f"{path}.elasticMinNodes", j.elastic_min_nodes,
                          "an MPIJob has a fixed world size (mpirun -np)",
                          "drop elasticMinNodes or use launcher: pytorchjob")


def checkpoint_problems(c: Cluster) -> Iterator[Problem]:
    """Checkpoints must be writable, on the checkpoint file system, and mounted where nothing
    else is: a job that cannot write them loses every hour since the last good one."""
    for i, fs in enumerate(c.storage.lustre):
        if fs.purpose == "checkpoints" and "ro" in fs.mount_options:
            yield Problem(f"storage.lustre[{i}].mountOptions", list(fs.mount_options),
                          "mounts the checkpoint file system read-only: every checkpoint "
                          "write fails", "drop ro (datasets and weights are mounted read-only "
                          "by their claims already)")
    for i, j in enumerate(c.workloads.training):
        path = f"workloads.training[{i}]"
        for key, value in (("checkpointPath", j.checkpoint_path),
                           ("datasetPath", j.dataset_path)):
            parts = value.split("/")
            if not value.startswith("/") or ".." in parts or "." in parts or "//" in value:
                yield Problem(f"{path}.{key}", value,
                              "is not a normalised absolute path: it would resolve outside "
                              "the volume mounted for it", "write an absolute path such as "
                              + ("/checkpoints/<job>" if key == "checkpointPath"
                                 else "/data/<set>"))
            elif mount_root(value).strip("/") in _SYSTEM_DIRS:
                yield Problem(f"{path}.{key}", value,
                              f"would mount the volume over the image's {mount_root(value)}",
                              "use a directory of its own, e.g. "
                              + ("/checkpoints/<job>" if key == "checkpointPath"
                                 else "/data/<set>"))
        if mount_root(j.checkpoint_path) == mount_root(j.dataset_path):
            yield Problem(f"{path}.checkpointPath", j.checkpoint_path,
                          f"is outside the checkpoint mount: {mount_root(j.dataset_path)} is "
                          "where the dataset is mounted, read-only",
                          "put checkpoints under a mount of their own, e.g. /checkpoints/"
                          f"{j.name}")


# Images that carry no training script of the cluster's own: the script must come from a
# mounted file system (NGC's PyTorch container has only NVIDIA's examples under /workspace).
STOCK_TRAINING_IMAGES = ("nvcr.io/nvidia/pytorch:",)


def script_problems(c: Cluster) -> Iterator[Problem]:
    for i, j in enumerate(c.workloads.training):
        mounts = sorted({mount_root(j.dataset_path), mount_root(j.checkpoint_path)})
        if j.image.startswith(STOCK_TRAINING_IMAGES) and mount_root(j.script) not in mounts:
            yield Problem(f"workloads.training[{i}].script", j.script,
                          f"is in neither the stock image {j.image} nor a file system the job "
                          f"mounts ({', '.join(mounts)}): torchrun would exit with "
                          "'No such file or directory' on every node",
                          f"put the script on the dataset file system (e.g. {mounts[-1]}/code/"
                          "train.py) or set image to a build of your own that contains it")


def capacity(c: Cluster) -> Iterator[Problem]:
    """Training and serving at their maximum fit the nodes in service."""
    yield from _capacity_problems(c, len(c.in_service_nodes))


def _capacity_problems(c: Cluster, nodes: int) -> Iterator[Problem]:
    """Training and serving run at once after the acceptance test: training takes whole nodes,
    each serving replica a node of its own (anti-affinity; rollouts replace in place)."""
    training = c.workloads.training
    serving = c.workloads.inference
    train_nodes = sum(j.nodes for j in training)
    gpus = c.gpu_nodes.template.gpu.count
    # A job or service that alone does not fit is reported by its own check.
    if not serving or any(j.nodes > nodes for j in training) or any(
            x.autoscaling.max_replicas * x.gpus_per_pod > nodes * gpus for x in serving):
        return
    widest = max(range(len(serving)), key=lambda i: serving[i].autoscaling.max_replicas)
    s = serving[widest]
    need = s.autoscaling.max_replicas
    if train_nodes + need > nodes:
        yield Problem(f"workloads.inference[{widest}].autoscaling.maxReplicas",
                      s.autoscaling.max_replicas,
                      f"{s.name} needs {need} nodes of its own (one replica per node) beside "
                      f"the {train_nodes} nodes training takes: {train_nodes + need} > {nodes} "
                      "GPU nodes, so its last replicas would wait forever",
                      f"lower maxReplicas to {max(nodes - train_nodes, 0)} or train on "
                      "fewer nodes")
        return
    train_gpus = sum(j.nodes * j.gpus_per_node for j in training)
    serve_gpus = sum(x.autoscaling.max_replicas * x.gpus_per_pod for x in serving)
    if train_gpus + serve_gpus > nodes * gpus:
        yield Problem(f"workloads.inference[{widest}].autoscaling.maxReplicas",
                      s.autoscaling.max_replicas,
                      f"training ({train_gpus} GPUs) and serving at its maximum "
                      f"({serve_gpus} GPUs) exceed the cluster's {nodes * gpus} GPUs",
                      "lower maxReplicas or train on fewer nodes")


def nccl_test(c: Cluster) -> Iterator[Problem]:
    """The acceptance test: a meaningful floor, GPUDirect RDMA, nodes and network that exist."""
    serving_nodes = c.in_service_nodes
    nt = c.workloads.nccl_test
    if nt is not None:
        if nt.min_efficiency < MIN_NCCL_EFFICIENCY:
            yield Problem("workloads.ncclTest.minEfficiency", nt.min_efficiency,
                          f"below {MIN_NCCL_EFFICIENCY:.0%} of the fabric's bus bandwidth, "
                          "which only a broken fabric reaches: a degraded fabric would pass "
                          "the acceptance gate",
                          f"use {MIN_NCCL_EFFICIENCY} or more (1.0: 46 GB/s per NDR rail, "
                          "docs/acceptance.md)")
        if nt.gate and not c.platform.gpu_operator.gpudirect_rdma:
            yield Problem("platform.gpuOperator.gpudirectRdma", False,
                          "the NCCL acceptance gate requires GPUDirect RDMA (NET/IB .../GDRDMA "
                          "in NCCL's log) and would fail every `pulumi up`",
                          "keep gpudirectRdma: true; or, outside production, set "
                          "workloads.ncclTest.gate: false")
        if nt.nodes is not None and nt.nodes > len(serving_nodes):
            yield Problem("workloads.ncclTest.nodes", nt.nodes,
                          f"more nodes than the {len(serving_nodes)} GPU nodes in service",
                          "lower nodes or leave it unset to test every GPU node")
        if nt.namespace not in {j.namespace for j in c.workloads.training}:
            yield Problem("workloads.ncclTest.namespace", nt.namespace,
                          "has no RDMA network attachment (only training namespaces get one)",
                          "use the namespace of a workloads.training job")


def inference_services(c: Cluster) -> Iterator[Problem]:
    """Inference: weights, sharding, replicas and GPUs that fit."""
    gpus = c.gpu_nodes.template.gpu.count
    for i, s in enumerate(c.workloads.inference):
        path = f"workloads.inference[{i}]"
        w = c.lustre(s.weights)
        if w is None or w.purpose != "model-weights":
            yield Problem(f"{path}.weights", s.weights, "is not a storage.lustre model-weights "
                          "file system", "name a storage.lustre entry with purpose: model-weights")
        if s.gpus_per_pod % s.tensor_parallel:
            yield Problem(f"{path}.tensorParallel", s.tensor_parallel,
                          f"does not divide gpusPerPod {s.gpus_per_pod}",
                          "vLLM runs gpusPerPod / tensorParallel engines of tensorParallel GPUs "
                          "each in the pod: pick a tensorParallel that divides gpusPerPod")
        a = s.autoscaling
        if a.min_replicas > a.max_replicas:
            yield Problem(f"{path}.autoscaling.minReplicas", a.min_replicas,
                          f"above maxReplicas {a.max_replicas}", "set minReplicas <= maxReplicas")
        if c.environment == "production" and a.min_replicas < 2:
            yield Problem(f"{path}.autoscaling.minReplicas", a.min_replicas,
                          "one replica in production means downtime on every node drain",
                          "keep at least 2 replicas in production")
        if s.gpus_per_pod > gpus:
            yield Problem(f"{path}.gpusPerPod", s.gpus_per_pod, f"nodes have {gpus} GPUs",
                          f"use at most {gpus} GPUs per pod")
        elif s.gpus_per_pod < gpus:
            # One replica per node (anti-affinity), and training and the NCCL test take whole
            # nodes: nothing else would ever use the rest of a serving node's GPUs.
            yield Problem(f"{path}.gpusPerPod", s.gpus_per_pod,
                          f"one replica per node leaves {gpus - s.gpus_per_pod} of each "
                          f"serving node's {gpus} GPUs idle",
                          f"set gpusPerPod to {gpus}: vLLM then serves with {gpus} GPUs / "
                          "tensorParallel engines side by side in the pod (data parallel)")
        if a.max_replicas * s.gpus_per_pod > c.total_gpus:
            yield Problem(f"{path}.autoscaling.maxReplicas", a.max_replicas,
                          f"{a.max_replicas} x {s.gpus_per_pod} GPUs exceeds the cluster's "
                          f"{c.total_gpus}", "lower maxReplicas or gpusPerPod")


def unique_names(c: Cluster) -> Iterator[Problem]:
    """Workload and file system names are unique."""
    for path, value, first in duplicates(
        [(f"workloads.training[{i}].name", (j.namespace, j.name))
         for i, j in enumerate(c.workloads.training)]
        + [(f"workloads.inference[{i}].name", (s.namespace, s.name))
           for i, s in enumerate(c.workloads.inference)]
    ):
        yield Problem(path, "/".join(value), f"workload name already used at {first}",
                      "give each workload its own name")
    for path, value, first in duplicates([(f"storage.lustre[{i}].name", fs.name)
                                           for i, fs in enumerate(c.storage.lustre)]):
        yield Problem(path, value, f"file system name already used at {first}",
                      "give each Lustre file system its own name")
