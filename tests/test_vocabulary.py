"""A label the stack sets and the pack reads is spelled once, in the pack's vocabulary
(policies/gpu_guardrails/vocabulary.py), which the stack loads by path: a renamed label cannot
leave a rule reading one the stack no longer sets.

The acceptance chooser (components/planning/acceptance_run.py) and the offline acceptance note
run without the project, so they keep copies; the test below holds those equal."""

from __future__ import annotations

import ast
from pathlib import Path

from support.project import REPO

from components.model import pack_data
from components.planning import acceptance_run, labels
from offline import acceptance

VOCABULARY = pack_data.load("vocabulary")
STANDALONE = {REPO / "components/planning/acceptance_run.py", REPO / "offline/acceptance.py"}


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
    assert acceptance_run.UNTESTED == acceptance.UNTESTED == VOCABULARY.UNTESTED_LABEL
