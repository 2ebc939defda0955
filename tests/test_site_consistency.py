"""The parts of a split site cannot drift apart: a part whose `kubernetesStack` names no core
stack here, whose cluster config differs from its core's, or that owns an SU another nodes stack
owns, is a config error before anything is registered — with the key, the value and the fix."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.project import REPO, prod_raw

from components.config_types import CLUSTER_KEY, ConfigError
from components.stack_config import validate_cluster

CORE = "organization/gpu-cluster/site-core"
PARTS = {
    "site-core": {"part": "core"},
    "site-su1": {"part": "nodes", "sus": [1], "kubernetesStack": CORE},
    "site-platform": {"part": "platform", "kubernetesStack": CORE},
    "site-workloads": {"part": "workloads", "kubernetesStack": CORE},
}


def write_site(project: Path, parts: dict[str, dict[str, Any]],
               edit: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """One stack file per part, prod's cluster config with the part's split; `edit`: stack ->
    a change to its config. Returns each stack's cluster object."""
    (project / "inventory").mkdir(parents=True, exist_ok=True)
    (project / "inventory/prod.csv").write_text((REPO / "inventory/prod.csv").read_text())
    out = {}
    for stack, split in parts.items():
        cluster = {**copy.deepcopy(prod_raw()), "split": copy.deepcopy(split)}
        if edit and stack in edit:
            edit[stack](cluster)
        doc = {"config": {CLUSTER_KEY: cluster}}
        (project / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        out[stack] = cluster
    return out


def problems(project: Path, clusters: dict[str, dict[str, Any]], stack: str) -> list[Any]:
    with pytest.raises(ConfigError) as info:
        validate_cluster(clusters[stack], project, stack)
    return info.value.problems


def test_a_consistent_site_validates(tmp_path: Path) -> None:
    clusters = write_site(tmp_path, PARTS)
    for stack, cluster in clusters.items():
        assert validate_cluster(cluster, tmp_path, stack).split is not None


def test_a_mistyped_core_stack_is_refused(tmp_path: Path) -> None:
    clusters = write_site(tmp_path, PARTS, {"site-su1": lambda c: c["split"].update(
        kubernetesStack="organization/gpu-cluster/site-cor")})
    [p] = problems(tmp_path, clusters, "site-su1")
    assert (p.path, p.value) == ("split.kubernetesStack", "organization/gpu-cluster/site-cor")
    assert "names no stack of this project" in p.message
    assert p.fix.endswith("with one of site-core")


def test_a_reference_to_a_part_that_is_not_core_is_refused(tmp_path: Path) -> None:
    clusters = write_site(tmp_path, PARTS, {"site-workloads": lambda c: c["split"].update(
        kubernetesStack="organization/gpu-cluster/site-platform")})
    [p] = problems(tmp_path, clusters, "site-workloads")
    assert "which is not a core part (its split.part is platform)" in p.message


def test_a_part_that_drifted_from_its_core_is_refused(tmp_path: Path) -> None:
    """The Kubernetes version edited in one SU's stack file: its kubelets would be newer than the
    API server the core runs."""
    def newer(cluster: dict[str, Any]) -> None:
        cluster["kubernetes"]["version"] = "1.35.3"

    clusters = write_site(tmp_path, PARTS, {"site-su1": newer})
    [p] = problems(tmp_path, clusters, "site-su1")
    assert (p.path, p.value) == ("kubernetes.version", "1.35.3")
    assert p.message.startswith(f"differs from the core stack's Pulumi.site-core.yaml "
                                f"('{prod_raw()['kubernetes']['version']}')")
    assert "[check" not in str(p)  # a site check, not one of the model's


def test_two_stacks_owning_one_su_are_refused(tmp_path: Path) -> None:
    parts = {**PARTS, "site-su1-again": {"part": "nodes", "sus": [1], "kubernetesStack": CORE}}
    clusters = write_site(tmp_path, parts)
    for stack, other in (("site-su1", "site-su1-again"), ("site-su1-again", "site-su1")):
        [p] = problems(tmp_path, clusters, stack)
        assert (p.path, p.message) == (
            "split.sus", f"SU 1 is also owned by stack {other}: both would join and reset its "
            "nodes")
