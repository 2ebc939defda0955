"""From a node's files to its quarantine, through the real node-problem-detector: a control
plane (the twin's etcd, kube-apiserver, controller manager, scheduler, KWOK for the kubelets)
with prod's GPU nodes, one node-problem-detector v1.36.0 process per node with its
Kubernetes exporter on, each over its own fixture DGX H100 (kernel log file, sysfs rails as
prod's rails file plans them, stand-in nvidia-smi, dcgmi and systemctl), checks every second.
A fault injected into a node's files must become, on the real Node object, the condition and
reason of docs/health.md ("What is detected"), set by the detector; the quarantine, run as
its own identity with prod's policy, must then drain or taint as its table says.

What the expected outcomes rest on: docs/health.md's tables (Xid 79 `GPUFallenOffBus`/
`GPUFellOffBus`, a rail down `InfinibandRailDown`/`RailPortDown`, a rail at 1X
`InfinibandRailDegraded`/`RailBelowPlannedRate`; drain for the first two, taint for the third);
the identity node-problem-detector's own deployment binds (upstream `deployment/rbac.yaml`:
the API server's bootstrap ClusterRole `system:node-problem-detector`, nodes get, nodes/status
patch, events create). gpu-node-04 gets the same faults and no detector: nothing may happen
to it until one runs there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.node_health import npd_binary
from support.sandbox import prod_cluster
from support.twin import BINS

from components.planning import health_detector, quarantine
from components.planning.quarantine_setup import QUARANTINE_USER, policy, quarantine_rbac
from twin.controlplane import TOKEN, ControlPlane
from twin.node_health import SimulatedHost, conditions_of, lay_out_host, start_detector, stop

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not BINS, reason="control-plane binaries not built: run "
                                 "`make k8s-tools`")]

XID_79 = ("NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
          "off the bus.")
# node -> what is done to its files, and the condition and reason docs/health.md gives it.
FAULTS = {"gpu-node-00": ("Xid 79", "GPUFallenOffBus", "GPUFellOffBus"),
          "gpu-node-01": ("rail 3 down", "InfinibandRailDown", "RailPortDown"),
          "gpu-node-02": ("rail 5 at 1X", "InfinibandRailDegraded", "RailBelowPlannedRate")}
HEALTHY = "gpu-node-03"
UNWATCHED = "gpu-node-04"  # the same faults as the three above, no detector running
WATCHED = (*FAULTS, HEALTHY)
# Every condition the detector keeps on a GPU node (docs/health.md, "What is detected").
CONDITIONS = {"GPUFallenOffBus", "GPUNeedsReset", "InfinibandRailDown", "InfinibandRailDegraded",
              "InfinibandRailErrors", "NVLinkDown", "NVSwitchFabricNotReady", "GPUHealthFailure",
              "RAIDDegraded"}
NPD_USER = "gpu-cluster:node-problem-detector"
NPD_TOKEN = "node-problem-detector-token-0123456789"
NPD_ROLE = health_detector.ROLE  # the API server's own, which the stack binds as upstream does
WAIT_S = 120  # for a detector to start and report, on a loaded two-core machine
LIMIT_S = 900  # no detector outlives the module


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {"kubernetes.io/hostname": name},
        "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "status": {"allocatable": {"cpu": "224", "memory": "2Ti", "pods": "110"},
                   "capacity": {"cpu": "224", "memory": "2Ti", "pods": "110"}}}


def _npd_binding() -> dict[str, Any]:
    rbac = "rbac.authorization.k8s.io"
    return {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": NPD_USER},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": NPD_ROLE},
            "subjects": [{"apiGroup": rbac, "kind": "User", "name": NPD_USER}]}


class Cluster:
    def __init__(self, cp: ControlPlane, work: Path, binary: Path) -> None:
        self.cp, self.work, self.binary = cp, work, binary
        self.hosts: dict[str, SimulatedHost] = {}
        self.kubeconfig = work / "node-problem-detector.conf"
        config = json.loads(cp.kubeconfig.read_text())
        config["users"][0]["user"] = {"token": NPD_TOKEN}
        self.kubeconfig.write_text(json.dumps(config))

    def add_host(self, name: str, model: Any) -> None:
        self.hosts[name] = lay_out_host(model, name, self.work / name, interval_s=1)

    def start_detector(self, name: str) -> None:
        proc = start_detector(self.binary, self.hosts[name], self.kubeconfig,
                              self.work / f"{name}-npd.log", LIMIT_S)
        self.cp.on_stop(lambda: stop(proc))

    def inject(self, name: str) -> None:
        """The fault planned for `name`, or (the unwatched node) all three."""
        host = self.hosts[name]
        faults = [FAULTS[name][0]] if name in FAULTS else [f[0] for f in FAULTS.values()]
        for fault in faults:
            if fault == "Xid 79":
                host.kernel(XID_79)
            elif fault == "rail 3 down":
                host.fixture.rail_down("mlx5_5")  # rail 3 of prod's DGX H100 nodes
            else:
                host.fixture.rail_rate("mlx5_9", "100 Gb/sec (1X NDR)")  # rail 5: a lane left

    def conditions(self, name: str) -> dict[str, tuple[str, str]]:
        """The detector's conditions on the Node object: type -> (status, reason)."""
        return conditions_of(self.cp.get("node", name), CONDITIONS)

    def node(self, name: str) -> dict[str, Any]:
        return dict(self.cp.get("node", name))

    def quarantine(self) -> subprocess.CompletedProcess[str]:
        """One pass of the control planes' program with prod's policy, as its own identity
        (the admin token impersonating it: its ClusterRole decides what it may do), the limit
        raised so that every sick node here may leave service."""
        path, identity = self.work / "policy.json", self.work / "quarantine.conf"
        path.write_text(json.dumps(policy(prod_cluster()) | {"maxQuarantined": 10}))
        config = json.loads(self.cp.kubeconfig.read_text())
        config["users"][0]["user"] = {"token": TOKEN, "as": QUARANTINE_USER}
        identity.write_text(json.dumps(config))
        env = {**os.environ, "PATH": f"{BINS[-1]}:{os.environ['PATH']}"}
        return subprocess.run([sys.executable, str(Path(quarantine.__file__)), str(path),
                               str(identity), "mgmt-01"],
                              capture_output=True, text=True, timeout=120, env=env)

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n" + (self.work / f"{n}-npd.log").read_text(
            errors="replace")[-2000:] for n in self.hosts if (self.work / f"{n}-npd.log").exists())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    binary = npd_binary()
    work = tmp_path_factory.mktemp("node-health-cluster")
    model = prod_cluster()
    with ControlPlane(BINS[-1], work / "cp", tokens=[f"{NPD_TOKEN},{NPD_USER},{NPD_USER}"]
                      ) as cp:
        c = Cluster(cp, work, binary)
        cp.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(
            [*(_node(n) for n in (*WATCHED, UNWATCHED)), _npd_binding(), *quarantine_rbac()]))
        for name in (*WATCHED, UNWATCHED):
            c.add_host(name, model)
        for name in WATCHED:
            c.start_detector(name)
        yield c


def _taints(node: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(t["key"], t.get("value", ""), t["effect"]) for t in node["spec"].get("taints", [])
            if t["key"] == quarantine.TAINT]


def test_1_the_detectors_identity_is_upstreams_and_no_more(cluster: Cluster) -> None:
    def can_i(verb: str, what: str) -> str:
        resource, _, sub = what.partition("/")
        return cluster.cp.kubectl("auth", "can-i", verb, resource, f"--subresource={sub}",
                                  f"--as={NPD_USER}", check=False).stdout.strip()

    asked = (("get", "nodes"), ("patch", "nodes/status"), ("create", "events"),
             ("patch", "nodes"), ("delete", "pods"), ("get", "secrets"))
    can = {(verb, what): can_i(verb, what) for verb, what in asked}
    assert can == {("get", "nodes"): "yes", ("patch", "nodes/status"): "yes",
                   ("create", "events"): "yes", ("patch", "nodes"): "no",
                   ("delete", "pods"): "no", ("get", "secrets"): "no"}


def test_2_each_detector_reports_its_healthy_node(cluster: Cluster) -> None:
    """Each detector reached the API server as its identity and set every condition of the
    table False on its own node, and only there."""
    try:
        cluster.cp.wait_for(lambda: all(
            {t: s for t, (s, _) in cluster.conditions(n).items()} == dict.fromkeys(
                CONDITIONS, "False") for n in WATCHED), "every detector's conditions", WAIT_S)
    except Exception as err:
        raise AssertionError(f"{err}\n{cluster.logs()}") from err
    assert cluster.conditions(UNWATCHED) == {}
    out = cluster.quarantine()
    assert out.returncode == 0, out.stdout + out.stderr
    assert not any(_taints(cluster.node(n)) for n in (*WATCHED, UNWATCHED))


def test_3_injected_faults_become_the_documented_conditions(cluster: Cluster) -> None:
    for name in (*FAULTS, UNWATCHED):
        cluster.inject(name)

    def raised() -> dict[str, set[tuple[str, str]]]:
        return {n: {(t, r) for t, (s, r) in cluster.conditions(n).items() if s == "True"}
                for n in WATCHED}

    want = {n: {(condition, reason)} for n, (_, condition, reason) in FAULTS.items()}
    want[HEALTHY] = set()
    try:
        cluster.cp.wait_for(lambda: raised() == want, "the detectors' conditions", WAIT_S)
    except Exception as err:
        raise AssertionError(f"{err}: {raised()}\n{cluster.logs()}") from err
    # The message names what to fix: rail 3's planned leaf port and cable (gpu-node-01 is the
    # second node of its scalable unit: port 18 of each rail's leaf).
    down = next(c for c in cluster.node("gpu-node-01")["status"]["conditions"]
                if c["type"] == "InfinibandRailDown")
    assert down["message"].startswith("rail 3 mlx5_5: port DOWN, Disabled (leaf-su1-r2-3 port "
                                      "18, cable leaf-su1-r2-3:18, node port OSFP4P1)")
    # The kernel's finding is an event on the node too (events create).
    events = cluster.cp.get("events", "-A", "--field-selector",
                            "involvedObject.name=gpu-node-00")["items"]
    assert "GPUFellOffBus" in {e["reason"] for e in events}


def test_4_the_quarantine_drains_or_taints_as_documented(cluster: Cluster) -> None:
    out = cluster.quarantine()
    assert out.returncode == 0, out.stdout + out.stderr
    for name, (_, condition, _) in FAULTS.items():
        node = cluster.node(name)
        assert _taints(node) == [(quarantine.TAINT, condition, "NoSchedule")], out.stdout
        drained = condition != "InfinibandRailDegraded"  # a slower rail only keeps new work off
        assert bool(node["spec"].get("unschedulable")) is drained, name
    healthy = cluster.node(HEALTHY)
    assert not _taints(healthy) and not healthy["spec"].get("unschedulable")


def test_5_without_the_detector_the_same_faults_change_nothing(cluster: Cluster) -> None:
    """gpu-node-04 got an Xid 79, a rail down and a rail at 1X with the others, long enough
    ago for them to be found and acted on: with no detector, no condition and no taint.
    Started there, the detector finds all three."""
    assert cluster.conditions(UNWATCHED) == {}
    node = cluster.node(UNWATCHED)
    assert not _taints(node) and not node["spec"].get("unschedulable")
    cluster.start_detector(UNWATCHED)
    want = {(condition, reason) for _, condition, reason in FAULTS.values()}

    def raised() -> set[tuple[str, str]]:
        return {(t, r) for t, (s, r) in cluster.conditions(UNWATCHED).items() if s == "True"}

    try:
        cluster.cp.wait_for(lambda: raised() == want, "the conditions of gpu-node-04", WAIT_S)
    except Exception as err:
        raise AssertionError(f"{err}: {raised()}\n{cluster.logs()}") from err
