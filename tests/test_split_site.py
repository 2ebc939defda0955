"""A large site as several stacks (core, one per SU of nodes, platform, workloads) joined by a
stack reference: each preview covers its part only, and together they are the whole site."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.project import REPO, run_offline

from offline.bench import scale_gpu_nodes

KEY = "gpu-cluster:cluster"
CORE = "organization/gpu-cluster/core"
PARTS = {
    "core": {"part": "core"},
    "su1": {"part": "nodes", "sus": [1], "kubernetesStack": CORE},
    "su2": {"part": "nodes", "sus": [2], "kubernetesStack": CORE},
    "platform": {"part": "platform", "kubernetesStack": CORE},
    "workloads": {"part": "workloads", "kubernetesStack": CORE},
}


def site(project: Path) -> dict[str, Any]:
    doc = yaml.safe_load((project / "Pulumi.prod.yaml").read_text())
    return scale_gpu_nodes(doc, 64, free_slots=2)  # SU 1: 31 nodes and the SM slot, SU 2: 30


def write(project: Path, stack: str, doc: dict[str, Any], split: dict[str, Any] | None) -> None:
    doc = copy.deepcopy(doc)
    if split is not None:
        doc["config"][KEY]["split"] = split
    (project / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def resources(project: Path, stack: str, *args: str) -> list[dict[str, Any]]:
    proc = run_offline(project, "preview", "--stack", stack, *args)
    # Generated sites have no inventory (no SSH host keys): the pack says so with exit 3.
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    return json.loads((project / "build" / stack / "plan.json").read_text())["resources"]


def names(res: list[dict[str, Any]], type_prefix: str = "") -> set[str]:
    return {r["name"] for r in res if r["type"].startswith(type_prefix)}


@pytest.fixture()
def previews(project: Path) -> dict[str, list[dict[str, Any]]]:
    doc = site(project)
    write(project, "site", doc, None)
    for stack, split in PARTS.items():
        write(project, stack, doc, split)
    return {stack: resources(project, stack) for stack in ["site", *PARTS]}


@pytest.mark.slow
def test_each_part_holds_only_its_share(previews: dict[str, list[dict[str, Any]]]) -> None:
    hosts = "gpucluster:hardware:BareMetalNode"
    assert names(previews["core"], hosts) == {"mgmt-01", "sm-01", "sm-02"}
    assert "mgmt-01-kubeadm-init" in names(previews["core"])
    assert names(previews["su1"], hosts) == {f"gpu-node-{i:02d}" for i in range(31)}
    assert names(previews["su2"], hosts) == {f"gpu-node-{i:02d}" for i in range(32, 62)}
    for part in ("su1", "su2", "platform", "workloads"):
        assert "mgmt-01-kubeadm-init" not in names(previews[part])
        # The provider is built from the core stack's kubeconfig output (a stack reference is
        # read, not registered, so the provider is what the plan shows).
        provider = next(r for r in previews[part] if r["type"] == "pulumi:providers:kubernetes")
        assert provider["inputs"]["kubeconfig"] == "[secret]"
        assert not names(previews[part], "gpucluster:fabric:")
    assert names(previews["platform"], "kubernetes:helm.sh") >= {"gpu-operator", "volcano"}
    assert names(previews["workloads"], "kubernetes:kubeflow.org") == {
        "pytorchjob-training-llama-70b-pretrain", "mpijob-training-nccl-allreduce"}


@pytest.mark.slow
def test_the_parts_together_are_the_whole_site(previews: dict[str, list[dict[str, Any]]]
                                               ) -> None:
    plumbing = ("pulumi:pulumi:StackReference", "pulumi:providers:")
    whole = {(r["type"], r["name"]) for r in previews["site"]
             if not r["type"].startswith(plumbing)}
    parts = [{(r["type"], r["name"]) for r in previews[p]
              if not r["type"].startswith(plumbing)} for p in PARTS]
    # Each nodes stack mints its own tokens from the control plane, so the CA hash command and
    # the KubeadmCluster/Hardware components repeat per stack; everything else is in one part.
    shared = {("command:remote:Command", "ca-cert-hash"),
              ("gpucluster:bootstrap:KubeadmCluster", "kubernetes"),
              ("gpucluster:hardware:Hardware", "hardware")}
    assert set().union(*parts) == whole
    for i, a in enumerate(parts):
        for b in parts[i + 1:]:
            assert a & b <= shared


@pytest.mark.slow
def test_a_node_added_to_su2_leaves_the_su1_stack_unchanged(project: Path) -> None:
    doc = site(project)
    write(project, "core", doc, PARTS["core"])
    for stack in ("su1", "su2"):
        write(project, stack, doc, PARTS[stack])
        resources(project, stack, "--render")
    bigger = copy.deepcopy(doc)
    bigger["config"][KEY]["gpuNodes"]["ranges"][1]["count"] += 1
    # One site config: the change goes into every part's file, the core's too.
    for stack in ("core", "su1", "su2"):
        write(project, stack, bigger, PARTS[stack])
    assert len(resources(project, "su2")) > 0
    resources(project, "su1")
    assert json.loads((project / "build/su1/diff.json").read_text()) == []
    created = {c["name"] for c in json.loads((project / "build/su2/diff.json").read_text())
               if c["action"] == "create"}
    assert "gpu-node-62-kubeadm-join" in created and "gpu-node-62" in created


@pytest.mark.parametrize(("split", "path"), [
    ({"part": "nodes", "kubernetesStack": CORE}, "split.sus"),
    ({"part": "nodes", "sus": [3], "kubernetesStack": CORE}, "split.sus"),
    ({"part": "platform", "sus": [1], "kubernetesStack": CORE}, "split.sus"),
    ({"part": "workloads"}, "split.kubernetesStack"),
])
def test_a_split_that_cannot_work_is_a_config_error(split: dict[str, Any], path: str) -> None:
    from components.config_types import ConfigError
    from components.stack_config import validate_cluster

    raw = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"][KEY]
    with pytest.raises(ConfigError) as info:
        validate_cluster({**raw, "split": split}, REPO)
    assert [p.path for p in info.value.problems] == [path]
