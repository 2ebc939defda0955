"""The parts of a split site kept one site (pure; reads the project's stack files): each part
names a core stack this project has, holds the core's cluster config exactly (only `split`
differs), and no SU is owned by two nodes stacks. Checked before anything is registered, so a
part that drifted from its core, or a mistyped `kubernetesStack`, previews as a config error.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from components.config_types import CLUSTER_KEY, PROJECT, Problem

_MAX_DIFFERENCES = 5


def _stack_cluster(project_dir: Path, stack: str) -> Mapping[str, Any] | None:
    """The `gpu-cluster:cluster` object of Pulumi.<stack>.yaml; None without one."""
    path = project_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return None
    doc = yaml.safe_load(path.read_text()) or {}
    cluster = (doc.get("config") or {}).get(CLUSTER_KEY)
    return cluster if isinstance(cluster, Mapping) else None


def _stacks(project_dir: Path) -> dict[str, Mapping[str, Any]]:
    found = {}
    for path in sorted(project_dir.glob("Pulumi.*.yaml")):
        stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        cluster = _stack_cluster(project_dir, stack)
        if cluster is not None:
            found[stack] = cluster
    return found


def _differences(ours: Any, theirs: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(key path, ours, theirs) wherever two config objects differ."""
    if isinstance(ours, Mapping) and isinstance(theirs, Mapping):
        for key in sorted(set(ours) | set(theirs), key=str):
            yield from _differences(ours.get(key), theirs.get(key),
                                    f"{path}.{key}" if path else str(key))
    elif isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            yield from _differences(a, b, f"{path}[{i}]")
    elif ours != theirs:
        yield path, ours, theirs


def _without_split(cluster: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cluster.items() if k != "split"}


def site_problems(raw: Mapping[str, Any], stack: str, project_dir: Path) -> list[Problem]:
    """What keeps this stack's part from being one site with its core and sibling parts. Both
    sides are read from their stack files the same way (when this stack has one), so a
    difference is one in the files, never one of parsing."""
    split = raw.get("split")
    if not isinstance(split, Mapping) or split.get("part") == "core":
        return []  # an unsplit stack or the core reads no other file
    reference = split.get("kubernetesStack")
    if not isinstance(reference, str):
        return []  # the model's own check names the missing key
    stacks = _stacks(project_dir)  # every stack file, read once
    raw = stacks.get(stack, raw)
    cores = sorted(s for s, c in stacks.items()
                   if isinstance(c.get("split"), Mapping) and c["split"].get("part") == "core")
    org, _, rest = reference.partition("/")
    project, _, core = rest.partition("/")
    fix = (f"name the core stack of this site: {org}/{PROJECT}/<stack> with one of "
           f"{', '.join(cores)}" if cores else "add the core part's stack file (split.part: core)")
    core_cluster = stacks.get(core)
    if project != PROJECT or core_cluster is None:
        return [Problem("split.kubernetesStack", reference,
                        f"names no stack of this project ({PROJECT}, stack files Pulumi.<stack>"
                        ".yaml here)", fix)]
    core_split = core_cluster.get("split")
    if not isinstance(core_split, Mapping) or core_split.get("part") != "core":
        return [Problem("split.kubernetesStack", reference,
                        f"names stack {core}, which is not a core part (its split.part is "
                        f"{core_split.get('part') if isinstance(core_split, Mapping) else None})",
                        fix)]
    problems = [
        Problem(path, ours, f"differs from the core stack's Pulumi.{core}.yaml ({theirs!r}): "
                "the parts of a split site share one cluster config, only `split` differs",
                "make it equal in every part's stack file (the core's and this one), then "
                "preview every part")
        for path, ours, theirs in list(_differences(_without_split(raw),
                                                    _without_split(core_cluster)))[
            :_MAX_DIFFERENCES]]
    return problems + _shared_sus(split, stack, stacks, core)


def _shared_sus(split: Mapping[str, Any], stack: str, stacks: Mapping[str, Mapping[str, Any]],
                core: str) -> list[Problem]:
    """An SU owned by two nodes stacks of one core would be joined, and reset, by both."""
    ours = set(split.get("sus") or ())
    problems = []
    for other, cluster in sorted(stacks.items()):
        other_split = cluster.get("split")
        if other == stack or not isinstance(other_split, Mapping):
            continue
        if other_split.get("part") != "nodes" or \
                str(other_split.get("kubernetesStack", "")).rpartition("/")[2] != core:
            continue
        for su in sorted(ours & set(other_split.get("sus") or ())):
            problems.append(Problem("split.sus", sorted(ours),
                                    f"SU {su} is also owned by stack {other}: both would join "
                                    "and reset its nodes",
                                    "give each SU to exactly one nodes stack"))
    return problems
