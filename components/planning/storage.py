"""Lustre volumes as static PersistentVolumes and claims (pure).

Every volume is `Retain`: deleting a claim, a namespace or the whole stack never deletes a
dataset or a checkpoint. The component layer adds Pulumi `protect` to checkpoint volumes.
"""

from __future__ import annotations

from components.model.cluster import Cluster, LustreCsi, LustreFilesystem
from components.planning.labels import GPU_TAINT, LABEL_PREFIX, PURPOSE_LABEL, ROLE_LABEL

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
                "metadata": {"name": pv_name, "labels": {PURPOSE_LABEL: fs.purpose}},
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


# ---------------------------------------------------------------- the CSI node plugin

PLUGIN_NAME = "lustre-csi-node"
INIT_IMAGE = "docker.io/library/busybox:1.34.1"  # upstream's socket-cleanup init container
_PLUGIN_LABELS = {"app.kubernetes.io/instance": CSI_DRIVER,
                  "app.kubernetes.io/part-of": "lustre-csi-driver",
                  "app.kubernetes.io/name": PLUGIN_NAME,
                  "app.kubernetes.io/component": "plugin"}


def csi_driver_objects(cluster: Cluster) -> list[dict]:
    """HPE's lustre-csi.hpe.com as published in its deploy/kubernetes/base (CSIDriver, node
    DaemonSet), with what a GPU cluster needs on top: pinned images, the GPU taint tolerated and
    the plugin on the GPU nodes (where the Lustre client and LNet over o2ib are set up)."""
    lc = cluster.platform.lustre_csi
    return [_csi_namespace(lc.namespace), _csi_driver(), _node_plugin(lc)]


def _csi_namespace(namespace: str) -> dict:
    """The driver's own namespace: privileged, as the node plugin must be."""
    psa = "pod-security.kubernetes.io"
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace,
                         "labels": {f"{psa}/enforce": "privileged",
                                    f"{psa}/enforce-version": "latest"},
                         "annotations": {f"{LABEL_PREFIX}/pod-security":
                                         "privileged: the CSI node plugin mounts Lustre on the "
                                         "host with bidirectional mount propagation"}}}


def _csi_driver() -> dict:
    """The driver's registration: no attach step, volumes mounted as they are."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
            "metadata": {"name": CSI_DRIVER, "labels": {
                "app.kubernetes.io/instance": CSI_DRIVER,
                "app.kubernetes.io/part-of": "lustre-csi-driver",
                "app.kubernetes.io/name": CSI_DRIVER,
                "app.kubernetes.io/component": "csi-driver"}},
            "spec": {"attachRequired": False, "podInfoOnMount": True, "fsGroupPolicy": "None",
                     "volumeLifecycleModes": ["Persistent"]}}


def _node_plugin(lc: LustreCsi) -> dict:
    """The node plugin on every GPU node, with the host paths it mounts through."""
    host = {"socket-dir": ("/var/lib/kubelet/plugins/lustre-csi", "DirectoryOrCreate"),
            "mountpoint-dir": ("/var/lib/kubelet/pods", "Directory"),
            "registration-dir": ("/var/lib/kubelet/plugins_registry", "Directory"),
            "plugins-dir": ("/var/lib/kubelet/plugins", "Directory"),
            "dev-dir": ("/dev", "Directory"),
            "mnt-dir": ("/mnt", "Directory")}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": PLUGIN_NAME, "namespace": lc.namespace, "labels": _PLUGIN_LABELS},
            "spec": {
                "selector": {"matchLabels": _PLUGIN_LABELS},
                "updateStrategy": {"type": "RollingUpdate",
                                   "rollingUpdate": {"maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": _PLUGIN_LABELS},
                    "spec": {
                        "priorityClassName": "system-node-critical",
                        "nodeSelector": {ROLE_LABEL: "gpu-worker"},
                        "tolerations": [{"key": GPU_TAINT["key"], "operator": "Exists",
                                         "effect": GPU_TAINT["effect"]}],
                        # A crashed driver leaves its socket behind; remove it before starting.
                        "initContainers": [{
                            "name": "init-socket", "image": INIT_IMAGE,
                            "command": ["rm", "-f", "/csi/csi.sock"],
                            "volumeMounts": [{"name": "socket-dir", "mountPath": "/csi"}]}],
                        "containers": _plugin_containers(lc),
                        "volumes": [{"name": n, "hostPath": {"path": p, "type": t}}
                                    for n, (p, t) in host.items()],
                    },
                },
            }}


def _plugin_containers(lc: LustreCsi) -> list[dict]:
    """The driver (privileged: it mounts Lustre on the host) and its registrar (not)."""
    node_name = {"name": "KUBE_NODE_NAME",
                 "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}
    return [
        {"name": "csi-node-driver", "image": lc.image,
         "args": ["--driver=lustre"],
         "securityContext": {"privileged": True},
         "env": [{"name": "CSI_ENDPOINT", "value": "unix:///csi/csi.sock"},
                 {"name": "X_CSI_SPEC_DISABLE_LEN_CHECK", "value": "true"},
                 node_name],
         "volumeMounts": [
             {"name": "socket-dir", "mountPath": "/csi"},
             {"name": "mountpoint-dir", "mountPath": "/var/lib/kubelet/pods",
              "mountPropagation": "Bidirectional"},
             {"name": "plugins-dir", "mountPath": "/var/lib/kubelet/plugins",
              "mountPropagation": "Bidirectional"},
             {"name": "dev-dir", "mountPath": "/dev",
              "mountPropagation": "HostToContainer"},
             {"name": "mnt-dir", "mountPath": "/mnt",
              "mountPropagation": "Bidirectional"}]},
        {"name": "csi-node-driver-registrar", "image": lc.registrar_image,
         "args": ["--v=2", "--csi-address=/csi/csi.sock",
                  "--kubelet-registration-path="
                  "/var/lib/kubelet/plugins/lustre-csi/csi.sock"],
         # It only serves a socket in the registration directory: no
         # privilege (the node plugin beside it needs one, to mount).
         "securityContext": {"privileged": False,
                             "allowPrivilegeEscalation": False,
                             "readOnlyRootFilesystem": True,
                             "capabilities": {"drop": ["ALL"]}},
         "env": [node_name],
         "volumeMounts": [{"name": "socket-dir", "mountPath": "/csi"},
                          {"name": "registration-dir",
                           "mountPath": "/registration"}]},
    ]


def scratch_volume(cluster: Cluster, name: str = "scratch") -> dict:
    """The node's NVMe RAID0 (prepared by the host script at storage.scratch.mountPoint) as a
    pod volume for data staging. hostPath: allowed in the privileged training namespaces only;
    the directory must exist, so a node without its scratch array fails the pod visibly."""
    return {"name": name, "hostPath": {"path": cluster.storage.scratch.mount_point,
                                       "type": "Directory"}}
