"""The stack's one Kubernetes provider, and rendered manifests registered as the matching
pulumi-kubernetes resources."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

# Typed classes for the core kinds the stack renders; everything else is a CustomResource.
KINDS: dict[tuple[str, str], Any] = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "PersistentVolume"): k8s.core.v1.PersistentVolume,
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("apps/v1", "DaemonSet"): k8s.apps.v1.DaemonSet,
    ("storage.k8s.io/v1", "CSIDriver"): k8s.storage.v1.CSIDriver,
    ("networking.k8s.io/v1", "Ingress"): k8s.networking.v1.Ingress,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("autoscaling/v2", "HorizontalPodAutoscaler"): k8s.autoscaling.v2.HorizontalPodAutoscaler,
    ("scheduling.k8s.io/v1", "PriorityClass"): k8s.scheduling.v1.PriorityClass,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"):
        k8s.rbac.v1.ClusterRoleBinding,
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"):
        k8s.admissionregistration.v1.ValidatingAdmissionPolicy,
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"):
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding,
}


def cluster_provider(cluster_name: str, kubeconfig: Any,
                     opts: pulumi.ResourceOptions | None = None) -> k8s.Provider:
    """The provider every Kubernetes resource uses, from the cluster's own kubeconfig.

    `cluster_identifier` pins the provider's identity to the cluster: without it, any change
    that leaves the kubeconfig unknown at preview (e.g. a rotated SSH key re-running the command
    that reads it) makes the provider plan its own replacement, and with it every Kubernetes
    object's. `delete_unreachable` is pinned off so PULUMI_K8S_DELETE_UNREACHABLE in a runner's
    environment can never make a refresh drop the cluster's objects from state."""
    return k8s.Provider(
        "kubernetes", kubeconfig=pulumi.Output.secret(kubeconfig),
        cluster_identifier=cluster_name, delete_unreachable=False,
        enable_server_side_apply=True, opts=opts)


def resource_name(manifest: dict) -> str:
    """Named by kind, namespace and name: never by position, unique across kinds."""
    meta = manifest["metadata"]
    parts = [manifest["kind"].lower(), meta.get("namespace"), meta["name"]]
    return "-".join(p for p in parts if p)


def apply(manifest: dict, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    api, kind = manifest["apiVersion"], manifest["kind"]
    body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    cls = KINDS.get((api, kind))
    if cls is None:
        return k8s.apiextensions.CustomResource(
            resource_name(manifest), api_version=api, kind=kind, opts=opts, **body
        )
    # Typed classes take snake_case arguments for the object's top-level fields
    # (PriorityClass.preemptionPolicy -> preemption_policy); nested values stay as they are.
    return cls(resource_name(manifest), opts=opts,
               **{re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower(): v for k, v in body.items()})


class KustomizeDirectory(k8s.kustomize.v2.Directory):
    """`kustomize.v2.Directory` with its `resources` output typed as the list the provider
    returns. The pulumi-kubernetes 4.25.0 SDK (the release `make engine` builds) types it as a
    string, so once a real provider answers, the program stops with "Unexpected type. Expected
    'list' got str" (pulumi-kubernetes#3389, fixed in 4.30.0)."""

    @property
    @pulumi.getter
    def resources(self) -> pulumi.Output[Sequence[Any] | None]:  # type: ignore[override]
        return pulumi.get(self, "resources")
