"""Training jobs rendered from the model (pure): a PyTorchJob (torchrun) or an MPIJob
(mpirun), gang-scheduled by Volcano, on whole GPU nodes, one SU when the job fits in one."""

from __future__ import annotations

from typing import Any

from components.model.cluster import Cluster, TrainingJob, mount_root
from components.planning.storage import claim_name
from components.planning.workloads import (
    claim_volumes,
    gpu_pod_spec,
    mpi_launcher,
    mpirun_command,
    nccl_env,
    rdma_metadata,
    rdma_security,
    run_policy,
    shm_volume,
    topology_affinity,
    whole_node_resources,
)


def _job_labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "training"}


def _training_args(job: TrainingJob) -> list[str]:
    return [
        job.script,
        f"--model={job.model}",
        f"--tensor-parallel-size={job.tensor_parallel}",
        f"--pipeline-parallel-size={job.pipeline_parallel}",
        f"--data-parallel-size={job.data_parallel}",
        f"--batch-size-per-gpu={job.micro_batch_per_gpu}",
        f"--sequence-length={job.sequence_length}",
        f"--{job.precision}",
        f"--dataset={job.dataset_path}",
        f"--output={job.checkpoint_path}",
    ]


def _training_mounts(job: TrainingJob) -> list[dict]:
    return [
        {"name": "dataset", "mountPath": mount_root(job.dataset_path), "readOnly": True},
        {"name": "checkpoints", "mountPath": mount_root(job.checkpoint_path)},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]


def _training_volumes(job: TrainingJob) -> list[dict]:
    return claim_volumes({"dataset": claim_name(job.dataset),
                    "checkpoints": claim_name(job.checkpoints)}) + [shm_volume(job.shm_size)]


def _training_template(cluster: Cluster, job: TrainingJob, container: dict) -> dict:
    labels = _job_labels(job.name)
    return {
        "metadata": rdma_metadata(labels),
        "spec": gpu_pod_spec(cluster, [container], _training_volumes(job),
                              topology_affinity(cluster, labels, job.nodes, job.topology)),
    }


def gang_restarts_budget(job: TrainingJob) -> int:
    """runPolicy.backoffLimit for `backoffLimit` restarts of the whole gang. The Training
    Operator fails a job once the restarts of its running pods' containers add up to the
    limit (PastBackoffLimit, pkg/controller.v1/common), and one restart of the gang restarts
    every worker: the c10d store lives in worker 0's torchrun agent, so when worker 0 goes
    every other agent loses it and exits, and an agent that gives up takes the group down.
    A limit of `backoffLimit` alone would fail a 4-node job on worker 0's first restart."""
    return job.backoff_limit * job.nodes


def pytorchjob(cluster: Cluster, job: TrainingJob) -> dict:
    container = {
        "name": "pytorch",  # the Training Operator looks for this container name
        "image": job.image,
        # torchrun takes nnodes, nproc-per-node, node rank and the rendezvous (master address
        # and port, or c10d endpoint when elastic) from the operator's PET_* variables.
        "command": ["torchrun"],
        "args": _training_args(job),
        "env": nccl_env(cluster),
        "resources": whole_node_resources(cluster, job.gpus_per_node, job.cpu, job.memory),
        "securityContext": rdma_security(),
        "volumeMounts": _training_mounts(job),
    }
    template = _training_template(cluster, job, container)
    # torchrun's elastic agent with a c10d rendezvous restarts the whole worker group when any
    # worker fails or a node leaves or rejoins, so the gang restarts as a unit; with a static
    # rendezvous (MASTER_ADDR/RANK) a pod restarted alone leaves its peers hung in NCCL. A
    # fixed-size job is the elastic case with minReplicas = maxReplicas.
    min_nodes = job.elastic_min_nodes or job.nodes
    spec: dict[str, Any] = {
        "nprocPerNode": str(job.gpus_per_node),
        "runPolicy": run_policy(gang_restarts_budget(job), min_nodes),
        "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": min_nodes,
                          "maxReplicas": job.nodes, "maxRestarts": job.backoff_limit},
        "pytorchReplicaSpecs": {"Worker": {"replicas": job.nodes, "restartPolicy": "OnFailure",
                                           "template": template}},
    }
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": job.name, "namespace": job.namespace}, "spec": spec}


def mpijob(cluster: Cluster, job: TrainingJob) -> dict:
    """A DeepSpeed-style launcher job: one mpirun launcher plus one whole-node pod per node."""
    env = nccl_env(cluster)
    ranks = job.nodes * job.gpus_per_node
    worker = {
        "name": "worker",
        "image": job.image,
        "command": ["sleep", "infinity"],  # ranks are started by mpirun through kubectl exec
        "env": env,
        "resources": whole_node_resources(cluster, job.gpus_per_node, job.cpu, job.memory),
        "securityContext": rdma_security(),
        "volumeMounts": _training_mounts(job),
    }
    program = ["python3", *_training_args(job)]
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "MPIJob",
        "metadata": {"name": job.name, "namespace": job.namespace},
        "spec": {
            "slotsPerWorker": job.gpus_per_node,
            # Gang: the launcher and every worker, or nothing.
            "runPolicy": run_policy(job.backoff_limit, job.nodes + 1),
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "OnFailure",
                             "template": mpi_launcher(job.image,
                                                   mpirun_command(env, ranks, job.gpus_per_node,
                                                           program), env)},
                "Worker": {"replicas": job.nodes, "restartPolicy": "OnFailure",
                           "template": _training_template(cluster, job, worker)},
            },
        },
    }


def training_objects(cluster: Cluster, job: TrainingJob) -> list[dict]:
    return [mpijob(cluster, job) if job.launcher == "mpijob" else pytorchjob(cluster, job)]
