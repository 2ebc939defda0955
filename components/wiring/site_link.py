"""How a part of a split site reaches the stacks it builds on: stack references to its core
(and, for the workloads part, its platform), checked before the part touches anything. Every
secret the part uses waits for the check (`Secrets.after`), and so does its Kubernetes
provider: a part run out of order, or against another site's core, fails its preview with
the reason and the stack to run first, and no host or object is touched."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from components.model.cluster import Cluster
from components.model.gpu_nodes import GpuNode
from components.model.site import SITE_KEY
from components.planning import names
from components.planning.site_facts import part_view, readiness_problems


@dataclass(frozen=True)
class SiteLink:
    core: pulumi.StackReference
    platform: pulumi.StackReference | None
    ready: pulumi.Output[Any]  # resolves once every check passed
    kubeconfig: pulumi.Output[Any]  # the core's, a secret, once ready
    facts: SiteFacts


class SiteFacts(pulumi.ComponentResource):
    """The facts the referenced stacks publish (the core's cabled HCA names, the platform's
    queues, network attachments and network policies), registered in this stack: the engine
    shows stack policies only registered resources (a stack reference is a read, which it
    leaves out) and a component's registered outputs."""

    def __init__(self, name: str, facts: pulumi.Output[Any]) -> None:
        super().__init__(FACTS_TYPE, name, {"facts": facts})
        self.register_outputs({"facts": facts})


FACTS_TYPE = names.SITE_FACTS_TYPE


def _facts(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    core = outputs[0].get("facts") or {}
    platform = (outputs[1].get("facts") or {}) if len(outputs) > 1 else {}
    return {"hcas": core.get("hcas") or [], "objects": platform.get("objects") or []}


def link(cluster: Cluster, stack: str, nodes: Sequence[GpuNode]) -> SiteLink:
    split = cluster.split
    if split is None or split.kubernetes_stack is None:
        raise ValueError("only a part of a split site links to its core")
    core = pulumi.StackReference(split.kubernetes_stack)
    platform = pulumi.StackReference(split.platform_stack) if split.platform_stack else None

    def check(outputs: list[dict[str, Any]]) -> bool:
        problems = readiness_problems(cluster, stack, outputs[0],
                                      outputs[1] if platform else None, nodes)
        if problems:
            raise pulumi.RunError(
                f"{SITE_KEY}: {split.kubernetes_stack}: part {stack} ({split.part}) must not "
                "run yet; nothing was changed:\n" + "\n".join(f"  - {p}" for p in problems))
        return True

    hosts = [n.hostname for n in nodes]
    refs = [core.outputs.apply(lambda outputs: part_view(outputs, stack, hosts)),
            *([platform.outputs] if platform else [])]
    ready = pulumi.Output.all(*refs).apply(check)
    kubeconfig = pulumi.Output.secret(pulumi.Output.all(ready, refs[0]).apply(
        lambda v: v[1]["kubeconfig"]))
    facts = SiteFacts("site-facts", pulumi.Output.all(*refs).apply(_facts))
    return SiteLink(core, platform, ready, kubeconfig, facts)
