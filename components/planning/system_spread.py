"""Cluster DNS and the ingress through a control-plane drain (pure, no pulumi).

Every system component runs on the control-plane hosts (release_placement: the GPU nodes'
taint admits only workloads and node agents). With one control plane its drain — a kubelet
upgrade, a planned reboot, a board swap — takes CoreDNS and the ingress controller down with it:
no other host admits them. With several, each keeps two replicas on different control planes
and a PodDisruptionBudget lets a drain evict one replica at a time: the eviction API refuses the
next until the first one's replacement is ready on another control plane.

- CoreDNS is kubeadm's Deployment: two replicas with a preferred anti-affinity on the hostname
  (kubernetes cmd/kubeadm/app/phases/addons/dns/manifests.go, `CoreDNSDeployment`; the
  replica count is kubeadm's constant `CoreDNSReplicas`). kubeadm owns it and `kubeadm upgrade`
  rewrites it, so the stack adds only the budget kubeadm does not create. Its pods stay
  Pending until the CNI runs (kubeadm's troubleshooting guide: "coredns is stuck in the Pending
  state ... expected"), which the stack installs after every control plane has joined: they
  are first scheduled with all of them there, so the anti-affinity spreads them.
- ingress-nginx: two controller replicas that never share a host (a required anti-affinity)
  and the chart's own budget, which it writes once `controller.replicaCount` is above one
  (ingress-nginx 4.13.3 `templates/controller-poddisruptionbudget.yaml`, `minAvailable: 1`).

With one control plane nothing here is rendered: a budget there would only stop the drain
(the evicted replica has nowhere to go), so the drain's DNS and ingress outage is said in the
preview's impact instead.
"""

from __future__ import annotations

from typing import Any

from components.model.cluster import Cluster

COREDNS_SELECTOR = {"k8s-app": "kube-dns"}  # kubeadm's CoreDNS pods and its kube-dns Service
COREDNS_REPLICAS = 2  # kubeadm's CoreDNSReplicas
INGRESS_REPLICAS = 2
# The selector labels of the ingress-nginx chart's controller pods (its _helpers.tpl
# "ingress-nginx.selectorLabels" plus the component): the release is named after the chart.
INGRESS_SELECTOR = {"app.kubernetes.io/name": "ingress-nginx",
                    "app.kubernetes.io/instance": "ingress-nginx",
                    "app.kubernetes.io/component": "controller"}
HOSTNAME = "kubernetes.io/hostname"


def spread(cluster: Cluster) -> bool:
    """Whether another control plane can take a drained one's system pods."""
    return len(cluster.control_plane) > 1


def coredns_budget(cluster: Cluster) -> list[dict[str, Any]]:
    """kube-system's budget for kubeadm's CoreDNS: a drain takes one replica at a time."""
    if not spread(cluster):
        return []
    return [{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": {"name": "coredns", "namespace": "kube-system",
                          "labels": {"app.kubernetes.io/managed-by": "gpu-cluster"}},
             "spec": {"maxUnavailable": 1, "selector": {"matchLabels": COREDNS_SELECTOR}}}]


def ingress_controller_values(cluster: Cluster) -> dict[str, Any]:
    """ingress-nginx's controller: two replicas on two control planes, the chart's budget."""
    if not spread(cluster):
        return {}
    return {"replicaCount": INGRESS_REPLICAS, "minAvailable": 1,
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": INGRESS_SELECTOR},
                 "topologyKey": HOSTNAME}]}}}
