"""Three control-plane hosts: kube-vip VIP, shared encryption key, one join at a time."""

from __future__ import annotations

import base64
import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from support.project import REPO, run_offline
from support.sandbox import Sandbox, unavailable

from components.planning import host_scripts, kubeadm, quarantine_setup
from components.wiring.loading import validate_cluster

VIP = "10.10.0.5"
KEY = "gpu-cluster:cluster"


def single(raw: dict[str, Any]) -> dict[str, Any]:
    """Prod's cluster with its first control plane alone and no VIP."""
    raw = copy.deepcopy(raw)
    first = next(h for h in raw["hosts"] if h["role"] == "control-plane")
    raw["hosts"] = [h for h in raw["hosts"] if h["role"] != "control-plane" or h is first]
    raw["kubernetes"]["controlPlaneEndpoint"] = {"port": 6443}
    return raw


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    return yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())


@pytest.fixture(scope="module")
def cluster(stack: dict[str, Any]):
    return validate_cluster(stack["config"][KEY], REPO)  # prod: three behind a VIP


def _embedded(script: str, marker: str) -> dict[str, Any]:
    body = re.search(rf"<<'{marker}'\n(.*?)\n{marker}\n", script, re.S)
    assert body, marker
    return yaml.safe_load(body.group(1))


def test_everyone_talks_to_the_vip(cluster) -> None:
    assert kubeadm.endpoint(cluster) == f"{VIP}:6443"
    join = kubeadm.control_plane_join_configuration(cluster, cluster.control_plane[1])
    assert join["discovery"]["bootstrapToken"]["apiServerEndpoint"] == f"{VIP}:6443"
    assert join["controlPlane"]["localAPIEndpoint"]["advertiseAddress"] == "10.10.0.13"


def test_kube_vip_is_a_valid_static_pod_holding_the_vip(cluster) -> None:
    init = kubeadm.init_script(cluster, cluster.control_plane[0])
    pod = _embedded(init, "KUBEVIP")
    kubernetes_validate.validate(pod, "1.35", strict=True)
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["address"] == VIP and env["cp_enable"] == "true"
    caps = pod["spec"]["containers"][0]["securityContext"]["capabilities"]
    assert caps == {"drop": ["ALL"], "add": ["NET_ADMIN", "NET_RAW"]}
    # Before init only super-admin.conf may talk to the API (kubeadm 1.29+); the identities
    # command moves it to its own kubeconfig (below). A joining one has its own from the start.
    assert pod["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/super-admin.conf"
    joined = _embedded(kubeadm.control_plane_join_script(cluster, cluster.control_plane[1]),
                       "KUBEVIP")
    assert joined["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/kube-vip.conf"
    # kube-vip reads its kubeconfig at its default path inside the container.
    assert joined["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == \
        "/etc/kubernetes/admin.conf"


@pytest.mark.slow
@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_kube_vip_gets_its_own_identity_and_super_admin_leaves_the_host(
        cluster, tmp_path: Path) -> None:
    """On the first control plane after `kubeadm init`: kube-vip moves from super-admin.conf
    (system:masters, which RBAC cannot limit) to a kubeconfig of gpu-cluster:kube-vip, whose
    RBAC is a Lease in kube-system and reading Nodes; super-admin.conf is removed; the stack's
    own identity is bound to cluster-admin. A second run changes nothing."""
    host = cluster.control_plane[0]
    sb = Sandbox(tmp_path / host.hostname, host.hostname, {})
    assert sb.run(host_scripts.prepare_host(cluster, host, KEY)).returncode == 0
    assert sb.run(kubeadm.init_script(cluster, host)).returncode == 0
    assert sb.path("/etc/kubernetes/super-admin.conf").exists()  # kubeadm's, for its bootstrap
    script = kubeadm.identities_script(cluster, host)
    first = sb.run(script)
    assert first.returncode == 0, first.explain()
    manifest = yaml.safe_load(sb.path("/etc/kubernetes/manifests/kube-vip.yaml").read_text())
    assert manifest["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/kube-vip.conf"
    conf = sb.path("/etc/kubernetes/kube-vip.conf")
    assert "name: gpu-cluster:kube-vip" in conf.read_text()
    assert conf.stat().st_mode & 0o077 == 0
    assert not sb.path("/etc/kubernetes/super-admin.conf").exists()
    applied = list(yaml.safe_load_all((sb.state / "cluster/applied").read_text()))
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in applied}
    role = by_name["Role", "gpu-cluster:kube-vip"]
    assert role["metadata"]["namespace"] == "kube-system"
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "list", "watch", "create", "update"]}]
    assert by_name["ClusterRole", "gpu-cluster:kube-vip"]["rules"][0]["verbs"] == \
        ["get", "list", "watch"]
    stack = by_name["ClusterRoleBinding", "gpu-cluster:stack"]
    assert stack["roleRef"]["name"] == "cluster-admin"
    assert stack["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                  "name": "gpu-cluster:stack"}]
    second = sb.run(script)
    assert second.returncode == 0 and second.changes == [], second.explain()


def test_single_control_plane_has_no_kube_vip(stack: dict[str, Any]) -> None:
    one = validate_cluster(single(stack["config"][KEY]), REPO)
    assert "kube-vip" not in kubeadm.init_script(one, one.control_plane[0])


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_control_plane_join_passes_shellcheck(cluster, tmp_path: Path) -> None:
    path = tmp_path / "join.sh"
    path.write_text(kubeadm.control_plane_join_script(cluster, cluster.control_plane[1]))
    proc = subprocess.run(["shellcheck", "-S", "warning", str(path)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_control_plane_join_runs_once_with_the_shared_key(cluster, tmp_path: Path) -> None:
    host = cluster.control_plane[1]
    sb = Sandbox(tmp_path / host.hostname, host.hostname, {})
    assert sb.run(host_scripts.prepare_host(cluster, host, KEY)).returncode == 0
    enc = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n# k1\n"
    # kubeadm.CONTROL_PLANE_CREDENTIALS on stdin, the encryption configuration base64-encoded.
    stdin = ("abcdef.0123456789abcdef", "sha256:" + "5e" * 32, "7a" * 32,
             base64.b64encode(enc.encode()).decode())
    script = kubeadm.control_plane_join_script(cluster, host)
    first = sb.run(script, credentials=stdin)
    assert first.returncode == 0, first.explain()
    assert first.count("kubeadm", "join") == 1
    assert sb.path("/etc/kubernetes/encryption-config.yaml").read_text().strip() == enc.strip()
    assert sb.path("/etc/kubernetes/manifests/kube-vip.yaml").is_file()
    assert not sb.path("/etc/kubernetes/kubeadm-join.yaml").exists()
    assert "7a" * 32 not in first.output and sb.files_containing("7a" * 32) == []
    second = sb.run(script, credentials=stdin)
    assert second.returncode == 0 and second.changes == [], second.explain()
    missing = sb.run(script, credentials=stdin[:3])
    assert "already a control-plane member" in missing.stdout  # guard runs first


@pytest.mark.slow
def test_preview_joins_control_planes_one_at_a_time(tmp_path: Path) -> None:
    project = tmp_path / "gpu-cluster"
    shutil.copytree(REPO, project, ignore=shutil.ignore_patterns(
        ".venv", "build", ".git", "__pycache__", ".pytest_cache", ".hypothesis", "rendered"))
    proc = run_offline(project, "preview", "--render")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "control-plane joins one at a time: mgmt-02, mgmt-03" in proc.stdout
    cmds = project / "rendered/prod/bootstrap/command-remote-Command"
    join2, join3 = (yaml.safe_load((cmds / f"mgmt-0{i}-kubeadm-join.yaml").read_text())
                    for i in (2, 3))
    for join in (join2, join3):
        assert join["options"]["protect"] is True
        assert "delete" not in join["inputs"]  # never a reset on a control-plane host
        # Credentials travel on stdin (a secret), the script is the command.
        assert "environment" not in join["inputs"] and join["inputs"]["stdin"] == "[secret]"
        assert "ENCRYPTION_CONFIG_B64" in join["inputs"]["create"]
    assert join2["urn"] in join3["options"]["dependsOn"]


@pytest.mark.slow
@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_health_checks_off_removes_the_quarantine_from_the_control_plane(
        cluster, tmp_path: Path) -> None:
    """`health.enabled: false` on a running cluster: the identities command stops the
    quarantine's timer and removes its program, policy, kubeconfig and units; a second run
    changes nothing. Turned on again, it is back."""
    host = cluster.control_plane[0]
    sb = Sandbox(tmp_path / host.hostname, host.hostname, {})
    assert sb.run(host_scripts.prepare_host(cluster, host, KEY)).returncode == 0
    assert sb.run(kubeadm.init_script(cluster, host)).returncode == 0
    on = sb.run(kubeadm.identities_script(cluster, host))
    assert on.returncode == 0, on.explain()
    files = [quarantine_setup.PROGRAM, quarantine_setup.POLICY_FILE,
             quarantine_setup.QUARANTINE_KUBECONFIG,
             f"/etc/systemd/system/{quarantine_setup.UNIT}.service",
             f"/etc/systemd/system/{quarantine_setup.UNIT}.timer"]
    timer = sb.state / "units" / f"{quarantine_setup.UNIT}.timer.active"
    assert all(sb.path(f).exists() for f in files) and timer.exists()

    off = cluster.model_copy(update={"health": cluster.health.model_copy(
        update={"enabled": False})})
    script = kubeadm.identities_script(off, host)
    first = sb.run(script)
    assert first.returncode == 0, first.explain()
    assert not any(sb.path(f).exists() for f in files) and not timer.exists()
    again = sb.run(script)
    assert again.returncode == 0 and again.changes == [], again.explain()
    back = sb.run(kubeadm.identities_script(cluster, host))
    assert back.returncode == 0 and timer.exists(), back.explain()
