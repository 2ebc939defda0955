"""Rules on what the cluster exposes: the inference API's authentication and paths, the
workload namespaces' default-deny network policies, the load-balancer pool."""

from __future__ import annotations

from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ResourceValidationArgs,
    StackValidationArgs,
)

from .common import (
    TRAINING_JOB_TYPES,
    containers,
    env_of,
    name_of,
    namespace_of,
    pod_gpus,
    pod_templates,
    site_resources,
)
from .registry import Report, get, is_list, is_map, resource_rule, stack_rule

MANDATORY = EnforcementLevel.MANDATORY
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def _serves_vllm(c: Any) -> bool:
    return "vllm" in str(get(c, "image") or "")


@resource_rule(
    "inference-api-key",
    "vLLM servers require an API key, read from a Secret",
    MANDATORY,
    (DEPLOYMENT,),
)
def inference_api_key(args: ResourceValidationArgs, report: Report) -> None:
    """Without --api-key (VLLM_API_KEY) every /v1 route answers anyone who reaches the port: a
    free GPU cluster for the network. The key comes from a Secret, so it is in no spec,
    rendering or state."""
    for path, c in containers(args.resource_type, args.props):
        if not _serves_vllm(c):
            continue
        key = env_of(c).get("VLLM_API_KEY")
        if get(key, "valueFrom", "secretKeyRef", "name") is None:
            report(f"{path} ({get(c, 'image')}) sets no VLLM_API_KEY from a secretKeyRef: its "
                   "API answers without authentication")


@resource_rule(
    "ingress-publishes-an-api-prefix",
    "Ingresses publish an API prefix, never a whole server",
    MANDATORY,
    ("kubernetes:networking.k8s.io/v1:Ingress",),
)
def ingress_publishes_an_api_prefix(args: ResourceValidationArgs,
                                    report: Report) -> None:
    """A `/` prefix publishes every route of the backend: vLLM's /metrics, /docs and /tokenize
    with the API. Route the API's prefix (/v1) only."""
    rules = get(args.props, "spec", "rules")
    for i, rule in enumerate(rules if is_list(rules) else []):
        paths = get(rule, "http", "paths")
        for j, p in enumerate(paths if is_list(paths) else []):
            if get(p, "path") in (None, "", "/") and get(p, "pathType") != "Exact":
                report(f"spec.rules[{i}].http.paths[{j}] publishes the whole backend "
                       f"({get(p, 'path') or '/'}, {get(p, 'pathType')})")


def _default_deny(props: Any) -> bool:
    selector = get(props, "spec", "podSelector")
    types = get(props, "spec", "policyTypes")
    return (is_map(selector) and not get(selector, "matchLabels")
            and not get(selector, "matchExpressions")
            and is_list(types) and "Ingress" in types and not get(props, "spec", "ingress"))


@stack_rule(
    "workload-namespaces-deny-by-default",
    "Every namespace with GPU workloads denies ingress by default",
    MANDATORY,
)
def workload_namespaces_deny_by_default(args: StackValidationArgs,
                                        report: Report) -> None:
    """Calico admits all pod traffic until a policy selects the pod: any pod could reach a
    model server's port or a training job's rendezvous. A namespace-wide default deny, then
    one allow per path the stack needs, is the baseline."""
    denying = {namespace_of(r.props) for r in site_resources(args.resources)
               if r.resource_type == NETWORK_POLICY and _default_deny(r.props)}
    seen: set[str] = set()
    for r in args.resources:
        if r.resource_type not in (DEPLOYMENT, *TRAINING_JOB_TYPES):
            continue
        if not any(pod_gpus(spec) for _, _, spec in pod_templates(r.resource_type, r.props)):
            continue
        ns = namespace_of(r.props)
        if ns not in denying and ns not in seen:
            seen.add(ns)
            report(f"namespace {ns!r} runs GPU workloads ({name_of(r)!r}) with no default-deny "
                   "NetworkPolicy (podSelector {}, policyTypes [Ingress], no ingress rule)",
                   r.urn)


@resource_rule(
    "load-balancer-pool-not-auto-assigned",
    "MetalLB pools hand addresses only to Services that name them",
    MANDATORY,
    ("kubernetes:metallb.io/v1beta1:IPAddressPool",),
)
def load_balancer_pool_not_auto_assigned(args: ResourceValidationArgs,
                                         report: Report) -> None:
    """An auto-assigned pool gives any `type: LoadBalancer` Service, in any namespace, an
    address reachable from outside: a forgotten debug Service publishes a model server."""
    if get(args.props, "spec", "autoAssign") is not False:
        report("spec.autoAssign is not false: every LoadBalancer Service gets an address")
