"""A split site is one config: the core's stack file holds it and lists the other parts; a
part's stack file only names its core. A part that keeps a copy of the config, a mistyped
core, a stack the core does not list, an SU with two owners, or a core whose split was deleted
while its parts still name it is a config error before anything is registered — with the key,
the value and the fix. Then, at run time, a part checks what its core (and platform) last
applied before it touches anything (`site_facts.readiness_problems`)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.project import REPO, prod_raw

from components.model.fields import CLUSTER_KEY, ConfigError
from components.model.site import SITE_KEY, stack_cluster
from components.planning import site_facts
from components.wiring.loading import validate_cluster

CORE = "organization/gpu-cluster/site-core"
PARTS = {"site-su1": {"part": "nodes", "sus": [1]}, "site-platform": {"part": "platform"},
         "site-workloads": {"part": "workloads"}}


def write_site(project: Path, parts: dict[str, Any] | None = None,
               edit: Any = None) -> None:
    """The core's file (prod's config, `split.parts`), one file per other part naming it."""
    (project / "inventory").mkdir(parents=True, exist_ok=True)
    (project / "inventory/prod.csv").write_text((REPO / "inventory/prod.csv").read_text())
    cluster = {**prod_raw(), "split": {"part": "core", "parts": copy.deepcopy(parts or PARTS)}}
    if edit:
        edit(cluster)
    (project / "Pulumi.site-core.yaml").write_text(
        yaml.safe_dump({"config": {CLUSTER_KEY: cluster}}, sort_keys=False))
    for stack in parts or PARTS:
        (project / f"Pulumi.{stack}.yaml").write_text(
            yaml.safe_dump({"config": {SITE_KEY: CORE}}, sort_keys=False))


def resolve(project: Path, stack: str, own: Any = None, site: str | None = CORE) -> Any:
    return validate_cluster(stack_cluster(project, stack, own, site), project)


def refused(project: Path, stack: str, own: Any = None, site: str | None = CORE) -> list[Any]:
    with pytest.raises(ConfigError) as info:
        resolve(project, stack, own, site)
    return info.value.problems


def test_every_part_reads_the_cores_config_with_its_own_split(tmp_path: Path) -> None:
    write_site(tmp_path)
    core = resolve(tmp_path, "site-core", yaml.safe_load(
        (tmp_path / "Pulumi.site-core.yaml").read_text())["config"][CLUSTER_KEY], None)
    su1 = resolve(tmp_path, "site-su1")
    workloads = resolve(tmp_path, "site-workloads")
    assert su1.split is not None and workloads.split is not None
    assert (su1.split.part, su1.split.sus, su1.split.kubernetes_stack) == ("nodes", (1,), CORE)
    assert workloads.split.platform_stack == "organization/gpu-cluster/site-platform"
    # One config: the same fingerprint in every part.
    assert site_facts.fingerprint(su1) == site_facts.fingerprint(core)


def test_a_part_with_its_own_copy_of_the_config_is_refused(tmp_path: Path) -> None:
    """A Kubernetes version edited in one SU's copy would make its kubelets newer than the API
    server: a part keeps no copy to edit."""
    write_site(tmp_path)
    [p] = refused(tmp_path, "site-su1", own=prod_raw())
    assert p.key == CLUSTER_KEY and "reads the site's one cluster config from " \
        "Pulumi.site-core.yaml" in p.message
    assert p.fix == f"remove {CLUSTER_KEY} from Pulumi.site-su1.yaml and make every change " \
        "in the core's file"
    # The older form (a copy of the config with a non-core split) is refused the same way.
    [p] = refused(tmp_path, "site-su1", own={**prod_raw(), "split": {"part": "nodes"}},
                  site=None)
    assert (p.path, p.value) == ("split.part", "nodes")
    assert f"set {SITE_KEY} to" in p.fix


def test_a_mistyped_core_stack_is_refused(tmp_path: Path) -> None:
    write_site(tmp_path)
    [p] = refused(tmp_path, "site-su1", site="organization/gpu-cluster/site-cor")
    assert (p.key, p.value) == (SITE_KEY, "organization/gpu-cluster/site-cor")
    assert "names no stack of this project" in p.message
    assert p.fix.endswith("with one of site-core")


def test_a_reference_to_a_part_that_is_not_core_is_refused(tmp_path: Path) -> None:
    write_site(tmp_path)
    (tmp_path / "Pulumi.site-platform.yaml").write_text(yaml.safe_dump(
        {"config": {CLUSTER_KEY: {**prod_raw(), "split": {"part": "platform"}}}}))
    [p] = refused(tmp_path, "site-workloads", site="organization/gpu-cluster/site-platform")
    assert "which is not a core part (its split.part is platform)" in p.message


def test_a_stack_the_core_does_not_list_is_refused_on_both_sides(tmp_path: Path) -> None:
    write_site(tmp_path)
    (tmp_path / "Pulumi.site-su9.yaml").write_text(yaml.safe_dump({"config": {SITE_KEY: CORE}}))
    [p] = refused(tmp_path, "site-su9")
    assert "stack site-su9 is not one of site-core's parts" in p.message
    core = yaml.safe_load((tmp_path / "Pulumi.site-core.yaml").read_text())["config"]
    [p] = refused(tmp_path, "site-core", own=core[CLUSTER_KEY], site=None)
    assert (p.path, p.message) == ("split.parts", f"stack site-su9 names this core in "
                                   f"{SITE_KEY}, but is not one of its parts")


def test_a_core_whose_split_was_deleted_is_not_a_second_whole_site(tmp_path: Path) -> None:
    write_site(tmp_path)
    [p] = refused(tmp_path, "site-core", own=prod_raw(), site=None)
    assert p.path == "split"
    assert "would build the whole site a second time beside them" in p.message


def test_two_parts_owning_one_su_are_refused_naming_the_other_owner_on_both_sides(
        tmp_path: Path) -> None:
    parts = {**PARTS, "site-su1-again": {"part": "nodes", "sus": [1]}}
    write_site(tmp_path, parts)
    core = yaml.safe_load((tmp_path / "Pulumi.site-core.yaml").read_text())["config"]
    problems = refused(tmp_path, "site-core", own=core[CLUSTER_KEY], site=None)
    assert [(p.path, p.message) for p in problems] == [
        ("split.parts.site-su1.sus", "SU 1 is also owned by part site-su1-again: both would "
         "join, and reset, its nodes"),
        ("split.parts.site-su1-again.sus", "SU 1 is also owned by part site-su1: both would "
         "join, and reset, its nodes")]
    # Each part, previewed on its own, names the other owner too (not only "the core has not
    # applied this part").
    for stack, other in (("site-su1", "site-su1-again"), ("site-su1-again", "site-su1")):
        [p] = refused(tmp_path, stack)
        assert p.key == SITE_KEY and p.message == (
            f"SU 1 of this stack ({stack}) is also owned by part {other} in site-core's "
            "split.parts: both would join, and reset, its nodes")


def test_a_core_in_another_organization_is_refused(tmp_path: Path) -> None:
    """A stack reference reaches stacks of the part's own organization: a misspelt one
    (`organisation`) is refused before anything is registered, where the engine names this
    stack's organization (a DIY backend's is always `organization`)."""
    write_site(tmp_path)
    misspelt = "organisation/gpu-cluster/site-core"
    with pytest.raises(ConfigError) as info:
        stack_cluster(tmp_path, "site-su1", None, misspelt, organization="organization")
    [p] = info.value.problems
    assert (p.key, p.value) == (SITE_KEY, misspelt)
    assert p.message == ("names organization organisation, but this stack is in organization "
                         "organization: a site's parts and its core are stacks of one "
                         "organization")
    assert p.fix == f"set {SITE_KEY} to {CORE}"
    # Where the organization is not known (no backend configured), the parts must agree.
    (tmp_path / "Pulumi.site-platform.yaml").write_text(
        yaml.safe_dump({"config": {SITE_KEY: misspelt}}, sort_keys=False))
    [p] = refused(tmp_path, "site-su1")
    assert "site-platform names organisation/gpu-cluster/site-core" in p.message


@pytest.mark.parametrize(("parts", "message"), [
    ({"site-platform": {"part": "platform"}}, "no nodes part owns SU(s) [1]"),
    ({"site-su1": {"part": "nodes", "sus": [1]}, "site-workloads": {"part": "workloads"}},
     "a workloads part reads the queues and network attachments the platform part publishes"),
    ({"site-su1": {"part": "nodes", "sus": [3]}}, "a nodes part owns existing SUs"),
    ({"site-su1": {"part": "nodes", "sus": [1]}, "site-platform": {"part": "platform",
                                                                   "sus": [1]}},
     "only a nodes part owns SUs, not part platform"),
])
def test_parts_that_cannot_work_are_refused(tmp_path: Path, parts: dict[str, Any],
                                            message: str) -> None:
    write_site(tmp_path, parts)
    core = yaml.safe_load((tmp_path / "Pulumi.site-core.yaml").read_text())["config"]
    problems = refused(tmp_path, "site-core", own=core[CLUSTER_KEY], site=None)
    assert any(message in p.message for p in problems), [p.message for p in problems]


# ---------------------------------------------------------------- at run time: the references


@pytest.fixture()
def site(tmp_path: Path) -> tuple[Any, Any, dict[str, Any]]:
    """The core and its SU 1 part as resolved, and the core's outputs once applied."""
    write_site(tmp_path)
    core = yaml.safe_load((tmp_path / "Pulumi.site-core.yaml").read_text())["config"]
    core_cluster = resolve(tmp_path, "site-core", core[CLUSTER_KEY], None)
    server = site_facts.core_site(core_cluster)["apiEndpoint"]
    outputs = {"site": site_facts.core_site(core_cluster),
               "kubeconfig": yaml.safe_dump({"clusters": [{"cluster": {"server": server}}]})}
    return core_cluster, resolve(tmp_path, "site-su1"), outputs


def test_a_part_whose_core_applied_this_config_may_run(site: Any) -> None:
    _, su1, outputs = site
    assert site_facts.readiness_problems(su1, "site-su1", outputs, nodes=su1.nodes) == []


def test_a_config_change_the_core_has_not_applied_stops_the_part(site: Any) -> None:
    """E.g. a Kubernetes upgrade: the control plane first, then the kubelets."""
    _, su1, outputs = site
    newer = su1.model_copy(update={"kubernetes": su1.kubernetes.model_copy(
        update={"version": "1.35.3"})})
    [problem] = site_facts.readiness_problems(newer, "site-su1", outputs)
    assert "last applied a different site config" in problem
    assert problem.endswith(f"run `pulumi up` on {CORE} first")


def test_a_node_the_core_does_not_know_stops_its_join_but_a_removal_does_not(
        site: Any) -> None:
    core, su1, outputs = site
    known = dict(outputs["site"]["nodes"])
    outputs["site"]["nodes"] = {k: v for k, v in known.items() if k != "gpu-node-07"}
    [problem] = site_facts.readiness_problems(su1, "site-su1", outputs, nodes=su1.nodes)
    assert "does not know node(s) gpu-node-07 as configured" in problem
    # A node the part dropped while the core still has it: the removal order, no harm.
    outputs["site"]["nodes"] = {**known, "gpu-node-99": "sha256:0"}
    assert site_facts.readiness_problems(su1, "site-su1", outputs, nodes=su1.nodes) == []


def test_a_replaced_board_is_a_node_the_core_must_learn_first(site: Any) -> None:
    _, su1, outputs = site
    outputs["site"]["nodes"]["gpu-node-03"] = "sha256:an-older-board"
    [problem] = site_facts.readiness_problems(su1, "site-su1", outputs, nodes=su1.nodes)
    assert "gpu-node-03" in problem and "a replaced board" in problem


def test_another_sites_core_is_refused_by_its_endpoint(site: Any) -> None:
    _, su1, outputs = site
    outputs["site"]["apiEndpoint"] = "https://10.99.0.10:6443"
    outputs["kubeconfig"] = yaml.safe_dump(
        {"clusters": [{"cluster": {"server": "https://10.99.0.10:6443"}}]})
    problems = site_facts.readiness_problems(su1, "site-su1", outputs)
    assert len(problems) == 2
    assert all("another site's core" in p for p in problems)


def test_a_missing_core_or_kubeconfig_output_stops_the_part(site: Any) -> None:
    _, su1, outputs = site
    [problem] = site_facts.readiness_problems(su1, "site-su1", {})
    assert f"{CORE} has no outputs: it has not been applied yet" in problem
    problems = site_facts.readiness_problems(su1, "site-su1", {**outputs, "kubeconfig": ""})
    assert problems == [f"{CORE} has no `kubeconfig` output: run `pulumi up` on that core "
                        "stack first, or correct the name (organization/gpu-cluster/<stack> "
                        "on a file:// backend, <org>/gpu-cluster/<stack> on Pulumi Cloud)"]


def test_ownership_the_core_has_not_applied_stops_the_part(site: Any) -> None:
    _, su1, outputs = site
    outputs["site"]["parts"]["site-su1"] = {"part": "nodes", "sus": [2]}
    [problem] = site_facts.readiness_problems(su1, "site-su1", outputs)
    assert "has not applied this stack's part" in problem
