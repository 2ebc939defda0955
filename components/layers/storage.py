"""storage layer: the Lustre CSI node plugin and Lustre volumes (static PVs and claims) for
datasets, checkpoints and model weights."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.layers.kube import apply
from components.model.cluster import LustreFilesystem


@dataclass(frozen=True)
class StorageArgs:
    provider: k8s.Provider
    csi_driver: list[dict]  # Namespace, CSIDriver, node DaemonSet
    volumes: list[tuple[LustreFilesystem, dict, dict]]
    depends_on: list[pulumi.Resource]


class Storage(pulumi.ComponentResource):
    def __init__(self, name: str, args: StorageArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:storage:Storage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.csi_driver: list[pulumi.Resource] = []
        for m in args.csi_driver:
            self.csi_driver.append(apply(m, pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=list(self.csi_driver)))))
        self.claims = {}
        for fs, pv, pvc in args.volumes:
            # Checkpoints are what a restart after a hardware failure resumes from: Pulumi
            # refuses to delete them (protect) and Kubernetes keeps the data (Retain).
            keep = pulumi.ResourceOptions(parent=self, provider=args.provider,
                                          depends_on=[*args.depends_on, *self.csi_driver],
                                          protect=fs.purpose == "checkpoints",
                                          retain_on_delete=True)
            volume = apply(pv, keep)
            self.claims[(pvc["metadata"]["namespace"], fs.name)] = apply(
                pvc, pulumi.ResourceOptions.merge(keep, pulumi.ResourceOptions(
                    depends_on=[volume])))
        self.register_outputs({})
