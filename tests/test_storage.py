"""Lustre through HPE's CSI driver (lustre-csi.hpe.com): static volumes whose handle is the
Lustre mount source, access modes by purpose, checkpoints that survive anything the stack does,
the node plugin where the GPU pods run, and local NVMe scratch for staging."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.project import prod_raw

from components.model.cluster import Cluster
from components.model.fields import CLUSTER_KEY, ConfigError
from components.planning import host_scripts, labels, namespaces, storage
from components.wiring.loading import validate_cluster

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


@pytest.fixture
def raw() -> dict:
    return prod_raw()


def prod() -> Cluster:
    return validate_cluster(prod_raw(), REPO)


def test_volumes_are_static_lustre_mounts_by_purpose():
    vols = {fs.name: (pv, pvc) for fs, pv, pvc in storage.volumes(prod())}
    assert set(vols) == {"training-data", "checkpoints", "model-weights"}
    expect = {  # name: (namespace, access mode, read-only, mount source)
        "training-data": ("training", "ReadOnlyMany", True,
                          "172.20.0.10@o2ib:172.20.0.11@o2ib:/training"),
        "checkpoints": ("training", "ReadWriteMany", False,
                        "172.20.0.10@o2ib:172.20.0.11@o2ib:/ckpt"),
        "model-weights": ("inference", "ReadOnlyMany", True,
                          "172.20.0.10@o2ib:172.20.0.11@o2ib:/models"),
    }
    for name, (ns, mode, ro, handle) in expect.items():
        pv, pvc = vols[name]
        csi = pv["spec"]["csi"]
        # HPE's driver mounts volumeHandle verbatim as the Lustre source: MGS NIDs (failover
        # pair joined by ':') then ':/<fsname>', with fsType lustre (no default).
        assert (csi["driver"], csi["volumeHandle"], csi["fsType"], csi["readOnly"]) == (
            "lustre-csi.hpe.com", handle, "lustre", ro)
        assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == [mode]
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
        # Bound to each other both ways: nothing else can claim the volume.
        assert pvc["metadata"]["namespace"] == ns
        assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
        assert pv["spec"]["claimRef"] == {"kind": "PersistentVolumeClaim", "namespace": ns,
                                          "name": pvc["metadata"]["name"]}
        assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"]


def test_csi_driver_runs_where_the_gpu_pods_mount_lustre():
    c = prod()
    ns, driver, ds = storage.csi_driver_objects(c)
    assert ns["kind"] == "Namespace" and driver["kind"] == "CSIDriver" and ds["kind"] == (
        "DaemonSet")
    assert driver["metadata"]["name"] == storage.CSI_DRIVER
    # HPE's driver: static only, no attach step, pod info on mount, no fsGroup handling.
    assert driver["spec"] == {"attachRequired": False, "podInfoOnMount": True,
                                   "fsGroupPolicy": "None",
                                   "volumeLifecycleModes": ["Persistent"]}
    pod = ds["spec"]["template"]["spec"]
    assert labels.gpu_toleration() in pod["tolerations"]  # GPU nodes are tainted
    assert pod["nodeSelector"] == {"node-restriction.kubernetes.io/gpucluster-role": "gpu-worker"}
    images = [x["image"] for x in pod["containers"] + pod["initContainers"]]
    assert images[0] == "ghcr.io/hewlettpackard/lustre-csi-driver:0.1.5"
    assert all(":" in i.rsplit("/", 1)[-1] and not i.endswith(":latest") for i in images)
    registrar = pod["containers"][1]
    assert "--kubelet-registration-path=/var/lib/kubelet/plugins/lustre-csi/csi.sock" in (
        registrar["args"])
    socket = next(v for v in pod["volumes"] if v["name"] == "socket-dir")
    assert socket["hostPath"]["path"] == "/var/lib/kubelet/plugins/lustre-csi"


@pytest.mark.slow
def test_checkpoints_are_protected_and_kept(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(REPO, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
        ".git", "build", "rendered", ".venv", "__pycache__", ".pytest_cache"))
    out = subprocess.run([sys.executable, "-m", "offline", "preview", "--stack", "prod",
                          "--project-dir", str(root)], cwd=root, capture_output=True, text=True)
    assert out.returncode in (0, 3), out.stdout + out.stderr
    plan = json.loads((root / "build" / "prod" / "plan.json").read_text())["resources"]
    vols = {r["name"]: r["options"] for r in plan
            if r["type"].endswith(("PersistentVolume", "PersistentVolumeClaim"))}
    assert vols, "no volumes in the plan"
    for name, opts in vols.items():
        assert opts["retainOnDelete"] is True, name
        assert opts["protect"] is ("checkpoints" in name), name
    assert (root / "build" / "prod" / "manifests" / "cluster"
            / "csidriver-lustre-csi.hpe.com.yaml").is_file()


def test_mgs_nids_must_be_on_the_lnet_network(raw):
    raw["storage"]["lustre"][1]["mgsNids"] = ["172.20.0.10@tcp"]
    with pytest.raises(ConfigError) as info:
        validate_cluster(raw, REPO)
    assert [p.path for p in info.value.problems] == ["storage.lustre[1].mgsNids"]
    assert "172.20.0.10@tcp" in str(info.value) and "o2ib0" in str(info.value)
    raw["storage"]["lustre"][1]["mgsNids"] = ["172.20.0.10@o2ib0"]  # o2ib == o2ib0
    validate_cluster(raw, REPO)


def test_scratch_is_the_nvme_array_the_host_prepares():
    c = prod()
    vol = storage.scratch_volume(c)
    # prod adopts DGX OS's data-drive RAID0 where DGX OS mounts it (docs/hosts.md).
    assert vol == {"name": "scratch", "hostPath": {"path": "/raid", "type": "Directory"}}
    script = host_scripts.prepare_gpu_node(c, c.nodes[0], CLUSTER_KEY)
    assert 'SCRATCH_MOUNT="/raid"' in script and "--level=0" in script
    # hostPath is only admitted where Pod Security allows it: the training namespaces.
    levels = {n["metadata"]["name"]: n["metadata"]["labels"][
        "pod-security.kubernetes.io/enforce"] for n in namespaces.namespaces(c)}
    assert levels["training"] == "privileged" and levels["inference"] == "baseline"


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (validators) is absent")
def test_storage_objects_pass_strict_core_schemas(tmp_path):
    c = prod()
    objs = storage.csi_driver_objects(c) + [o for _, pv, pvc in storage.volumes(c)
                                            for o in (pv, pvc)]
    path = tmp_path / "storage.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    out = subprocess.run([sys.executable, str(SHARED / "tools" / "validate_manifests.py"),
                          "--k8s", "1.35", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
    assert out.stdout.strip().splitlines()[-1] == f"{len(objs)} objects checked, 0 invalid"


def test_only_the_mounting_container_is_privileged() -> None:
    """The CSI node plugin mounts Lustre on the host (privileged, Bidirectional propagation);
    the node-driver-registrar beside it only serves a socket to the kubelet."""
    from support.sandbox import prod_cluster

    from components.planning import storage

    (ds,) = [o for o in storage.csi_driver_objects(prod_cluster()) if o["kind"] == "DaemonSet"]
    ctrs = {c["name"]: c["securityContext"] for c in
            ds["spec"]["template"]["spec"]["containers"]}
    assert ctrs["csi-node-driver"] == {"privileged": True}
    registrar = ctrs["csi-node-driver-registrar"]
    assert registrar["privileged"] is False and registrar["capabilities"] == {"drop": ["ALL"]}
    assert registrar["allowPrivilegeEscalation"] is False
