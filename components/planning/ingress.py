"""The ingress's address pool (MetalLB) and the certificate issuers its TLS names (cert-manager)
(pure).
"""

from __future__ import annotations

from typing import Any

from components.model.cluster import Cluster

INGRESS_POOL = "ingress"  # MetalLB IPAddressPool ingress-nginx's Service draws from
CLUSTER_ISSUER = "cluster-ca"  # cert-manager ClusterIssuer Ingresses name for their TLS
SELF_SIGNED_ISSUER = "selfsigned"


def metallb_objects(cluster: Cluster) -> list[dict]:
    """The address pool ingress-nginx's LoadBalancer Service draws from (by name: no other
    Service gets an address from it), announced over L2 on the service network."""
    net = cluster.network
    first, last = net.ingress_pool
    ns = cluster.platform.metallb.namespace
    advert: dict[str, Any] = {"ipAddressPools": [INGRESS_POOL]}
    if net.load_balancer_interfaces:
        advert["interfaces"] = list(net.load_balancer_interfaces)
    return [
        {"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
         "metadata": {"name": INGRESS_POOL, "namespace": ns},
         "spec": {"addresses": [f"{first}-{last}"], "autoAssign": False}},
        {"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
         "metadata": {"name": INGRESS_POOL, "namespace": ns}, "spec": advert},
    ]


def cert_manager_objects(cluster: Cluster) -> list[dict]:
    """A private CA for the cluster's ingress TLS: a self-signed issuer signs the CA
    certificate, and the `cluster-ca` ClusterIssuer (named by Ingress annotations) signs with
    it. The CA secret lives in cert-manager's namespace, where ClusterIssuers read secrets."""
    ns = cluster.platform.cert_manager.namespace
    return [
        {"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
         "metadata": {"name": SELF_SIGNED_ISSUER}, "spec": {"selfSigned": {}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
         "metadata": {"name": CLUSTER_ISSUER, "namespace": ns},
         "spec": {"isCA": True, "commonName": f"{cluster.name} cluster CA",
                  "secretName": CLUSTER_ISSUER, "duration": "87600h",
                  "privateKey": {"algorithm": "ECDSA", "size": 256},
                  "issuerRef": {"name": SELF_SIGNED_ISSUER, "kind": "ClusterIssuer",
                                "group": "cert-manager.io"}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
         "metadata": {"name": CLUSTER_ISSUER}, "spec": {"ca": {"secretName": CLUSTER_ISSUER}}},
    ]
