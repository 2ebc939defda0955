"""Platform objects rendered from the model (pure): Helm values, NicClusterPolicy, network
attachments, Volcano queues and HyperNodes.

The RDMA resource, the attachment names and the pod interface they create are defined once
here; the workload layer derives NCCL's environment from the same functions, so the two cannot
disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components.config import Chart, Cluster, GpuNode
from components.planning.kubeadm import GPU_TAINT, LABEL_PREFIX

# Images the Network Operator release deploys (its documented NicClusterPolicy example).
NETWORK_OPERATOR_IMAGES: dict[str, dict[str, str]] = {
    "26.4.1": {
        "repository": "nvcr.io/nvidia/mellanox",
        "doca_driver": "doca3.4.1-26.04-1.1.0.0-1",
        "components": "network-operator-v26.4.1",
    },
}

RDMA_NETWORK = "ib-rail0"  # the IPoIB attachment pods use for NCCL's bootstrap socket
POD_RDMA_INTERFACE = "net1"  # Multus names the first extra interface net1
CONNECTX7_DEVICE_ID = "1021"
MELLANOX_VENDOR = "15b3"


@dataclass(frozen=True)
class Release:
    """A Helm release: chart coordinates from the config plus rendered values."""

    name: str
    chart: Chart
    values: Mapping[str, Any]


def rdma_resource(cluster: Cluster) -> str:
    no = cluster.platform.network_operator
    return f"{no.rdma_resource_prefix}/{no.rdma_resource_name}"


def helm_releases(cluster: Cluster) -> list[Release]:
    p = cluster.platform
    gpu = p.gpu_operator
    k = cluster.kubernetes
    releases = [
        Release("calico", p.calico, {
            "installation": {
                "cni": {"type": "Calico"},
                "calicoNetwork": {
                    "bgp": "Disabled",
                    "ipPools": [{"cidr": str(k.pod_cidr), "encapsulation": "VXLAN",
                                 "natOutgoing": "Enabled", "nodeSelector": "all()"}],
                },
            },
        }),
        Release("network-operator", p.network_operator, {
            "nfd": {"enabled": True},
            "sriovNetworkOperator": {"enabled": False},
        }),
        Release("gpu-operator", gpu, {
            # Node Feature Discovery comes with the Network Operator; one instance only.
            "nfd": {"enabled": False},
            "driver": {
                "enabled": gpu.driver == "operator",
                "kernelModuleType": "open",  # DMA-BUF GPUDirect RDMA needs the open modules
                # DMA-BUF is the default GPUDirect path; nvidia-peermem only with a host MOFED.
                "rdma": {"enabled": gpu.gpudirect_rdma and p.network_operator.ofed == "host",
                         "useHostMofed": p.network_operator.ofed == "host"},
                **({"version": gpu.driver_version} if gpu.driver_version else {}),
            },
            "toolkit": {"enabled": True},
            "devicePlugin": {"enabled": True},
            "gfd": {"enabled": True},
            "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": True}},
            "migManager": {"enabled": gpu.mig_manager},
            "gds": {"enabled": gpu.gpudirect_storage},
        }),
        Release("volcano", p.volcano, {}),
        Release("metallb", p.metallb, {}),
        Release("cert-manager", p.cert_manager, {"crds": {"enabled": True}}),
        Release("ingress-nginx", p.ingress_nginx, {
            "controller": {"service": {"type": "LoadBalancer"},
                           "metrics": {"enabled": True}},
        }),
        Release("prometheus", p.prometheus, {
            "prometheus": {"prometheusSpec": {
                # Pick up ServiceMonitors/PodMonitors from every release, not only this one.
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "podMonitorSelectorNilUsesHelmValues": False,
            }},
        }),
        Release("prometheus-adapter", p.prometheus_adapter, {
            "prometheus": {"url": f"http://prometheus-kube-prometheus-prometheus."
                                  f"{p.prometheus.namespace}.svc", "port": 9090},
            "rules": {"default": False, "custom": adapter_rules(cluster)},
        }),
        Release("lustre-csi", p.lustre_csi, {}),
    ]
    return releases


def adapter_rules(cluster: Cluster) -> list[dict]:
    """Expose each inference autoscaling metric as a per-pod custom metric for the HPA."""
    metrics = sorted({s.autoscaling.metric for s in cluster.workloads.inference})
    return [
        {
            "seriesQuery": f'{{__name__=~"^{m.replace("_", ":", 1)}$|^{m}$",namespace!="",'
                           f'pod!=""}}',
            "resources": {"overrides": {"namespace": {"resource": "namespace"},
                                        "pod": {"resource": "pod"}}},
            "name": {"matches": ".*", "as": m},
            "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
        }
        for m in metrics
    ]


def nic_cluster_policy(cluster: Cluster) -> dict:
    no = cluster.platform.network_operator
    images = NETWORK_OPERATOR_IMAGES[no.version.lstrip("v")]
    repo, comp = images["repository"], images["components"]
    device_plugin_config = {
        "configList": [{
            "resourceName": no.rdma_resource_name,
            "resourcePrefix": no.rdma_resource_prefix,
            "rdmaHcaMax": 63,
            # Every ConnectX-7 on InfiniBand: the compute HCAs of all rails.
            "selectors": {"vendors": [MELLANOX_VENDOR], "deviceIDs": [CONNECTX7_DEVICE_ID],
                          "linkTypes": ["infiniband"]},
        }]
    }
    spec: dict[str, Any] = {
        "rdmaSharedDevicePlugin": {
            "image": "k8s-rdma-shared-dev-plugin", "repository": repo, "version": comp,
            "config": json.dumps(device_plugin_config, indent=2, sort_keys=True),
        },
        "secondaryNetwork": {
            "cniPlugins": {"image": "plugins", "repository": repo, "version": comp},
            "multus": {"image": "multus-cni", "repository": repo, "version": comp},
            "ipoib": {"image": "ipoib-cni", "repository": repo, "version": comp},
        },
        # NVIDIA's IPAM hands each node a block of the RDMA network (see ip_pool()).
        "nvIpam": {"image": "nvidia-k8s-ipam", "repository": repo, "version": comp,
                   "enableWebhook": False},
    }
    if no.ofed == "operator":
        spec["ofedDriver"] = {
            "image": "doca-driver", "repository": repo, "version": images["doca_driver"],
            "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1,
                              "drain": {"enable": True, "force": False, "deleteEmptyDir": True,
                                        "timeoutSeconds": 1800}},
        }
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": "nic-cluster-policy"},
        "spec": spec,
    }


def network_attachments(cluster: Cluster, namespaces: list[str]) -> list[dict]:
    """IPoIB on rail 0 (named ib0 on every GPU node) for NCCL's bootstrap socket."""
    config = {
        "cniVersion": "0.3.1",
        "name": RDMA_NETWORK,
        "type": "ipoib",
        "master": "ib0",
        "ipam": {"type": "nv-ipam", "poolName": RDMA_NETWORK},
    }
    return [
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": RDMA_NETWORK, "namespace": ns,
                         "annotations": {"k8s.v1.cni.cncf.io/resourceName":
                                         rdma_resource(cluster)}},
            "spec": {"config": json.dumps(config, sort_keys=True)},
        }
        for ns in namespaces
    ]


def ip_pool(cluster: Cluster) -> dict:
    """The IPoIB address pool for pods' rail-0 interface, a block per GPU node."""
    net = cluster.network.rdma_cidr
    return {
        "apiVersion": "nv-ipam.nvidia.com/v1alpha1",
        "kind": "IPPool",
        "metadata": {"name": RDMA_NETWORK,
                     "namespace": cluster.platform.network_operator.namespace},
        "spec": {
            "subnet": str(net),
            "perNodeBlockSize": 64,
            "gateway": str(net.network_address + 1),
            "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{
                "key": f"{LABEL_PREFIX}/role", "operator": "In", "values": ["gpu-worker"]}]}]},
        },
    }


def queues(cluster: Cluster) -> list[dict]:
    """A training and an inference queue; inference keeps its GPUs when training is busy."""
    total = cluster.total_gpus
    inference = sum(s.autoscaling.max_replicas * s.gpus_per_pod
                    for s in cluster.workloads.inference)
    training = max(total - sum(s.autoscaling.min_replicas * s.gpus_per_pod
                               for s in cluster.workloads.inference), 0)
    return [
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
         "metadata": {"name": "training"},
         "spec": {"weight": 1, "reclaimable": True,
                  "capability": {"nvidia.com/gpu": str(training)}}},
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
         "metadata": {"name": "inference"},
         "spec": {"weight": 1, "reclaimable": False,
                  "capability": {"nvidia.com/gpu": str(min(inference, total))}}},
    ]


def hypernodes(nodes: tuple[GpuNode, ...]) -> list[dict]:
    """Tier 1 = the nodes of one SU (same leaves); tier 2 = all SUs under the spine layer."""
    sus = sorted({n.su for n in nodes})
    objs = [
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": f"su{su}", "labels": {f"{LABEL_PREFIX}/tier": "1"}},
            "spec": {
                "tier": 1,
                "members": [{"type": "Node", "selector": {"labelMatch": {
                    "matchLabels": {f"{LABEL_PREFIX}/su": f"su{su}"}}}}],
            },
        }
        for su in sus
    ]
    objs.append({
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": "spine", "labels": {f"{LABEL_PREFIX}/tier": "2"}},
        "spec": {
            "tier": 2,
            "members": [{"type": "HyperNode", "selector": {"exactMatch": {"name": f"su{su}"}}}
                        for su in sus],
        },
    })
    return objs


def gpu_toleration() -> dict:
    return {"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}
