"""The cluster twin: the prod rendering applied to a real control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler built from their Go modules by tools/k8s/build.sh) with
KWOK nodes for the planned hosts. What a real cluster would refuse or leave unscheduled fails
here. Runs when the binaries are built (`make k8s-tools`; `make twin` builds and runs it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

CACHE = Path(os.environ.get("GPU_CLUSTER_CACHE") or Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-cluster")
BINS = sorted((CACHE / "k8s").glob("bin-*"))
SHARED = REPO.parent / "shared"
pytestmark = [
    pytest.mark.skipif(not BINS, reason="twin binaries not built: run `make k8s-tools` "
                       "(kube-apiserver, scheduler, controller-manager, kubectl, etcd, kwok)"),
    pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (upstream CRDs) is absent"),
]


def run_twin(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "twin", "--bin", str(BINS[-1]),
                           "--out", str(out), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict, list, list]:
    out = tmp_path_factory.mktemp("twin")
    proc = run_twin(out)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    report = json.loads((out / "report.json").read_text())
    pods = json.loads((out / "pods.json").read_text())
    nodes = json.loads((out / "nodes.json").read_text())
    return proc.returncode, proc.stdout, report, pods, nodes


def test_the_api_server_accepts_every_rendered_object(twin) -> None:  # noqa: ANN001
    _, out, report, _, _ = twin
    assert report["rejected"] == {}, out


def test_every_planned_node_registers_with_its_taints_and_resources(twin) -> None:  # noqa: ANN001
    nodes = {n["metadata"]["name"]: n for n in twin[4]}
    assert set(nodes) == {"mgmt-01"} | {f"gpu-node-{i:02d}" for i in range(8)}
    gpu = nodes["gpu-node-03"]
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert gpu["spec"]["taints"][0]["key"] == "nvidia.com/gpu"
    ready = [c for c in gpu["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"  # KWOK keeps the stand-in kubelet ready


def test_every_system_pod_and_node_agent_gets_a_node_from_the_real_scheduler(twin) -> None:  # noqa: ANN001
    code, out, report, pods, _ = twin
    assert report["unscheduled"] == {}, out
    probes = [p for p in pods if "gpucluster.io/twin-probe" in p["metadata"].get("labels", {})]
    assert len(probes) >= 20
    placed = report["placed"]
    for p in probes:
        key = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        assert key in placed, key
    # The Training Operator (its real manifests, the stack's kustomization) on the control plane.
    operator = [node for key, node in placed.items() if key.startswith("kubeflow/training-op")]
    assert operator == ["mgmt-01"], placed
    # The vLLM replicas were admitted (their PriorityClass exists) and wait for Volcano.
    serving = [p for p in pods if p["metadata"]["namespace"] == "inference"]
    assert len(serving) == 2 and {p["spec"]["priority"] for p in serving} == {100000}
    assert sorted(report["notJudged"]) == sorted(
        f"inference/{p['metadata']['name']}" for p in serving)
    # The Lustre CSI node plugin runs on every GPU node and nowhere else.
    csi = sorted(node for key, node in placed.items() if "lustre-csi" in key)
    assert csi == [f"gpu-node-{i:02d}" for i in range(8)]
    assert code == 0


def test_a_release_without_its_tolerations_leaves_its_pods_without_a_node(
        twin, tmp_path: Path) -> None:  # noqa: ANN001
    """The defect the placement values fix, put back: cert-manager with the chart's own
    placement only. The real scheduler finds no node (every node is tainted)."""
    rendering = tmp_path / "prod"
    shutil.copytree(REPO / "build" / "prod", rendering)
    release = rendering / "helm" / "cert-manager.yaml"
    doc = yaml.safe_load(release.read_text())
    for block in (doc["values"], *(doc["values"][k] for k in
                                   ("webhook", "cainjector", "startupapicheck"))):
        block.pop("tolerations"), block.pop("nodeSelector")
    release.write_text(yaml.safe_dump(doc))
    proc = run_twin(tmp_path / "twin", "--rendering", str(rendering))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "twin" / "report.json").read_text())
    assert set(report["unscheduled"]) == {f"cert-manager/probe-cert-manager-{c}" for c in (
        "controller", "webhook", "cainjector", "startupapicheck")}
    assert all("untolerated taint" in why for why in report["unscheduled"].values())
