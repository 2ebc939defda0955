"""Inference service rules: probes, disruption budget, autoscaling floor, tensor parallelism and
TLS on the API.

Props are what the engine passes: camelCase keys, read-only mappings, numbers as floats.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ResourceValidationArgs,
    StackValidationArgs,
)

from .common import (
    config,
    container_gpus,
    containers,
    gpu_workload,
    name_of,
    namespace_of,
    pod_containers,
    pod_templates,
    qty,
)
from .registry import Report, get, is_list, is_map, resource_rule, stack_rule

MANDATORY = EnforcementLevel.MANDATORY
DEPLOYMENT = "kubernetes:apps/v1:Deployment"

@resource_rule(
    "inference-probes",
    "GPU Deployments have startup, readiness and liveness probes",
    MANDATORY,
    (DEPLOYMENT,),
)
def inference_probes(args: ResourceValidationArgs, report: Report) -> None:
    """Loading 140 GB of weights takes minutes: without a startup probe the liveness probe
    kills the pod mid-load forever; without readiness, traffic reaches a server that cannot
    answer; without liveness a wedged CUDA context keeps its GPUs."""
    for path, _meta, spec in pod_templates(args.resource_type, args.props):
        for cpath, c in pod_containers(path, spec, init=False):
            if not container_gpus(c):
                continue
            missing = [p for p in ("startupProbe", "readinessProbe", "livenessProbe")
                       if not is_map(get(c, p))]
            if missing:
                report(f"{cpath} has no {', '.join(missing)}")


def _selects(selector: Any, labels: Any) -> bool:
    ml = get(selector, "matchLabels")
    if not is_map(ml) or not ml or not is_map(labels):
        return False
    return all(get(labels, k) == v for k, v in ml.items())


@stack_rule(
    "inference-pdb",
    "Every GPU Deployment is covered by a PodDisruptionBudget",
    MANDATORY,
)
def inference_pdb(args: StackValidationArgs, report: Report) -> None:
    """Node drains (driver upgrades, the Network Operator's OFED rollout, a removed worker)
    would otherwise evict every replica of a model at once: minutes of outage while the
    weights reload."""
    pdbs = [r for r in args.resources
            if r.resource_type == "kubernetes:policy/v1:PodDisruptionBudget"]
    for r in args.resources:
        if r.resource_type != DEPLOYMENT or not gpu_workload(r):
            continue
        labels = get(r.props, "spec", "template", "metadata", "labels")
        ns = namespace_of(r.props)
        if not any(namespace_of(p.props) == ns and _selects(get(p.props, "spec", "selector"),
                                                            labels) for p in pdbs):
            report(f"Deployment {name_of(r)!r} has no PodDisruptionBudget selecting its pods",
                   r.urn)


@resource_rule(
    "inference-hpa-min-replicas",
    "Inference autoscalers keep at least two replicas (production)",
    MANDATORY,
    ("kubernetes:autoscaling/v2:HorizontalPodAutoscaler",),
)
def inference_hpa_min_replicas(args: ResourceValidationArgs, report: Report) -> None:
    """One replica means every node drain, OOM or driver reset is an outage of the endpoint.
    Config: minReplicas (2); lower the level for a dev stack."""
    minimum = config(args, "minReplicas", 2)
    value = qty(get(args.props, "spec", "minReplicas"))
    if value is None:
        value = 1  # the Kubernetes default
    if value < minimum:
        report(f"spec.minReplicas is {value}; production needs at least {minimum}")
    maximum = qty(get(args.props, "spec", "maxReplicas"))
    if isinstance(maximum, int) and maximum < value:
        report(f"spec.maxReplicas {maximum} is below minReplicas {value}")


# vLLM's parallel sizes: an engine spans tensor x pipeline GPUs; data parallel runs that many
# engines side by side behind the one API server.
_SIZES = ("tensor", "pipeline", "data")
_SIZE_ARG = re.compile(r"^--(tensor|pipeline|data)-parallel-size(?:=(\d+))?$")


def _parallel_sizes(c: Any) -> dict[str, int | None] | None:
    """The sizes the container's command line sets (absent: 1; unreadable: None); None when
    it sets none (not a vLLM server's command line)."""
    items = [a for a in (*(get(c, "command") or ()), *(get(c, "args") or ()))
             if isinstance(a, str)]
    sizes: dict[str, int | None] = dict.fromkeys(_SIZES, 1)
    found = False
    for i, a in enumerate(items):
        m = _SIZE_ARG.match(a)
        if m:
            found = True
            raw = m.group(2) or (items[i + 1] if i + 1 < len(items) else "")
            sizes[m.group(1)] = int(raw) if str(raw).isdigit() else None
    return sizes if found else None


@resource_rule(
    "vllm-engines-fill-the-gpus",
    "An inference server's engines use exactly the GPUs its container gets",
    MANDATORY,
    (DEPLOYMENT, "kubernetes:apps/v1:StatefulSet"),
)
def vllm_engines_fill_the_gpus(args: ResourceValidationArgs, report: Report) -> None:
    """vLLM runs --data-parallel-size engines of --tensor-parallel-size x
    --pipeline-parallel-size GPUs each: more than the pod has fails at start-up after the
    scheduler placed it; fewer leaves paid-for GPUs idle."""
    for path, c in containers(args.resource_type, args.props):
        sizes = _parallel_sizes(c)
        gpus = container_gpus(c)
        if sizes is None or None in sizes.values() or not gpus:
            continue
        used = math.prod(v for v in sizes.values() if v is not None)
        if used != gpus:
            shown = " x ".join(f"{k} {v}" for k, v in sizes.items())
            report(f"{path} runs {used} GPUs of engines ({shown}) but the container gets "
                   f"{gpus} GPUs")


@resource_rule(
    "ingress-tls",
    "Every Ingress host is served with TLS",
    MANDATORY,
    ("kubernetes:networking.k8s.io/v1:Ingress",),
)
def ingress_tls(args: ResourceValidationArgs, report: Report) -> None:
    """Prompts and completions are user data and the API carries bearer tokens; plain HTTP
    through the bare-metal load balancer exposes both on the management network."""
    tls = get(args.props, "spec", "tls")
    covered = {h for t in (tls or ()) for h in (get(t, "hosts") or ())}
    secrets = [get(t, "secretName") for t in (tls or ())]
    if not is_list(tls) or not tls:
        report("spec.tls is empty; add a TLS section (cert-manager issues the certificate)")
        return
    if not all(isinstance(s, str) and s for s in secrets):
        report("a spec.tls entry has no secretName")
    for rule in get(args.props, "spec", "rules") or ():
        host = get(rule, "host")
        if isinstance(host, str) and host not in covered:
            report(f"host {host!r} is not covered by spec.tls")
