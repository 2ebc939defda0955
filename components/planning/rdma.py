"""The RDMA side of the platform (pure): the RDMA resource and the rails' netdevs, the
NicClusterPolicy, the network attachments and their IP pool.

The RDMA resource, the attachment names and the pod interface they create are defined once here;
the workload layer derives NCCL's environment from the same functions, so the two cannot
disagree.
"""

from __future__ import annotations

import json
from typing import Any

from components.model.cluster import Cluster
from components.model.compat import NETWORK_OPERATOR_RELEASES
from components.model.tunables import PER_NODE_BLOCK
from components.planning.labels import GPU_NODE_TERM, gpu_toleration

RDMA_NETWORK = "ib-rail0"  # the IPoIB attachment pods use for NCCL's bootstrap socket
POD_RDMA_INTERFACE = "net1"  # Multus names the first extra interface net1
CONNECTX7_DEVICE_ID = "1021"
MELLANOX_VENDOR = "15b3"


def rdma_resource(cluster: Cluster) -> str:
    no = cluster.platform.network_operator
    return f"{no.rdma_resource_prefix}/{no.rdma_resource_name}"


def rail_netdevs(cluster: Cluster) -> list[str]:
    """Every GPU node's rail interfaces (IPoIB, as the OS names them): the template's in rail
    order, then any other name a node override gives."""
    names = list(cluster.gpu_nodes.template.netdevs)
    names += sorted({r.netdev for n in cluster.nodes for r in n.rails} - set(names))
    return names


def attachment_master(cluster: Cluster) -> str:
    """Rail 0's interface, the same on every node (the config checks it): the master of the
    pods' IPoIB attachment."""
    return cluster.gpu_nodes.template.netdevs[0]


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


# Pods that may share a node's HCAs through the RDMA shared device plugin (its resource count).
RDMA_HCA_MAX = 63


def nic_cluster_policy(cluster: Cluster) -> dict:
    no = cluster.platform.network_operator
    release = no.version.lstrip("v")
    # The release's own images (its compat_data entry; the config accepts no other release).
    images = NETWORK_OPERATOR_RELEASES[release]
    repo, comp = images["repository"], f"network-operator-v{release}"
    device_plugin_config = {
        "configList": [{
            "resourceName": no.rdma_resource_name,
            "resourcePrefix": no.rdma_resource_prefix,
            "rdmaHcaMax": RDMA_HCA_MAX,
            # The compute HCAs only (by their rail interfaces), not a storage or management
            # ConnectX on the same host: one pod resource exposes all rails, as NCCL_IB_HCA
            # lists them.
            "selectors": {"vendors": [MELLANOX_VENDOR], "deviceIDs": [CONNECTX7_DEVICE_ID],
                          "linkTypes": ["infiniband"],
                          "ifNames": rail_netdevs(cluster)},
        }]
    }
    spec: dict[str, Any] = {
        # The operator's DaemonSets must run on the tainted GPU nodes, and only there.
        "tolerations": [gpu_toleration()],
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [GPU_NODE_TERM]}},
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
            "image": "doca-driver", "repository": repo, "version": images["docaDriver"],
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


def nad_config(cluster: Cluster) -> dict:
    """The CNI config of the RDMA attachment: IPoIB on rail 0 for NCCL's bootstrap socket.

    One attachment is enough: NCCL moves data over IB verbs on every HCA the RDMA shared
    device plugin puts in the pod (all rails); only its out-of-band socket needs an IP
    interface, and rail 0's IPoIB child (net1 in the pod) is on the fabric every node shares.
    """
    return {
        "cniVersion": "0.3.1",
        "name": RDMA_NETWORK,
        "type": "ipoib",
        "master": attachment_master(cluster),
        "ipam": {"type": "nv-ipam", "poolName": RDMA_NETWORK},
    }


def network_attachments(cluster: Cluster, namespaces: list[str]) -> list[dict]:
    return [
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": RDMA_NETWORK, "namespace": ns,
                         "annotations": {"k8s.v1.cni.cncf.io/resourceName":
                                         rdma_resource(cluster)}},
            "spec": {"config": json.dumps(nad_config(cluster), sort_keys=True)},
        }
        for ns in namespaces
    ]


def ip_pool(cluster: Cluster) -> dict:
    """The IPoIB address pool for pods' rail-0 interface, a block per GPU node.

    A flat L2 network (every node's rail 0 is on the same subnet), so no gateway and no route.
    """
    net = cluster.network.rdma_cidr
    nodes = len(cluster.nodes)
    block = PER_NODE_BLOCK
    if (nodes + 1) * block > net.num_addresses:
        raise ValueError(
            f"network.rdmaCidr: {net} holds {net.num_addresses} addresses, fewer than "
            f"{nodes} GPU nodes x {block} pod addresses per node (+ one spare block); "
            "use a larger rdmaCidr")
    return {
        "apiVersion": "nv-ipam.nvidia.com/v1alpha1",
        "kind": "IPPool",
        "metadata": {"name": RDMA_NETWORK,
                     "namespace": cluster.platform.network_operator.namespace},
        "spec": {
            "subnet": str(net),
            "perNodeBlockSize": block,
            "nodeSelector": {"nodeSelectorTerms": [GPU_NODE_TERM]},
        },
    }
