"""A label the stack sets and the pack reads is spelled once, in the pack's vocabulary
(policies/gpu_guardrails/vocabulary.py), which the stack loads by path: a renamed label cannot
leave a rule reading one the stack no longer sets. So is every resource name the stack mints
(policies/gpu_guardrails/resource_names.py): the runbook, the impact and the pack look a name's
role up there, and cannot miss a resource the components name anew.

The acceptance chooser (components/planning/acceptance_run.py) runs without the project, so it
keeps a copy; the test below holds it equal."""

from __future__ import annotations

import ast
from pathlib import Path

from support.project import REPO

from components.model import pack_data
from components.planning import acceptance_run, labels, names
from offline import acceptance

VOCABULARY = pack_data.load("vocabulary")
NAMES = pack_data.load("resource_names")
STANDALONE = {REPO / "components/planning/acceptance_run.py"}


def _names() -> dict[str, str]:
    return {k: v for k, v in vars(VOCABULARY).items() if k.isupper() and isinstance(v, str)}


def _literals(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_no_vocabulary_name_is_spelled_anywhere_else() -> None:
    spelled = set(_names().values()) - {VOCABULARY.LABEL_PREFIX, VOCABULARY.NODE_LABEL_PREFIX}
    assert VOCABULARY.SU_LABEL in spelled and VOCABULARY.PURPOSE_LABEL in spelled
    found = sorted(f"{p.relative_to(REPO)}: {lit}"
                   for root in ("components", "policies", "offline", "twin")
                   for p in (REPO / root).rglob("*.py")
                   if p.name != "vocabulary.py" and p not in STANDALONE
                   for lit in _literals(p) & spelled)
    assert found == []


def test_the_stack_reads_the_packs_vocabulary() -> None:
    for name, value in _names().items():
        assert getattr(labels, name) == value, name
    assert labels.node_label("rack") == "node-restriction.kubernetes.io/gpucluster-rack"


def test_the_standalone_copies_equal_the_vocabulary() -> None:
    assert acceptance_run.UNTESTED == acceptance.untested() == VOCABULARY.UNTESTED_LABEL


# The benchmark counts a plan's names after each hostname, to show one its table does not
# explain: it reads them as text, as a reader of the plan does.
MEASURED = {REPO / "offline/bench.py"}


def test_no_resource_name_is_minted_or_read_anywhere_else() -> None:
    """Neither a role's `-<role>` nor a name minted alone is spelled outside the table (the
    planning code's texts may name a file or a volume like a resource: kubeadm's
    `encryption-config` volume)."""
    roles = {f"-{role}" for role in NAMES.LAYERS}
    assert {"-opensm", "-config", "-kubeadm-init", "-member", "-reboot"} <= roles
    found = sorted(f"{p.relative_to(REPO)}: {lit}"
                   for root in ("components", "policies", "offline", "twin", "e2e")
                   for p in (REPO / root).rglob("*.py")
                   if p.name != "resource_names.py" and p not in MEASURED
                   for lit in _literals(p) & (roles if "planning" in p.parts
                                              else roles | NAMES.ALONE))
    assert found == []


def test_a_name_is_minted_and_looked_up_by_the_same_table() -> None:
    assert names.name(names.OPENSM, "sm-01") == "sm-01-opensm"
    assert names.name(names.SWITCH_CONFIG, "leaf-su1-r0-1") == "leaf-su1-r0-1-config"
    assert names.role_of("gpu-node-03-reboot-wait") == (names.REBOOT_WAIT, "gpu-node-03")
    assert names.subject("gpu-node-03-reboot-wait", names.REBOOT) is None
    assert names.subject("sm-02-opensm-rejoin", names.OPENSM) is None
    # The kubelet's configuration is named alone, not a switch called `kubelet`.
    assert names.role_of(names.KUBELET_CONFIG) is None
    assert names.subject("spine-01-config", names.SWITCH_CONFIG, "fabric") == "spine-01"
    assert names.subject("spine-01-config", names.SWITCH_CONFIG, "bootstrap") is None


def test_a_component_type_token_is_spelled_once() -> None:
    """The kubeadm cluster's and the fabrics' type tokens (the pack's rules and the preview
    find their published facts by them) are spelled in the table only."""
    tokens = {NAMES.CLUSTER_TYPE, NAMES.COMPUTE_FABRIC_TYPE, NAMES.STORAGE_FABRIC_TYPE,
              NAMES.SITE_FACTS_TYPE}
    assert "gpucluster:bootstrap:KubeadmCluster" in tokens
    found = sorted(f"{p.relative_to(REPO)}: {lit}"
                   for root in ("components", "policies", "offline", "twin", "e2e")
                   for p in (REPO / root).rglob("*.py")
                   if p.name != "resource_names.py"
                   for lit in _literals(p) & tokens)
    assert found == []
