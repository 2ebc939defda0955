"""Bounded blast radius on a full 32-node SU and a 256-node (8-SU) cluster: a change touches
its own resources and the few shared ones that must follow, nothing else."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.project import NODE_RESOURCES, run_offline

from offline.bench import scale_gpu_nodes

# Every test previews generated clusters (up to 256 nodes) several times.
pytestmark = pytest.mark.slow

KEY = "gpu-cluster:cluster"
# Sized by the number of GPU nodes: the acceptance test runs on all of them and is resubmitted.
NCCL = {"mpijob-training-nccl-allreduce", "nccl-allreduce-acceptance"}


def write_stack(project: Path, doc: dict[str, Any]) -> None:
    (project / "Pulumi.prod.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def preview(project: Path, *args: str) -> list[dict[str, Any]]:
    proc = run_offline(project, "preview", *args)
    # Generated stacks have no inventory, so no SSH host keys: the pack reports that (exit 3),
    # which is not what these tests are about.
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    return json.loads((project / "build/prod/diff.json").read_text())


def by_action(diff: list[dict[str, Any]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {"create": set(), "update": set(), "replace": set(),
                                "delete": set()}
    for c in diff:
        out[c["action"]].add(c["name"])
    return out


def generated(project: Path, slots: int, free: int) -> dict[str, Any]:
    doc = yaml.safe_load((project / "Pulumi.prod.yaml").read_text())
    return scale_gpu_nodes(doc, slots, free_slots=free)


def change(project: Path, doc: dict[str, Any], edit: Callable[[dict[str, Any]], None]
           ) -> dict[str, set[str]]:
    write_stack(project, doc)
    preview(project, "--render")
    new = copy.deepcopy(doc)
    edit(new["config"][KEY])
    write_stack(project, new)
    return by_action(preview(project))


@pytest.mark.parametrize(("slots", "su"), [(32, 1), (256, 8)])
def test_adding_one_node(project: Path, slots: int, su: int) -> None:
    doc = generated(project, slots, free=2)  # room for one more node in the last SU
    last = doc["config"][KEY]["gpuNodes"]["ranges"][-1]
    new_host = f"{last['prefix']}{int(last['start']) + int(last['count']):0{len(str(slots))}d}"

    got = change(project, doc, lambda c: c["gpuNodes"]["ranges"][-1].update(
        count=c["gpuNodes"]["ranges"][-1]["count"] + 1))

    assert got["create"] == {n.format(h=new_host) for n in NODE_RESOURCES}
    assert not got["delete"]
    # A full SU has one leaf per rail: the new node's eight cables land on eight leaves.
    leaves = {f"leaf-su{su}-r{r}-config" for r in range(8)}
    # <control plane>-identities: each approver of kubelet serving certificates learns it; its
    # SU's planned rails, which the health checks read, gain it (replaced, below).
    assert got["update"] == leaves | {"sm-01-opensm", "sm-02-opensm", "fabric",
                                      f"hypernode-su{su}", "queue-acceptance",
                                      "mgmt-01-identities", "mgmt-02-identities",
                                      "mgmt-03-identities"}
    # pulumi-kubernetes replaces a ConfigMap whose data changes.
    assert got["replace"] == NCCL | {f"configmap-kube-system-node-problem-detector-rails-su{su}"}


def test_replacing_a_nodes_hardware(project: Path) -> None:
    doc = generated(project, 32, free=2)
    guids = tuple(f"0xb83fd20300ee{r:04x}" for r in range(8))
    got = change(project, doc, lambda c: c["gpuNodes"].update(
        overrides={"gpu-node-05": {"portGuids": list(guids)}}))
    # The subnet managers' files, and the GUIDs the fabric publishes (a component: nothing runs).
    assert got["update"] == {"sm-01-opensm", "sm-02-opensm", "fabric"}
    assert not got["create"] | got["delete"] | got["replace"]


def test_moving_a_workload(project: Path) -> None:
    doc = generated(project, 32, free=2)
    got = change(project, doc, lambda c: c["workloads"]["inference"][0].update(
        host="llm.apps.cluster.internal"))
    assert got["update"] | got["replace"] == {"ingress-inference-llama-70b"}
    assert not got["create"] | got["delete"]


def test_bumping_a_chart_version(project: Path) -> None:
    doc = generated(project, 32, free=2)
    got = change(project, doc, lambda c: c["platform"]["ingressNginx"].update(version="4.13.4"))
    assert got == {"create": set(), "update": {"ingress-nginx"}, "replace": set(),
                   "delete": set()}
