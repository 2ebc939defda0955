"""The refusals the program itself makes against what the stack deployed (its own outputs),
so that the engine's `pulumi preview` fails where `pulumi up` must not go: kubeadm's version
skew policy (one minor at a time, never back), sshd refusing a key no host authorises, and the
API endpoint kubeadm init wrote into every certificate."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.sandbox import prod_cluster

from components.planning import refusals
from offline.diff import Change
from offline.runbook.settings import endpoint_move
from offline.runbook.upgrade import upgrade_refused


@pytest.mark.parametrize(("new", "refused"), [
    ("1.35.2", False), ("1.35.4", False), ("1.36.0", False),  # a patch, the next minor
    ("1.37.0", True),  # skips 1.36
    ("1.34.3", True), ("1.35.1", True),  # back a minor, back a patch
    ("2.0.0", True)])
def test_kubeadm_upgrades_one_minor_at_a_time_and_never_back(new: str, refused: bool) -> None:
    verdict = refusals.version_skew("1.35.2", new)
    assert (verdict is not None) is refused, verdict
    if verdict:
        assert verdict.startswith(f"kubernetes.version 1.35.2 -> {new}: ")
        assert "set it to 1.36.x at most, or back to 1.35.2" in verdict
    # The offline preview keeps its own copy of the rule (it runs without the stack's modules).
    assert upgrade_refused("1.35.2", new) is refused


def _key() -> str:
    return Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def test_a_login_key_no_host_authorises_is_refused_and_its_two_steps_are_not() -> None:
    prod = prod_cluster()
    deployed = refusals.authorised_keys(prod)
    assert refusals.refusals(prod, prod.kubernetes.version, deployed) == []
    new = _key()
    creds = prod.credentials
    swapped = prod.model_copy(update={"credentials": creds.model_copy(
        update={"ssh_public_key": new})})
    (refusal,) = refusals.refusals(swapped, prod.kubernetes.version, deployed)
    assert "no host authorises it yet" in refusal
    # Step 1: the new key authorised alongside; step 2 (after it is applied): the swap.
    step1 = prod.model_copy(update={"credentials": creds.model_copy(
        update={"ssh_authorized_keys": (*creds.ssh_authorized_keys, new)})})
    assert refusals.refusals(step1, prod.kubernetes.version, deployed) == []
    assert refusals.refusals(swapped, prod.kubernetes.version,
                             refusals.authorised_keys(step1)) == []
    # A first `pulumi up`: nothing deployed, nothing to judge against.
    assert refusals.refusals(swapped, None, None) == []


def test_the_api_endpoint_kubeadm_init_wrote_never_moves() -> None:
    """kubeadm cannot move a running cluster to another endpoint, nor turn a single control
    plane built without a shared endpoint into several (kubernetes.io, "Creating a cluster with
    kubeadm"); adding members behind the same VIP is no move."""
    prod = prod_cluster()
    version, keys = prod.kubernetes.version, refusals.authorised_keys(prod)
    assert refusals.refusals(prod, version, keys, "10.10.0.5:6443") == []
    (refusal,) = refusals.refusals(prod, version, keys, "10.10.0.10:6443")
    assert refusal.startswith("kubernetes.controlPlaneEndpoint 10.10.0.10:6443 -> "
                              "10.10.0.5:6443: ")
    assert "build the new cluster as a new stack" in refusal
    # A stack that exported no endpoint yet (deployed before it did): nothing to judge.
    assert refusals.refusals(prod, version, keys, None) == []
    # The offline preview reads the same move from the endpoint the kubeadm cluster publishes.
    def cluster(old: str | None) -> Change:
        return Change(action="update",
                      urn="urn:pulumi:prod::gpu-cluster::gpucluster:bootstrap:KubeadmCluster"
                          "::kubernetes",
                      type="gpucluster:bootstrap:KubeadmCluster", name="kubernetes",
                      layer="bootstrap",
                      values={"facts.controlPlaneEndpoint": (old, "10.10.0.5:6443")})
    assert endpoint_move([cluster("10.10.0.10:6443")]) == ("10.10.0.10:6443", "10.10.0.5:6443")
    # Nor from a state the cluster had not published its endpoint in yet.
    assert endpoint_move([cluster(None)]) is None
