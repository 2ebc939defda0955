"""What the parts of a split site publish for each other, and the checks a part makes on its
references before it touches a host or the API server (pure).

Every part exports `site`: the fingerprint of the site config it last applied (every setting
but the GPU node list and `split`, so adding or removing a node changes no fingerprint), and
what it owns. The core also exports the ownership map and each node's identity (SU, MAC and
rail GUIDs: what its port maps and subnet-manager files were written for); the core and the
platform export `facts` the others' policies read (HCA names; queues and network
attachments). The order these checks enforce: a change to the site config reaches the core
first (control plane before kubelets), then the nodes parts and the platform, then the
workloads; a node joins only once the core knows it. Removals go the other way round, and
need no check: a node the core still knows is no harm to a part that dropped it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from components.model.cluster import Cluster
from components.model.gpu_nodes import GpuNode
from components.planning.kubeadm import endpoint


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else str(value)


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=_plain)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def fingerprint(cluster: Cluster) -> str:
    """The site config, less the GPU node list and `split`: equal in every part of one site."""
    return _digest(cluster.model_dump(by_alias=True, exclude={"split", "gpu_nodes"},
                                      warnings=False))


def node_identity(node: GpuNode) -> str:
    """What the core's switch port maps and subnet-manager files know a node by."""
    return _digest({"su": node.su, "slot": node.slot, "rack": node.rack,
                    "mac": node.management_mac,
                    "rails": [[r.index, r.hca, r.port_guid] for r in node.rails]})


def ownership(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The core's parts: stack -> {part, sus}."""
    parts = cluster.split.parts if cluster.split else {}
    return {stack: {"part": p.part, "sus": list(p.sus)} for stack, p in sorted(parts.items())}


def core_site(cluster: Cluster) -> dict[str, Any]:
    return {"fingerprint": fingerprint(cluster), "parts": ownership(cluster),
            "apiEndpoint": f"https://{endpoint(cluster)}",
            "nodes": {n.hostname: node_identity(n) for n in cluster.nodes}}


def part_site(cluster: Cluster, nodes: Sequence[GpuNode] = ()) -> dict[str, Any]:
    return {"fingerprint": fingerprint(cluster), "nodes": sorted(n.hostname for n in nodes)}


def part_view(core: Mapping[str, Any], stack: str, hosts: Iterable[str]) -> dict[str, Any]:
    """The core's outputs as the part `stack` reads them: its own entry of the ownership map
    and its own nodes' identities, not every node of the site. A part reads the core through
    this alone, so a change to another SU's nodes leaves what it reads, and its preview,
    unchanged (the site preview reruns only parts whose reads changed)."""
    view = {k: core[k] for k in ("kubeconfig", "facts") if k in core}
    site = core.get("site")
    if isinstance(site, Mapping):
        own = set(hosts)
        parts, nodes = (v if isinstance(v := site.get(k), Mapping) else {}
                        for k in ("parts", "nodes"))
        view["site"] = {**{k: site[k] for k in ("fingerprint", "apiEndpoint") if k in site},
                        "parts": {stack: parts[stack]} if stack in parts else {},
                        "nodes": {h: i for h, i in nodes.items() if h in own}}
    return view


def cabled_hcas(fabric_facts: Mapping[str, Any]) -> list[str]:
    """The HCA names the fabric's switch commands cable (the fabric facts' `rails`)."""
    return sorted({hca for rails in (fabric_facts.get("rails") or {}).values()
                   for rail in rails.values() for hca in rail.get("hcas", ())})


def platform_facts(objects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The objects the platform part creates that the workloads part's policies judge against
    (Volcano queues, network attachments, network policies), as it registers them: the pack
    applies its own rules to them, so nothing here decides what they mean."""
    return {"objects": [
        {"apiVersion": o["apiVersion"], "kind": o["kind"],
         "metadata": {k: v for k, v in o["metadata"].items()
                      if k in ("name", "namespace", "annotations")},
         "spec": o.get("spec", {})}
        for o in objects if o["kind"] in PUBLISHED_KINDS]}


PUBLISHED_KINDS = ("Queue", "NetworkAttachmentDefinition", "NetworkPolicy")


def _core_problems(cluster: Cluster, stack: str, core: Mapping[str, Any], core_stack: str,
                   nodes: Sequence[GpuNode]) -> list[str]:
    run_core = f"run `pulumi up` on {core_stack} first"
    site = core.get("site")
    if not isinstance(site, Mapping):
        return [f"{core_stack} has no `site` output (not applied yet, or applied by an older "
                f"version of this program): {run_core}"]
    problems = []
    want = f"https://{endpoint(cluster)}"
    if site.get("apiEndpoint") != want:
        problems.append(f"{core_stack} runs the API server at {site.get('apiEndpoint')}, this "
                        f"site's config says {want}: the reference names another site's core")
    if site.get("fingerprint") != fingerprint(cluster):
        problems.append(f"{core_stack} last applied a different site config (fingerprint "
                        f"{str(site.get('fingerprint'))[:19]}…, this config "
                        f"{fingerprint(cluster)[:19]}…): a change reaches the core first "
                        f"(control plane before kubelets): {run_core}")
    applied = (site.get("parts") or {}).get(stack)
    own = {"part": cluster.split.part, "sus": list(cluster.split.sus)} if cluster.split else {}
    if own != applied:
        problems.append(f"{core_stack} has not applied this stack's part ({own}; applied: "
                        f"{applied}): {run_core}")
    known = site.get("nodes") or {}
    new = [n.hostname for n in nodes if known.get(n.hostname) != node_identity(n)]
    if new:
        shown = ", ".join(new[:5]) + (f" and {len(new) - 5} more" if len(new) > 5 else "")
        problems.append(f"{core_stack} does not know node(s) {shown} as configured (new, or a "
                        "replaced board): its switch ports and subnet managers must know a "
                        f"node before it joins: {run_core}")
    return problems


def kubeconfig_problems(cluster: Cluster, core_stack: str, kubeconfig: Any) -> list[str]:
    """The referenced kubeconfig must reach this site's API server (its `server`)."""
    try:
        doc = yaml.safe_load(kubeconfig) if isinstance(kubeconfig, str) else None
    except yaml.YAMLError:
        doc = None
    clusters = doc.get("clusters") if isinstance(doc, Mapping) else None
    if not isinstance(clusters, list) or not clusters:
        return [f"{core_stack}'s `kubeconfig` output is not a kubeconfig (no clusters)"]
    want = f"https://{endpoint(cluster)}"
    servers = sorted({str((c.get("cluster") or {}).get("server")) for c in clusters
                      if isinstance(c, Mapping)})
    return [] if servers == [want] else [
        f"{core_stack}'s `kubeconfig` reaches {', '.join(servers)}, not this site's API "
        f"server {want}: the reference names another site's core"]


def readiness_problems(cluster: Cluster, stack: str, core: Mapping[str, Any],
                       platform: Mapping[str, Any] | None = None,
                       nodes: Sequence[GpuNode] = ()) -> list[str]:
    """Why this part must not run yet against what its references last applied (empty when
    it may): `core` and `platform` are those stacks' outputs."""
    split = cluster.split
    core_stack = split.kubernetes_stack if split else None
    if not core:
        return [f"{core_stack} has no outputs: it has not been applied yet (run `pulumi up` on "
                "it first), or the name is wrong (organization/gpu-cluster/<stack> on a "
                "file:// backend, <org>/gpu-cluster/<stack> on Pulumi Cloud)"]
    problems = _core_problems(cluster, stack, core, str(core_stack), nodes)
    if not core.get("kubeconfig"):
        problems.insert(0, f"{core_stack} has no `kubeconfig` output: run `pulumi up` on that "
                        "core stack first, or correct the name (organization/gpu-cluster/"
                        "<stack> on a file:// backend, <org>/gpu-cluster/<stack> on Pulumi "
                        "Cloud)")
    else:
        problems += kubeconfig_problems(cluster, str(core_stack), core["kubeconfig"])
    if platform is not None and split is not None:
        site = platform.get("site")
        if not isinstance(site, Mapping) or site.get("fingerprint") != fingerprint(cluster):
            problems.append(f"{split.platform_stack} has not applied this site config (its "
                            "queues and network attachments may not fit these workloads): "
                            f"run `pulumi up` on {split.platform_stack} first")
    return problems
