"""No chain of `depends_on` grows with the cluster.

The Pulumi Python SDK checks every `depends_on` edge for a cycle by walking the dependency's
transitive `depends_on` with nested generators (pulumi/runtime/resource_cycle_breaker.py): a
chain as long as the cluster makes a preview quadratic in the node count and, past about a
thousand links, overflows Python's recursion limit. The real stack is previewed at two sizes
that both hold a full SU (32 nodes, the longest lane any per-node sequence may form) and the
longest path must not move when the cluster quadruples."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.project import REPO, copy_repo, run_offline

from offline.bench import scale_gpu_nodes

pytestmark = pytest.mark.slow

SU_NODES = 32  # a DGX SuperPOD scalable unit: the most GPU nodes one lane of upgrades holds
PER_NODE_STEPS = 3  # drain, upgrade, uncordon: the commands one node adds to its SU's lane


def longest_paths(plan: Mapping[str, Any]) -> dict[str, list[str]]:
    """For every resource, its longest `depends_on` path (names, the resource first). A
    component stands for its custom descendants, as the SDK expands it
    (pulumi/runtime/rpc.py `_add_dependency`)."""
    res = {r["urn"]: r for r in plan["resources"]}
    children: dict[str, list[str]] = {}
    for r in plan["resources"]:
        children.setdefault(r.get("parent") or "", []).append(r["urn"])

    def expand(urn: str) -> list[str]:
        if res.get(urn, {}).get("custom", True):
            return [urn]
        return [d for c in children.get(urn, []) for d in expand(c)]

    deps = {u: [d for x in r["options"].get("dependsOn", []) for d in expand(x)]
            for u, r in res.items()}
    memo: dict[str, list[str]] = {}
    for start in res:  # iteratively, deepest first: no recursion as deep as a bad chain
        stack = [start]
        while stack:
            u = stack[-1]
            todo = [d for d in deps[u] if d not in memo and d in res]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if u not in memo:
                best = max((memo[d] for d in deps[u] if d in memo), key=len, default=[])
                memo[u] = [res[u]["name"], *best]
    return memo


@functools.cache
def _prod_doc() -> str:
    return (REPO / "Pulumi.prod.yaml").read_text()


def _plan(tmp: Path, slots: int) -> dict[str, Any]:
    project = copy_repo(tmp / f"n{slots}")
    stack = f"chain{slots}"
    doc = scale_gpu_nodes(yaml.safe_load(_prod_doc()), slots)
    (project / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = run_offline(project, "preview", "--stack", stack, "--quiet")
    # 3: the generated nodes have no pinned host keys (a mandatory policy); the plan is whole.
    assert proc.returncode in (0, 3), proc.stdout[-3000:]
    return json.loads((project / "build" / stack / "plan.json").read_text())


def test_the_longest_dependency_chain_is_an_sus_not_the_clusters(tmp_path: Path) -> None:
    small, large = _plan(tmp_path, 64), _plan(tmp_path, 256)
    path = {n: max(longest_paths(p).values(), key=len) for n, p in ((64, small), (256, large))}
    assert len(path[256]) == len(path[64]), (
        f"the longest depends_on path grew with the cluster: {len(path[64])} links at 64 "
        f"nodes, {len(path[256])} at 256: {' <- '.join(path[256][:12])} …")
    # The one per-node sequence ordered in the graph is an SU's upgrade lane; everything else
    # (preparation, the planned reboot, the join, the control planes, the layers above) is a
    # constant number of links.
    lane = SU_NODES * PER_NODE_STEPS
    assert lane <= len(path[256]) <= lane + 40, " <- ".join(path[256])


def test_a_chain_as_long_as_the_cluster_is_found() -> None:
    """The measure itself: a chain of n commands is n long, a fan-in of n is 2."""
    def plan(edges: dict[str, list[str]]) -> dict[str, Any]:
        return {"resources": [{"urn": u, "name": u, "custom": True, "parent": "",
                               "options": {"dependsOn": d}} for u, d in edges.items()]}
    chain = {f"c{i}": [f"c{i - 1}"] if i else [] for i in range(1500)}
    assert len(longest_paths(plan(chain))["c1499"]) == 1500
    fan = {"top": [f"n{i}" for i in range(1500)], **{f"n{i}": [] for i in range(1500)}}
    assert len(longest_paths(plan(fan))["top"]) == 2
