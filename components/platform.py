"""platform layer: CNI, GPU and Network Operators, RDMA networks, Volcano, Training Operator,
ingress, metrics — all through the bootstrap layer's Kubernetes provider."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.kube import apply
from components.planning.platform import Release

TRAINING_OPERATOR_OVERLAY = (
    "https://github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref={ref}"
)


@dataclass(frozen=True)
class PlatformArgs:
    provider: k8s.Provider
    namespaces: list[str]  # workload namespaces (training, inference, …)
    releases: list[Release]
    nic_cluster_policy: dict
    ip_pool: dict
    network_attachments: list[dict]
    queues: list[dict]
    hypernodes: list[dict]
    training_operator_version: str


class Platform(pulumi.ComponentResource):
    def __init__(self, name: str, args: PlatformArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:platform:Platform", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.namespaces = {
            ns: apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, child)
            for ns in sorted(args.namespaces)
        }
        self.releases: dict[str, k8s.helm.v3.Release] = {}
        for rel in args.releases:
            deps = [self.releases[d] for d in _RELEASE_ORDER.get(rel.name, ())
                    if d in self.releases]
            self.releases[rel.name] = k8s.helm.v3.Release(
                rel.name,
                name=rel.name,
                chart=(f"{rel.chart.repo}/{rel.chart.chart}" if rel.chart.repo.startswith("oci://")
                       else rel.chart.chart),
                version=rel.chart.version,
                repository_opts=None if rel.chart.repo.startswith("oci://") else
                k8s.helm.v3.RepositoryOptsArgs(repo=rel.chart.repo),
                namespace=rel.chart.namespace,
                create_namespace=True,
                atomic=True,
                timeout=900,
                values=dict(rel.values),
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=deps)),
            )
        net_op = pulumi.ResourceOptions.merge(
            child, pulumi.ResourceOptions(depends_on=[self.releases["network-operator"]]))
        self.nic_cluster_policy = apply(args.nic_cluster_policy, net_op)
        self.ip_pool = apply(args.ip_pool, pulumi.ResourceOptions.merge(
            net_op, pulumi.ResourceOptions(depends_on=[self.nic_cluster_policy])))
        self.network_attachments = [
            apply(nad, pulumi.ResourceOptions.merge(net_op, pulumi.ResourceOptions(
                depends_on=[self.nic_cluster_policy, self.namespaces[nad["metadata"]
                                                                     ["namespace"]]])))
            for nad in args.network_attachments
        ]
        volcano = pulumi.ResourceOptions.merge(
            child, pulumi.ResourceOptions(depends_on=[self.releases["volcano"]]))
        self.queues = [apply(q, volcano) for q in args.queues]
        self.hypernodes = [apply(h, volcano) for h in args.hypernodes]
        self.training_operator = k8s.kustomize.v2.Directory(
            "training-operator",
            directory=TRAINING_OPERATOR_OVERLAY.format(ref=args.training_operator_version),
            opts=child,
        )
        self.register_outputs({"releases": sorted(self.releases)})


# Helm releases that must be ready before another is installed.
_RELEASE_ORDER: dict[str, tuple[str, ...]] = {
    "network-operator": ("calico",),
    # The GPU Operator's driver pods need the DOCA/OFED driver first for GPUDirect RDMA.
    "gpu-operator": ("network-operator",),
    "ingress-nginx": ("metallb", "cert-manager"),
    "prometheus-adapter": ("prometheus",),
}
