"""Lustre volumes as static PersistentVolumes and claims (pure).

Every volume is `Retain`: deleting a claim, a namespace or the whole stack never deletes a
dataset or a checkpoint. The component layer adds Pulumi `protect` to checkpoint volumes.
"""

from __future__ import annotations

from components.config import Cluster, LustreFilesystem

CSI_DRIVER = "lustre-csi.hpe.com"
STORAGE_CLASS = "lustre-static"  # no provisioner: binds only the PVs rendered here
ACCESS_MODES = {"dataset": "ReadOnlyMany", "checkpoints": "ReadWriteMany",
                "model-weights": "ReadOnlyMany"}
DEFAULT_NAMESPACE = {"dataset": "training", "checkpoints": "training",
                     "model-weights": "inference"}


def volume_handle(fs: LustreFilesystem) -> str:
    """`<mgs nid>[:<failover nid>…]:/<fsname>`, the Lustre mount source."""
    return ":".join(fs.mgs_nids) + f":/{fs.fsname}"


def namespaces_using(cluster: Cluster, fs: LustreFilesystem) -> list[str]:
    used = {j.namespace for j in cluster.workloads.training if fs.name in (j.dataset,
                                                                           j.checkpoints)}
    used |= {s.namespace for s in cluster.workloads.inference if s.weights == fs.name}
    return sorted(used) or [DEFAULT_NAMESPACE[fs.purpose]]


def claim_name(fs_name: str) -> str:
    return fs_name


def volumes(cluster: Cluster) -> list[tuple[LustreFilesystem, dict, dict]]:
    """(file system, PersistentVolume, PersistentVolumeClaim) per file system and namespace."""
    out = []
    for fs in cluster.storage.lustre:
        for ns in namespaces_using(cluster, fs):
            pv_name = f"{fs.name}-{ns}"
            mode = ACCESS_MODES[fs.purpose]
            pv = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv_name, "labels": {"gpucluster.io/purpose": fs.purpose}},
                "spec": {
                    "capacity": {"storage": fs.capacity},
                    "volumeMode": "Filesystem",
                    "accessModes": [mode],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": STORAGE_CLASS,
                    "mountOptions": list(fs.mount_options),
                    "claimRef": {"kind": "PersistentVolumeClaim", "namespace": ns,
                                 "name": claim_name(fs.name)},
                    "csi": {"driver": CSI_DRIVER, "volumeHandle": volume_handle(fs),
                            "fsType": "lustre",
                            "readOnly": mode == "ReadOnlyMany"},
                },
            }
            pvc = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim_name(fs.name), "namespace": ns},
                "spec": {
                    "accessModes": [mode],
                    "storageClassName": STORAGE_CLASS,
                    "volumeName": pv_name,
                    "resources": {"requests": {"storage": fs.capacity}},
                },
            }
            out.append((fs, pv, pvc))
    return out
