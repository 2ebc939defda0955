"""The quarantine the control planes run (components/planning/quarantine.py), against a real
control plane (the twin's kube-apiserver, controller manager and scheduler, KWOK for the
kubelets): a node condition node-problem-detector would set takes the node out of service, a
gang is suspended whole and never split, a budget bounds the drain, at most `maxQuarantined`
nodes are out at once, and a control plane is never touched.

What the expected outcomes rest on: the Eviction API honours PodDisruptionBudgets (kubernetes.io/
docs/concepts/scheduling-eviction/api-eviction/); `runPolicy.suspend` stops every replica of a
Kubeflow job and resuming recreates them (Training Operator v1.9 RunPolicy, the pytorchjobs CRD
in ../shared/ref); a NoSchedule taint keeps new pods off a node that does not tolerate it.

Stand-in: no Training Operator runs here, so the test deletes a suspended job's pods as it would
(the twin runs the real operator)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.twin import BINS, SHARED

from components.planning import quarantine
from components.planning.quarantine_setup import QUARANTINE_USER, quarantine_rbac
from twin.controlplane import TOKEN, ControlPlane

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not BINS, reason="control-plane binaries not built: run "
                                 "`make k8s-tools`"),
              pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (CRDs) is absent")]

PROGRAM = Path(quarantine.__file__)
CRDS = SHARED / "ref/kubeflow/v1-training-operator-v1.9.4"  # the PyTorchJob and MPIJob CRDs
GPU_NODES = ("gpu-node-00", "gpu-node-01", "gpu-node-02", "gpu-node-03")
CONTROL_PLANE = "mgmt-01"
POLICY = {"conditions": {"GpuFellOffBus": "drain", "IbRailDegraded": "taint"},
          "maxQuarantined": 2, "drainTimeoutSeconds": 20,
          "protected": {CONTROL_PLANE: "control plane"}}


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {"kubernetes.io/hostname": name},
        "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                   "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}


def _job() -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "train:1"}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "llama", "namespace": "training"},
            "spec": {"runPolicy": {"suspend": False}, "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": 1, "template": template}}}}


def _rank(role: str, node: str) -> dict[str, Any]:
    """A rank as the Training Operator creates it (labels, Volcano's gang annotation)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"llama-{role}-0", "namespace": "training",
        "labels": {quarantine.JOB_NAME: "llama", quarantine.OPERATOR: "pytorchjob-controller",
                   "training.kubeflow.org/replica-type": role},
        "annotations": {quarantine.GROUP: "llama"}},
        "spec": {"nodeName": node, "containers": [{"name": "pytorch", "image": "train:1"}]}}


def _serving(name: str, node: str, budget: bool) -> list[dict[str, Any]]:
    labels = {"app": name}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": name, "namespace": "serving"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                      "metadata": {"labels": labels},
                      "spec": {"affinity": _prefer(node),
                               "containers": [{"name": "vllm", "image": "vllm:1"}]}}}}
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": name, "namespace": "serving"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}}
    return [deployment, *([pdb] if budget else [])]


def _prefer(node: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                  "values": [node]}]}
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": term}]}}


class Cluster:
    def __init__(self, cp: ControlPlane, work: Path) -> None:
        self.cp, self.work = cp, work

    def run(self, policy: dict[str, Any] = POLICY, holder: str = "mgmt-01"
            ) -> subprocess.CompletedProcess[str]:
        """One pass, as the quarantine's own identity (the admin token impersonating it:
        its ClusterRole decides what it may do)."""
        path, identity = self.work / "policy.json", self.work / "quarantine.conf"
        path.write_text(json.dumps(policy))
        config = json.loads(self.cp.kubeconfig.read_text())
        config["users"][0]["user"] = {"token": TOKEN, "as": QUARANTINE_USER}
        identity.write_text(json.dumps(config))
        env = {**os.environ, "PATH": f"{BINS[-1]}:{os.environ['PATH']}"}
        return subprocess.run([sys.executable, str(PROGRAM), str(path), str(identity), holder],
                              capture_output=True, text=True, timeout=120, env=env)

    def condition(self, node: str, kind: str, status: str = "True") -> None:
        patch = {"status": {"conditions": [{"type": kind, "status": status,
                                            "reason": f"{kind}Found", "message": "injected",
                                            "lastTransitionTime": "2026-11-28T10:00:00Z",
                                            "lastHeartbeatTime": "2026-11-28T10:00:00Z"}]}}
        self.cp.kubectl("patch", "node", node, "--subresource=status", "--type=strategic",
                        "-p", json.dumps(patch))

    def node(self, name: str) -> dict[str, Any]:
        return dict(self.cp.get("node", name))

    def pods(self, namespace: str) -> dict[str, str]:
        items = self.cp.get("pods", "-n", namespace)["items"]
        return {p["metadata"]["name"]: p["spec"].get("nodeName", "")
                for p in items if not p["metadata"].get("deletionTimestamp")}

    def wait(self, ok: Callable[[], bool], what: str) -> None:
        self.cp.wait_for(ok, what, timeout=90)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("quarantine")
    with ControlPlane(BINS[-1], work / "cp") as cp:
        c = Cluster(cp, work)
        cp.kubectl("apply", "--server-side", "-f", str(CRDS))
        docs = [_node(n) for n in (*GPU_NODES, CONTROL_PLANE)] + [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            for ns in ("training", "serving")]
        cp.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([*docs, *quarantine_rbac()]))
        cp.wait_for_service_account("training")
        cp.wait_for_service_account("serving")
        cp.kubectl("wait", "--for=condition=Established", "crd/pytorchjobs.kubeflow.org",
                   "--timeout=60s")
        cp.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(
            [_job(), _rank("master", "gpu-node-00"), _rank("worker", "gpu-node-01"),
             *_serving("chat", "gpu-node-00", budget=False),
             *_serving("embed", "gpu-node-02", budget=True)]))
        c.wait(lambda: c.pods("serving").get(_only(c.pods("serving"), "chat"), "") != ""
               and len(c.pods("serving")) == 2, "the serving pods scheduled")
        yield c


def _only(pods: dict[str, str], prefix: str) -> str:
    (name,) = [p for p in pods if p.startswith(prefix)]
    return name


def _job_state(c: Cluster) -> dict[str, Any]:
    return dict(c.cp.get("pytorchjob", "llama", "-n", "training"))


def test_1_a_healthy_cluster_is_left_alone(cluster: Cluster) -> None:
    out = cluster.run()
    assert out.returncode == 0, out.stdout + out.stderr
    assert not any(quarantine.tainted(cluster.node(n)) for n in GPU_NODES)


def test_2_a_gpu_off_the_bus_suspends_the_gang_whole_and_drains_the_rest(
        cluster: Cluster) -> None:
    cluster.condition("gpu-node-00", "GpuFellOffBus")
    chat = _only(cluster.pods("serving"), "chat")
    out = cluster.run()
    assert out.returncode == 0, out.stdout + out.stderr
    node = cluster.node("gpu-node-00")
    assert {"key": quarantine.TAINT, "value": "GpuFellOffBus", "effect": "NoSchedule"} in [
        {k: t.get(k) for k in ("key", "value", "effect")} for t in node["spec"]["taints"]]
    assert node["spec"].get("unschedulable") is True
    job = _job_state(cluster)
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert job["metadata"]["annotations"][quarantine.SUSPENDED] == "gpu-node-00"
    # Neither rank was evicted on its own: the gang stops as one, by the operator's hand.
    assert cluster.pods("training") == {"llama-master-0": "gpu-node-00",
                                        "llama-worker-0": "gpu-node-01"}
    # The serving pod was evicted, and its ReplicaSet's new pod is scheduled elsewhere.
    cluster.wait(lambda: chat not in cluster.pods("serving"), "the serving pod evicted")
    cluster.wait(lambda: cluster.pods("serving").get(
        _only(cluster.pods("serving"), "chat")) not in ("", None), "its new pod scheduled")
    assert cluster.pods("serving")[_only(cluster.pods("serving"), "chat")] != "gpu-node-00"


def test_3_the_job_resumes_once_its_ranks_are_gone(cluster: Cluster) -> None:
    out = cluster.run()  # the operator has not stopped the ranks yet: still suspended
    assert _job_state(cluster)["spec"]["runPolicy"]["suspend"] is True, out.stdout
    cluster.cp.kubectl("delete", "pods", "-n", "training", "--all", "--wait=true")  # stand-in
    out = cluster.run()
    assert out.returncode == 0, out.stdout + out.stderr
    job = _job_state(cluster)
    assert job["spec"]["runPolicy"]["suspend"] is False
    assert quarantine.SUSPENDED not in (job["metadata"].get("annotations") or {})
    assert "resumed training/llama" in out.stdout


def test_4_a_budget_bounds_the_drain_and_the_run_fails(cluster: Cluster) -> None:
    cluster.condition("gpu-node-02", "GpuFellOffBus")
    embed = _only(cluster.pods("serving"), "embed")
    out = cluster.run()
    assert out.returncode == 1
    assert "gpu-node-02: drain did not finish" in out.stderr
    assert embed in cluster.pods("serving")  # the budget held it
    assert quarantine.tainted(cluster.node("gpu-node-02"))


def test_5_no_more_than_max_quarantined_at_once(cluster: Cluster) -> None:
    cluster.condition("gpu-node-03", "IbRailDegraded")
    out = cluster.run()
    assert out.returncode == 1
    assert ("gpu-node-03: IbRailDegraded; left in service: 2 nodes are quarantined already "
            "(maxQuarantined 2)") in out.stderr
    assert not quarantine.tainted(cluster.node("gpu-node-03"))


def test_6_a_rail_fault_only_taints_and_keeps_what_runs(cluster: Cluster) -> None:
    out = cluster.run(POLICY | {"maxQuarantined": 3})
    node = cluster.node("gpu-node-03")
    assert quarantine.tainted(node) and not node["spec"].get("unschedulable"), out.stdout
    assert "gpu-node-03: quarantined (NoSchedule): IbRailDegraded" in out.stdout


def test_7_a_control_plane_is_never_touched(cluster: Cluster) -> None:
    cluster.condition(CONTROL_PLANE, "GpuFellOffBus")
    out = cluster.run(POLICY | {"maxQuarantined": 10})
    node = cluster.node(CONTROL_PLANE)
    assert not quarantine.tainted(node) and not node["spec"].get("unschedulable")
    assert out.returncode == 1
    assert f"{CONTROL_PLANE}: GpuFellOffBus (GpuFellOffBusFound); not quarantined: it is the " \
           "control plane" in out.stderr


def test_8_its_identity_can_do_nothing_else(cluster: Cluster) -> None:
    """It cannot delete a pod (which would bypass a budget) nor read a Secret."""
    for verb, what in (("delete", "pods"), ("get", "secrets"), ("delete", "nodes"),
                       ("create", "pods"), ("update", "nodes/status")):
        out = cluster.cp.kubectl("auth", "can-i", verb, what, f"--as={QUARANTINE_USER}",
                                 check=False)
        assert out.stdout.strip() == "no", (verb, what)


def test_9_one_control_plane_acts_at_a_time(cluster: Cluster) -> None:
    """mgmt-01's passes hold the Lease: mgmt-02's pass does nothing while it is fresh, and
    takes over once mgmt-01 stopped renewing it for longer than it lasts."""
    cluster.condition("gpu-node-01", "IbRailDegraded")
    policy = POLICY | {"maxQuarantined": 10}
    out = cluster.run(policy, holder="mgmt-02")
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr
    assert not quarantine.tainted(cluster.node("gpu-node-01"))
    lease = cluster.cp.get("lease", quarantine.LEASE, "-n", "kube-system")
    assert lease["spec"]["holderIdentity"] == "mgmt-01"
    lease["spec"]["renewTime"] = "2026-01-01T00:00:00.000000Z"  # mgmt-01 went quiet
    cluster.cp.kubectl("replace", "-f", "-", stdin=json.dumps(lease))
    out = cluster.run(policy, holder="mgmt-02")
    assert quarantine.tainted(cluster.node("gpu-node-01")), out.stdout + out.stderr
    assert cluster.cp.get("lease", quarantine.LEASE, "-n", "kube-system")["spec"][
        "holderIdentity"] == "mgmt-02"
