"""Changes `pulumi up` must never be let to make, judged against what the stack deployed last
(pure): the same rules the offline preview's impact marks REFUSED (offline/impact.py), here
for the engine's own `pulumi preview`, which reads what is deployed from the stack's outputs."""

from __future__ import annotations

from collections.abc import Sequence

from components.model.cluster import Cluster
from components.planning.kubeadm import endpoint
from components.planning.ssh_keys import fingerprint


def version_skew(deployed: str, new: str) -> str | None:
    """kubeadm's version skew policy: one minor at a time, never back."""
    o, n = ([int(x) for x in v.split(".")] for v in (deployed, new))
    if n < o or n[0] != o[0] or n[1] - o[1] > 1:
        return (f"kubernetes.version {deployed} -> {new}: kubeadm upgrades one minor version at "
                "a time and never back (its version skew policy); set it to "
                f"{o[0]}.{o[1] + 1}.x at most, or back to {deployed}")
    return None


def authorised_keys(cluster: Cluster) -> list[str]:
    """Fingerprints of the keys every host authorises once this config is applied."""
    c = cluster.credentials
    keys = [*([c.ssh_public_key] if c.ssh_public_key else []), *c.ssh_authorized_keys]
    return sorted({fingerprint(k) for k in keys})


def unauthorised_key(deployed: Sequence[str], cluster: Cluster) -> str | None:
    """The login key no host authorises yet: every command would fail to log in."""
    key = cluster.credentials.ssh_public_key
    if key is None or not deployed or fingerprint(key) in deployed:
        return None
    return (f"credentials.sshPublicKey {fingerprint(key)}: no host authorises it yet, so every "
            "command would fail to log in; first add it to credentials.sshAuthorizedKeys alone "
            "and apply, then change sshPublicKey and the sshPrivateKey secret (docs/day2.md)")


def endpoint_moved(deployed: str, new: str) -> str | None:
    """The API endpoint kubeadm init wrote into every certificate and kubeconfig cannot move:
    "Turning a single control plane cluster created without --control-plane-endpoint into a
    highly available cluster is not supported by kubeadm" (kubernetes.io, "Creating a cluster
    with kubeadm"), and no other move is either."""
    if deployed == new:
        return None
    return (f"kubernetes.controlPlaneEndpoint {deployed} -> {new}: kubeadm init wrote "
            f"{deployed} into the API server's certificate, every kubeconfig and every "
            "kubelet's, and kubeadm cannot move a running cluster to another endpoint (nor "
            "turn a single control plane into several); keep the endpoint (more control "
            "planes join one that has a VIP), or build the new cluster as a new stack "
            "(docs/day2.md, \"Control planes\")")


def refusals(cluster: Cluster, deployed_version: str | None,
             deployed_keys: Sequence[str] | None,
             deployed_endpoint: str | None = None) -> list[str]:
    """Every refusal of this config against what is deployed (nothing deployed: none)."""
    found = [version_skew(deployed_version, cluster.kubernetes.version)
             if deployed_version else None,
             unauthorised_key(deployed_keys or [], cluster),
             endpoint_moved(deployed_endpoint, endpoint(cluster)) if deployed_endpoint else None]
    return [r for r in found if r]
