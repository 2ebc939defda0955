"""A split site: the part this stack is and the parts its core names."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from components.model.cluster import Cluster
from components.model.fields import Problem


def split_part(c: Cluster) -> Iterator[Problem]:
    """A split stack's part owns what its part may own; only the core lists the parts, and
    the references are filled in, never written."""
    sp = c.split
    if sp is None:
        return
    if sp.part != "core" and sp.parts:
        yield Problem("split.parts", sorted(sp.parts), f"only the core part lists the site's "
                      f"parts, not part {sp.part}", "remove split.parts")
    if sp.part != "core":
        return  # the rest of a part's split is read from the core's parts, checked there
    for key, value in (("kubernetesStack", sp.kubernetes_stack),
                       ("platformStack", sp.platform_stack)):
        if value is not None:
            yield Problem(f"split.{key}", value, "is filled in for the other parts from their "
                          "gpu-cluster:site, never written in the core", f"remove split.{key}")
    if sp.sus:
        yield Problem("split.sus", list(sp.sus), "only a nodes part owns SUs, not part core",
                      "remove split.sus")
    yield from _site_parts(sp.parts, sorted({n.su for n in c.nodes}))


def _site_parts(parts: Mapping[str, Any], sus: list[int]) -> Iterator[Problem]:
    """The core's `parts`: each SU owned by exactly one nodes part, one platform part (which a
    workloads part needs) and one workloads part at most."""
    owners: dict[int, list[str]] = {}
    for stack, part in sorted(parts.items()):
        path = f"split.parts.{stack}.sus"
        if part.part == "nodes" and (not part.sus or set(part.sus) - set(sus)):
            yield Problem(path, list(part.sus), f"a nodes part owns existing SUs (this "
                          f"cluster has {sus})", "list the SUs whose GPU nodes it manages")
        if part.part != "nodes" and part.sus:
            yield Problem(path, list(part.sus), f"only a nodes part owns SUs, not part "
                          f"{part.part}", "remove its sus")
        for su in part.sus if part.part == "nodes" else ():
            owners.setdefault(su, []).append(stack)
    for su, stacks in sorted(owners.items()):  # each owner is told who the others are
        for stack in stacks if len(stacks) > 1 else ():
            yield Problem(f"split.parts.{stack}.sus", list(parts[stack].sus),
                          f"SU {su} is also owned by part "
                          f"{', '.join(s for s in stacks if s != stack)}: both would join, "
                          "and reset, its nodes", "give each SU to exactly one nodes part")
    if parts and (orphans := [su for su in sus if su not in owners]):
        yield Problem("split.parts", sorted(parts), f"no nodes part owns SU(s) {orphans}: "
                      "their GPU nodes would never join", "add them to a nodes part's sus")
    for kind in ("platform", "workloads"):
        named = sorted(s for s, p in parts.items() if p.part == kind)
        if len(named) > 1:
            yield Problem("split.parts", named, f"a site has one {kind} part",
                          f"keep one of {named}")
    kinds = {p.part for p in parts.values()}
    if "workloads" in kinds and "platform" not in kinds:
        yield Problem("split.parts", sorted(parts), "a workloads part reads the queues and "
                      "network attachments the platform part publishes, and there is none",
                      "add a part with part: platform")
