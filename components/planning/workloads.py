"""Workload objects rendered from the model (pure): training jobs and inference services.

NCCL's environment is derived from the inventory (the compute HCAs of the nodes) and from the
platform layer (the interface the RDMA network attachment creates in the pod), so a job cannot
name an interface or HCA that is not there.
"""

from __future__ import annotations

from typing import Any

from components.config import Cluster, InferenceService, TrainingJob
from components.planning import platform
from components.planning.storage import claim_name

RDMA_REASON = "IPC_LOCK: RDMA pins (locks) GPU and host memory for the HCAs' DMA"


def compute_hcas(cluster: Cluster) -> list[str]:
    """Compute HCAs in rail order, the union over nodes (names may differ between nodes)."""
    by_rail: dict[int, list[str]] = {}
    for node in cluster.nodes:
        for rail in node.rails:
            names = by_rail.setdefault(rail.index, [])
            if rail.hca not in names:
                names.append(rail.hca)
    return [h for _, names in sorted(by_rail.items()) for h in sorted(names)]


def nccl_env(cluster: Cluster) -> list[dict[str, str]]:
    # '=' makes NCCL match HCA names exactly: plain 'mlx5_1' would also select mlx5_10, mlx5_11.
    hcas = "=" + ",".join(f"{h}:1" for h in compute_hcas(cluster))
    env = {
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": hcas,
        "NCCL_SOCKET_IFNAME": platform.POD_RDMA_INTERFACE,
        # GPU and HCA of a rail share a PCIe switch on DGX-class servers.
        "NCCL_NET_GDR_LEVEL": "PXB",
        "NCCL_DEBUG": "WARN" if cluster.environment == "production" else "INFO",
    }
    return [{"name": k, "value": v} for k, v in env.items()]


def _volumes(job_claims: dict[str, str], shm: str) -> list[dict]:
    vols: list[dict[str, Any]] = [
        {"name": name, "persistentVolumeClaim": {"claimName": claim}}
        for name, claim in job_claims.items()
    ]
    # /dev/shm defaults to 64 MiB in a container; NCCL and data loaders need far more.
    vols.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}})
    return vols


def _rdma_security() -> dict:
    return {"allowPrivilegeEscalation": False, "privileged": False,
            "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}}


def _trainer_container(cluster: Cluster, job: TrainingJob) -> dict:
    resources = {
        "nvidia.com/gpu": str(job.gpus_per_node),
        platform.rdma_resource(cluster): "1",
        "cpu": str(job.cpu),
        "memory": job.memory,
    }
    args = [
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
    return {
        "name": "pytorch",  # the Training Operator looks for this container name
        "image": job.image,
        "command": ["torchrun"],  # nnodes, nproc and rendezvous come from the operator's PET_*
        "args": args,
        "env": nccl_env(cluster),
        "resources": {"requests": resources, "limits": resources},
        "securityContext": _rdma_security(),
        "volumeMounts": [
            {"name": "dataset", "mountPath": _mount_root(job.dataset_path), "readOnly": True},
            {"name": "checkpoints", "mountPath": _mount_root(job.checkpoint_path)},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }


def _mount_root(path: str) -> str:
    return "/" + path.strip("/").split("/")[0]


def _pod_template(cluster: Cluster, job: TrainingJob) -> dict:
    return {
        "metadata": {
            "labels": {"app.kubernetes.io/name": job.name},
            "annotations": {"k8s.v1.cni.cncf.io/networks": platform.RDMA_NETWORK,
                            "gpucluster.io/capabilities": RDMA_REASON},
        },
        "spec": {
            "schedulerName": "volcano",
            "nodeSelector": {"nvidia.com/gpu.product":
                             cluster.gpu_nodes.template.gpu.product_label},
            "tolerations": [platform.gpu_toleration()],
            "containers": [_trainer_container(cluster, job)],
            "volumes": _volumes({"dataset": claim_name(job.dataset),
                                 "checkpoints": claim_name(job.checkpoints)}, job.shm_size),
        },
    }


def pytorchjob(cluster: Cluster, job: TrainingJob) -> dict:
    template = _pod_template(cluster, job)
    elastic = job.elastic_min_nodes is not None and job.elastic_min_nodes < job.nodes
    if elastic:
        replicas = {"Worker": {"replicas": job.nodes, "restartPolicy": "OnFailure",
                               "template": template}}
    else:
        replicas = {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
            **({"Worker": {"replicas": job.nodes - 1, "restartPolicy": "OnFailure",
                           "template": template}} if job.nodes > 1 else {}),
        }
    spec: dict[str, Any] = {
        "nprocPerNode": str(job.gpus_per_node),
        "runPolicy": {
            "backoffLimit": job.backoff_limit,
            "cleanPodPolicy": "None",
            # Gang scheduling: Volcano starts all pods or none.
            "schedulingPolicy": {"minAvailable": (job.elastic_min_nodes if elastic
                                                  else job.nodes),
                                 "queue": "training"},
        },
        "pytorchReplicaSpecs": replicas,
    }
    if elastic:
        spec["elasticPolicy"] = {"rdzvBackend": "c10d", "minReplicas": job.elastic_min_nodes,
                                 "maxReplicas": job.nodes, "maxRestarts": job.backoff_limit}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job.name, "namespace": job.namespace},
        "spec": spec,
    }


def inference_objects(cluster: Cluster, svc: InferenceService) -> list[dict]:
    labels = {"app.kubernetes.io/name": svc.name}
    ns = svc.namespace
    resources = {"nvidia.com/gpu": str(svc.gpus_per_pod), "cpu": str(svc.cpu),
                 "memory": svc.memory}
    port = 8000
    container = {
        "name": "vllm",
        "image": svc.image,
        "args": [
            f"--model={svc.model_path}",
            f"--served-model-name={svc.served_model_name}",
            f"--tensor-parallel-size={svc.tensor_parallel}",
            f"--max-model-len={svc.max_model_len}",
            f"--gpu-memory-utilization={svc.gpu_memory_utilization}",
            "--dtype=bfloat16",
            f"--port={port}",
        ],
        "ports": [{"name": "http", "containerPort": port}],
        "resources": {"requests": resources, "limits": resources},
        # A 70B model takes minutes to load: the startup probe allows up to 30 min before the
        # liveness probe may restart anything.
        "startupProbe": {"httpGet": {"path": "/health", "port": "http"},
                         "periodSeconds": 10, "failureThreshold": 180},
        "readinessProbe": {"httpGet": {"path": "/v1/models", "port": "http"},
                           "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"},
                          "periodSeconds": 30, "failureThreshold": 3},
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [
            {"name": "weights", "mountPath": _mount_root(svc.model_path), "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    a = svc.autoscaling
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
         "spec": {
             "replicas": a.min_replicas,
             "selector": {"matchLabels": labels},
             "strategy": {"type": "RollingUpdate",
                          "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
             "template": {
                 "metadata": {"labels": labels},
                 "spec": {
                     "nodeSelector": {"nvidia.com/gpu.product":
                                      cluster.gpu_nodes.template.gpu.product_label},
                     "tolerations": [platform.gpu_toleration()],
                     "terminationGracePeriodSeconds": 120,
                     "containers": [container],
                     "volumes": _volumes({"weights": claim_name(svc.weights)}, svc.shm_size),
                 },
             },
         }},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
         "spec": {"type": "ClusterIP", "selector": labels,
                  "ports": [{"name": "http", "port": port, "targetPort": "http"}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
         "metadata": {"name": svc.name, "namespace": ns,
                      "annotations": {
                          "cert-manager.io/cluster-issuer": "cluster-ca",
                          "nginx.ingress.kubernetes.io/proxy-read-timeout": "300",
                          "nginx.ingress.kubernetes.io/proxy-send-timeout": "300"}},
         "spec": {"ingressClassName": "nginx",
                  "tls": [{"hosts": [svc.host], "secretName": f"{svc.name}-tls"}],
                  "rules": [{"host": svc.host, "http": {"paths": [{
                      "path": "/", "pathType": "Prefix",
                      "backend": {"service": {"name": svc.name,
                                              "port": {"number": port}}}}]}}]}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": svc.name, "namespace": ns},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}},
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
         "metadata": {"name": svc.name, "namespace": ns},
         "spec": {
             "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                "name": svc.name},
             "minReplicas": a.min_replicas,
             "maxReplicas": a.max_replicas,
             "metrics": [{"type": "Pods", "pods": {
                 "metric": {"name": a.metric},
                 "target": {"type": "AverageValue", "averageValue": str(a.target_average)}}}],
             "behavior": {
                 "scaleUp": {"stabilizationWindowSeconds": a.scale_up_window_seconds,
                             "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}]},
                 "scaleDown": {"stabilizationWindowSeconds": a.scale_down_window_seconds,
                               "policies": [{"type": "Pods", "value": 1,
                                             "periodSeconds": 300}]},
             },
         }},
    ]
