"""The offline runtime's shortcuts give the SDK's answers, and work done aside comes back.

The runtime replaces two SDK steps that cost more than they tell offline: the cycle check on
every `depends_on` edge and the thread hop of every monitor call. The check's expected verdicts
are the SDK's own `resource_cycle_breaker.declare_dependency`, run on the same edges."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulumi.runtime import resource_cycle_breaker as breaker
from support.project import REPO

from offline.aside import Aside
from offline.runtime import cycle_check


class _Node:  # what the cycle check sees of a resource: an object with an identity
    pass


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=40))
def test_the_cycle_check_gives_the_sdks_verdict_on_every_edge(
        edges: list[tuple[int, int]]) -> None:
    sdk_nodes, our_nodes = [_Node() for _ in range(8)], [_Node() for _ in range(8)]
    ours = cycle_check()
    for a, b in edges:
        assert ours(our_nodes[a], our_nodes[b]) == \
            breaker.declare_dependency(sdk_nodes[a], sdk_nodes[b]), (a, b, edges)


PROGRAM = """
import pulumi
import pulumi_kubernetes as k8s

group = pulumi.ComponentResource("test:index:Group", "group")
# A child that waits for its own parent waits for itself: the SDK refuses it.
k8s.core.v1.ConfigMap("child", data={"a": "b"},
                      opts=pulumi.ResourceOptions(parent=group, depends_on=[group]))
"""

RUN = """
import sys
from pathlib import Path
from offline.runtime import ProgramFailed, run_program
from offline.stackconfig import load_stack_config
project = Path(sys.argv[1])
try:
    run_program(project, load_stack_config(project, "t"), timeout=60)
except ProgramFailed as failed:
    print("refused:", failed.error)
else:
    print("ran")
"""


def test_a_dependency_cycle_is_refused_offline_with_the_sdks_error(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: t\nruntime: python\n")
    (tmp_path / "Pulumi.t.yaml").write_text("config: {}\n")
    (tmp_path / "__main__.py").write_text(PROGRAM)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", RUN, str(tmp_path)], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert "refused: We have detected a circular dependency" in proc.stdout, \
        proc.stdout + proc.stderr


def test_work_done_aside_comes_back() -> None:
    parent = os.getpid()
    assert Aside(lambda: ("answer", os.getpid() != parent)).result() == ("answer", True)


def _fails() -> None:
    raise ValueError("the pack's own error")


def test_an_error_raised_aside_is_raised_here_with_where_it_was_raised() -> None:
    with pytest.raises(ValueError, match="the pack's own error") as caught:
        Aside(_fails).result()
    assert any("in _fails" in note for note in getattr(caught.value, "__notes__", []))


def test_a_process_killed_aside_is_an_error_not_an_empty_answer() -> None:
    with pytest.raises(RuntimeError, match="killed by signal 9"):
        Aside(lambda: os.kill(os.getpid(), 9)).result()
