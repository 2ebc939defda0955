"""workloads layer: training jobs and inference services rendered correct by construction."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.kube import apply


@dataclass(frozen=True)
class WorkloadArgs:
    provider: k8s.Provider
    manifests: list[dict]
    depends_on: list[pulumi.Resource]


class Workload(pulumi.ComponentResource):
    """One training job or inference service: its Kubernetes objects, named by the workload."""

    def __init__(self, name: str, args: WorkloadArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:workloads:Workload", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider,
                                       depends_on=args.depends_on)
        self.objects = [apply(m, child) for m in args.manifests]
        self.register_outputs({})
