"""Day-2 changes as an on-call engineer makes them, each on a copy of prod previewed against
what prod has deployed: the exit status a CI gate acts on, the impact lines a reviewer reads
first and the runbook a technician follows.

The expected values are what the change does on hardware: kubeadm's version skew policy
(upgrades one minor at a time, never back), sshd refusing a key no host authorises, the
planned reboot chain (each node drained before it reboots), the GPU Operator's driver upgrade
controller (`driver.upgradePolicy`: one node at a time, waiting for the training pods, then a
drain), pulumi-command re-running a command whose login changes, and nothing else.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.project import REPO, copy_repo, prod_raw, run_offline
from support.stack_edits import edit_stack

pytestmark = pytest.mark.slow

GPU_NODES = [f"gpu-node-{i:02d}" for i in range(8)]
SPAN = "gpu-node-00 … gpu-node-07"
PROD_KEY = prod_raw()["credentials"]["sshPublicKey"]
NEW_KEY = Ed25519PrivateKey.generate().public_key().public_bytes(
    serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode() + " ops@next"


@dataclass(frozen=True)
class Scenario:
    change: Callable[[dict[str, Any]], None]
    status: int  # the preview's exit status
    impact: tuple[str, ...] = ()  # lines the impact holds
    not_in_impact: tuple[str, ...] = ()
    runbook: tuple[str, ...] = ()  # fragments the runbook holds, in this order
    not_in_runbook: tuple[str, ...] = ()
    before: Callable[[dict[str, Any]], None] | None = None  # what prod already has
    stderr: tuple[str, ...] = field(default=())


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(cluster: dict[str, Any]) -> None:
        *parents, key = path.split(".")
        node = cluster
        for p in parents:
            node = node[p]
        node[key] = value
    return change


def _kernel_args(cluster: dict[str, Any]) -> None:
    cluster["gpuNodes"]["template"]["kernelArgs"] = ["iommu=pt", "init_on_alloc=0"]


def _rotate_key(cluster: dict[str, Any]) -> None:
    cluster["credentials"].update(sshPublicKey=NEW_KEY, sshAuthorizedKeys=[PROD_KEY])


SCENARIOS: dict[str, Scenario] = {
    # kubeadm upgrade apply refuses a version below the cluster's and a skipped minor:
    # `pulumi up` would fail part-way, after the host preparation was already re-run.
    "kubernetes-downgrade": Scenario(
        _set("kubernetes.version", "1.34.3"), 4,
        impact=("  Kubernetes 1.35.2 -> 1.34.3: REFUSED, it skips a minor or goes back "
                "(kubeadm's version skew policy)",),
        runbook=("REFUSED Kubernetes 1.35.2 -> 1.34.3",),
        stderr=("refused: Kubernetes 1.35.2 -> 1.34.3: kubeadm upgrades one minor version at "
                "a time and never back",)),
    "kubernetes-patch-back": Scenario(
        _set("kubernetes.version", "1.35.1"), 4,
        impact=("  Kubernetes 1.35.2 -> 1.35.1: REFUSED, it skips a minor or goes back "
                "(kubeadm's version skew policy)",)),
    # sshd on every host knows only the old key: every command would fail to log in.
    "ssh-key-not-yet-authorised": Scenario(
        _set("credentials.sshPublicKey", NEW_KEY), 4,
        runbook=("REFUSED SSH key rotation",),
        stderr=("refused: SSH key rotation",)),
    # The second half of a rotation: the key every host already authorises. The commands log
    # in differently and run the same scripts: no drain, no opensm restart, no kubelet roll.
    "ssh-key-rotation": Scenario(
        _rotate_key, 0, before=_set("credentials.sshAuthorizedKeys", [NEW_KEY]),
        impact=("  nodes drained: 0", "  outage: none expected"),
        runbook=("SSH key rotation",),
        not_in_runbook=("drain", "opensm", "kubelet", "host preparation", "NCCL")),
    "switch-password": Scenario(
        _set("credentials.switchPasswordVersion", 2), 0,
        impact=("  nodes drained: 0", "  outage: none expected"),
        runbook=("switch password rotation",), not_in_runbook=("drain", "NCCL")),
    # A kernel argument applies at boot: each GPU node goes through the reboot chain, drained
    # before its reboot, one cluster member at a time.
    "kernel-args": Scenario(
        _kernel_args, 0,
        impact=(f"  nodes drained: 8 ({SPAN}), each in turn before its reboot",
                f"  planned reboots: 8 ({SPAN}), one cluster member at a time",
                "  outage: one node at a time leaves service; a node drained for its reboot "
                "has its jobs evicted (a training gang restarts from its last checkpoint); "
                "serving keeps its other replicas"),
        not_in_impact=("outage: none expected",),
        runbook=("planned reboot of " + ", ".join(GPU_NODES), "check -> drain -> reboot")),
    # The GPU Operator's upgrade controller takes every GPU node in turn (driver.upgradePolicy
    # of the stack: one at a time, waiting for training and acceptance pods, then a drain).
    "gpu-driver": Scenario(
        _set("platform.gpuOperator.driverVersion", "580.105.08"), 0,
        impact=(f"  GPU driver 580.95.05 -> 580.105.08: the GPU Operator updates 8 GPU nodes "
                f"({SPAN}) 1 at a time: on each it waits for the pods of "
                "`app.kubernetes.io/component in (training,nccl-test)` to finish (no time "
                "limit), then drains it (its other pods evicted within their disruption "
                "budgets) and reloads the driver",
                f"  nodes drained: 8 ({SPAN}), each in turn by the operator updating its "
                "driver"),
        not_in_impact=("no running work is drained", "outage: none expected"),
        runbook=("upgrade gpu-operator", "GPU driver 580.95.05 -> 580.105.08: the GPU "
                 "Operator updates 8 GPU nodes", "gpu-operator-rollout")),
}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository with prod's committed rendering: what prod has deployed."""
    project = copy_repo(tmp_path_factory.mktemp("prod") / "gpu-cluster")
    shutil.copytree(REPO / "rendered" / "prod", project / "rendered" / "prod")
    return project


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_day2_change_previews_with_the_verdict_of_what_it_does(
        deployed: Path, tmp_path: Path, name: str) -> None:
    s = SCENARIOS[name]
    project = tmp_path / "gpu-cluster"
    shutil.copytree(deployed, project)
    if s.before is not None:
        edit_stack(project, s.before)
        rendered = run_offline(project, "preview", "--render", "--quiet")
        assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    edit_stack(project, s.change)
    proc = run_offline(project, "preview")
    assert proc.returncode == s.status, proc.stdout[-3000:] + proc.stderr
    impact = (project / "build/prod/impact.txt").read_text().splitlines()
    for line in s.impact:
        assert line in impact, (line, impact)
    for text in s.not_in_impact:
        assert not [x for x in impact if text in x], (text, impact)
    runbook = (project / "build/prod/runbook.txt").read_text()
    at = [runbook.find(fragment) for fragment in s.runbook]
    assert -1 not in at and at == sorted(at), (s.runbook, runbook)
    for text in s.not_in_runbook:
        assert text not in runbook, (text, runbook)
    for line in s.stderr:
        assert line in proc.stderr, proc.stderr
    # What a reviewer reads first is what the file says.
    assert proc.stdout.splitlines()[:len(impact)] == impact
