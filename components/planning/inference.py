"""Inference services rendered from the model (pure): vLLM's OpenAI server as a Deployment
under the restricted Pod Security profile, with its Service, TLS Ingress, API key, PDB, HPA and
PodMonitor."""

from __future__ import annotations

from components.model.cluster import Cluster, InferenceService, mount_root
from components.planning import namespaces
from components.planning.labels import gpu_toleration
from components.planning.script_files import template
from components.planning.storage import claim_name
from components.planning.workloads import (
    VOLCANO,
    claim_volumes,
    shm_volume,
    tested_nodes_only,
)


def _restricted_security() -> dict:
    return {"allowPrivilegeEscalation": False, "privileged": False,
            "runAsNonRoot": True, "runAsUser": VLLM_UID, "runAsGroup": VLLM_UID,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}


INFERENCE_QUEUE = "inference"
VLLM_PORT = 8000
VLLM_UID = 1000



API_KEY_FIELD = "api-key"


def api_key_secret(svc: InferenceService) -> str:
    return f"{svc.name}-api-key"


def _from_namespace(name: str) -> dict:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def api_key_script(svc: InferenceService) -> str:
    """On the control plane, before the service: its API key Secret, minted there once and
    kept only in the cluster (never in Pulumi state, a log or a command line)."""
    return template("inference/api-key.sh", service=svc.name, namespace=svc.namespace,
                    secret=api_key_secret(svc), field=API_KEY_FIELD)


def api_key_delete_command(svc: InferenceService) -> str:
    return (f"sudo kubectl --kubeconfig /etc/kubernetes/admin.conf -n {svc.namespace} "
            f"delete secret {api_key_secret(svc)} --ignore-not-found")


def inference_objects(cluster: Cluster, svc: InferenceService) -> list[dict]:
    """The vLLM server and what serves, guards, scales and watches it."""
    labels = {"app.kubernetes.io/name": svc.name, "app.kubernetes.io/component": "inference"}
    return [_deployment(cluster, svc, labels), _service(svc, labels), _ingress(svc, labels),
            _disruption_budget(svc, labels), _client_policy(cluster, svc, labels),
            _pod_monitor(svc, labels), _autoscaler(svc, labels)]


def _data_parallel(svc: InferenceService) -> list[str]:
    """A pod wider than one engine runs several, each of tensorParallel GPUs, behind vLLM's
    one API server, which balances requests between them (vLLM's data parallel deployment)."""
    engines = svc.gpus_per_pod // svc.tensor_parallel
    return [f"--data-parallel-size={engines}"] if engines > 1 else []


def _container(svc: InferenceService) -> dict:
    """vLLM's OpenAI server, non-root, probed on /health, the weights mounted read-only."""
    res = {"nvidia.com/gpu": str(svc.gpus_per_pod), "cpu": str(svc.cpu), "memory": svc.memory}
    return {
        "name": "vllm",
        "image": svc.image,
        "args": [
            f"--model={svc.model_path}",
            f"--served-model-name={svc.served_model_name}",
            f"--tensor-parallel-size={svc.tensor_parallel}",
            *_data_parallel(svc),
            f"--max-model-len={svc.max_model_len}",
            f"--gpu-memory-utilization={svc.gpu_memory_utilization}",
            "--dtype=bfloat16",
            f"--port={VLLM_PORT}",
        ],
        # Non-root: caches (torch.compile, Triton, Hugging Face) go to a writable emptyDir.
        "env": [{"name": "HOME", "value": "/cache"},
                {"name": "XDG_CACHE_HOME", "value": "/cache"},
                {"name": "HF_HOME", "value": "/cache/huggingface"},
                {"name": "VLLM_CACHE_ROOT", "value": "/cache/vllm"},
                {"name": "HF_HUB_OFFLINE", "value": "1"},
                # vLLM requires it as a bearer token on every /v1 route (its auth middleware
                # leaves /health and /metrics open for the probes and Prometheus).
                {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {
                    "name": api_key_secret(svc), "key": API_KEY_FIELD}}}],
        "ports": [{"name": "http", "containerPort": VLLM_PORT}],
        "resources": {"requests": res, "limits": dict(res)},
        # vLLM serves HTTP only once the weights are loaded: /health answers 200 from then on
        # while the engine is alive (the /v1 routes need the API key, which a probe has not).
        # A 70B model (~140 GB bf16 from Lustre, plus CUDA-graph capture) takes several
        # minutes: the startup probe allows 30 min before the liveness probe may restart
        # anything.
        "startupProbe": {"httpGet": {"path": "/health", "port": "http"},
                         "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 180},
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"},
                           "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"},
                          "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 4},
        "securityContext": _restricted_security(),
        "volumeMounts": [
            {"name": "weights", "mountPath": mount_root(svc.model_path), "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "cache", "mountPath": "/cache"},
        ],
    }


def _affinity(cluster: Cluster, labels: dict[str, str]) -> dict:
    """One replica per node: a node lost or drained takes one replica, never the service
    (Volcano's binpack would otherwise stack replicas on the fullest node); with an acceptance
    gate, only on nodes that passed it."""
    spread = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]}}
    return tested_nodes_only(spread) if cluster.acceptance_gated else spread


def _pod_spec(cluster: Cluster, svc: InferenceService, labels: dict[str, str]) -> dict:
    """On a GPU node through Volcano, one replica per node."""
    return {
        "schedulerName": VOLCANO,  # one scheduler for every GPU pod; the inference queue
        "priorityClassName": namespaces.INFERENCE_PRIORITY,
        "nodeSelector": {"nvidia.com/gpu.product": cluster.gpu_nodes.template.gpu.product_label},
        "tolerations": [gpu_toleration()],
        "securityContext": {"runAsNonRoot": True, "runAsUser": VLLM_UID,
                            "runAsGroup": VLLM_UID, "fsGroup": VLLM_UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 120,
        "affinity": _affinity(cluster, labels),
        "containers": [_container(svc)],
        "volumes": claim_volumes({"weights": claim_name(svc.weights)}) + [
            shm_volume(svc.shm_size), {"name": "cache", "emptyDir": {"sizeLimit": "64Gi"}}],
    }


def _deployment(cluster: Cluster, svc: InferenceService, labels: dict[str, str]) -> dict:
    """The server's pods: rolled in place, one node at a time."""
    ns = svc.namespace
    a = svc.autoscaling
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
            "spec": {
                "replicas": a.min_replicas,
                "selector": {"matchLabels": labels},
                # Replace in place: with one replica per node, a surge pod would need a spare
                # GPU node, and a rollout at maxReplicas would wait for one forever.
                "strategy": {"type": "RollingUpdate",
                             "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                "template": {
                    "metadata": {"labels": labels,
                                 "annotations": {"scheduling.volcano.sh/queue-name":
                                                 INFERENCE_QUEUE}},
                    "spec": _pod_spec(cluster, svc, labels),
                },
            }}


def _service(svc: InferenceService, labels: dict[str, str]) -> dict:
    """The server inside the cluster."""
    ns = svc.namespace
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
            "spec": {"type": "ClusterIP", "selector": labels,
                     "ports": [{"name": "http", "port": VLLM_PORT, "targetPort": "http"}]}}


def _ingress(svc: InferenceService, labels: dict[str, str]) -> dict:
    """The OpenAI API outside, over TLS."""
    ns = svc.namespace
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": svc.name, "namespace": ns, "labels": labels,
                         "annotations": {
                             "cert-manager.io/cluster-issuer": "cluster-ca",
                             # Long generations stream for minutes.
                             "nginx.ingress.kubernetes.io/proxy-read-timeout": "300",
                             "nginx.ingress.kubernetes.io/proxy-send-timeout": "300"}},
            "spec": {"ingressClassName": "nginx",
                     "tls": [{"hosts": [svc.host], "secretName": f"{svc.name}-tls"}],
                     # The OpenAI API only: /metrics, /health, /docs and /tokenize stay inside.
                     "rules": [{"host": svc.host, "http": {"paths": [{
                         "path": "/v1", "pathType": "Prefix",
                         "backend": {"service": {"name": svc.name,
                                                 "port": {"number": VLLM_PORT}}}}]}}]}}


def _disruption_budget(svc: InferenceService, labels: dict[str, str]) -> dict:
    """A drain takes one replica at a time."""
    ns = svc.namespace
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}}


def _client_policy(cluster: Cluster, svc: InferenceService, labels: dict[str, str]) -> dict:
    """Who may reach the server past the namespace's default deny."""
    ns = svc.namespace
    # The ingress controller (the API) and Prometheus (/metrics) reach the server's port,
    # nothing else does.
    clients = [_from_namespace(cluster.platform.ingress_nginx.namespace),
               _from_namespace(cluster.platform.prometheus.namespace)]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"{svc.name}-clients", "namespace": ns, "labels": labels},
            "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"],
                     "ingress": [{"from": clients,
                                  "ports": [{"protocol": "TCP", "port": "http"}]}]}}


def _pod_monitor(svc: InferenceService, labels: dict[str, str]) -> dict:
    """Prometheus scrapes the server's metrics."""
    ns = svc.namespace
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
            # vLLM exposes Prometheus metrics (vllm:num_requests_waiting, ...) on /metrics.
            "spec": {"selector": {"matchLabels": labels},
                     "podMetricsEndpoints": [{"port": "http", "path": "/metrics",
                                              "interval": "15s"}]}}


def _autoscaler(svc: InferenceService, labels: dict[str, str]) -> dict:
    """Replicas follow the queue of waiting requests."""
    ns = svc.namespace
    a = svc.autoscaling
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                   "name": svc.name},
                "minReplicas": a.min_replicas,
                "maxReplicas": a.max_replicas,
                # vllm:num_requests_waiting, per pod through the Prometheus adapter's rule.
                "metrics": [{"type": "Pods", "pods": {
                    "metric": {"name": a.metric},
                    "target": {"type": "AverageValue", "averageValue": str(a.target_average)}}}],
                "behavior": {
                    "scaleUp": {"stabilizationWindowSeconds": a.scale_up_window_seconds,
                                "policies": [{"type": "Pods", "value": a.scale_up_pods,
                                              "periodSeconds": a.scale_up_period_seconds}]},
                    "scaleDown": {"stabilizationWindowSeconds": a.scale_down_window_seconds,
                                  "policies": [{"type": "Pods", "value": a.scale_down_pods,
                                                "periodSeconds": a.scale_down_period_seconds}]},
                },
            }}
