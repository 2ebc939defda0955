"""Kubelet serving certificates, against a real control plane (the twin's kube-apiserver and
kube-controller-manager, built from their Go modules): the approver the control planes run
(components/planning/kubelet_serving_approver.py) with its own RBAC and the prod inventory's
kubelets, on requests made by openssl as a kubelet makes them and on crafted ones (a control
character that once hid another node's address from a text reader, wildcards, duplicates,
other name types).

What the expected verdicts rest on: the kubernetes.io/kubelet-serving signer's rules
(kubernetes.io/docs/reference/access-authn-authz/certificate-signing-requests/
#kubernetes-signers: O=system:nodes, CN=system:node:<name>, DNS or IP names only, usages
digital signature and server auth, key encipherment optional) and the inventory (a node's
certificate may name only its own management address)."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from support.sandbox import prod_cluster
from support.twin import BINS

from components.planning import kubeadm, kubelet_serving
from twin.controlplane import TOKEN, ControlPlane

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not BINS, reason="control-plane binaries not built: run "
                                 "`make k8s-tools` (kube-apiserver, controller-manager, kubectl)")]

CLUSTER = prod_cluster()
NODES = {n.hostname: str(n.management_ip) for n in CLUSTER.nodes}
A, B, C, D, E = sorted(NODES)[:5]
SERVING = ["digital signature", "key encipherment", "server auth"]


def request(tmp: Path, name: str, subject: str, sans: str) -> str:
    """A PEM CSR with a fresh P-256 key, as the kubelet's certificate manager makes one."""
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(tmp / f"{name}.key"),
                    "-subj", subject, "-addext", f"subjectAltName={sans}",
                    "-out", str(tmp / f"{name}.csr")], check=True, capture_output=True)
    return (tmp / f"{name}.csr").read_text()


def crafted(node: str, names: list[x509.GeneralName]) -> str:
    """A node's CSR with exactly these subjectAltNames, built field by field (openssl's config
    syntax cannot carry some of them)."""
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")])
    csr = (x509.CertificateSigningRequestBuilder().subject_name(subject)
           .add_extension(x509.SubjectAlternativeName(names), critical=False)
           .sign(ec.generate_private_key(ec.SECP256R1()), hashes.SHA256()))
    return csr.public_bytes(serialization.Encoding.PEM).decode()


def ip(node: str) -> x509.IPAddress:
    return x509.IPAddress(ipaddress.ip_address(NODES[node]))


def node_request(tmp: Path, node: str, sans: str | None = None) -> str:
    return request(tmp, node, f"/O=system:nodes/CN=system:node:{node}",
                   sans or f"DNS:{node},IP:{NODES[node]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("kubelet-serving")
    with ControlPlane(BINS[-1], work / "cp") as cp:
        cp.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(kubelet_serving.approver_rbac()))
        # The approver's own identity (the admin token, impersonating it: RBAC decides).
        approver = work / "approver.conf"
        config = json.loads(cp.kubeconfig.read_text())
        config["users"][0]["user"] = {"token": TOKEN, "as": kubelet_serving.APPROVER_USER}
        approver.write_text(json.dumps(config))
        kubelets = work / "kubelets"
        kubelets.write_text(kubelet_serving.kubelets(CLUSTER))
        script = work / "approve"
        script.write_text(kubelet_serving.SCRIPT)

        def create(name: str, pem: str, as_user: str | None = None,
                   usages: list[str] = SERVING,
                   signer: str = kubelet_serving.SIGNER) -> subprocess.CompletedProcess[str]:
            csr = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                   "metadata": {"name": name},
                   "spec": {"request": base64.b64encode(pem.encode()).decode(),
                            "signerName": signer, "usages": usages}}
            who = ([f"--as={as_user}", "--as-group=system:nodes",
                    "--as-group=system:authenticated"] if as_user else [])
            return cp.kubectl("create", "-f", "-", *who, stdin=json.dumps(csr), check=False)

        def approve() -> subprocess.CompletedProcess[str]:
            env = {**os.environ, "PATH": f"{BINS[-1]}:{os.environ['PATH']}"}
            return subprocess.run([sys.executable, str(script), str(approver), str(kubelets)],
                                  env=env,
                                  capture_output=True, text=True, timeout=120)

        def state() -> dict[str, str]:
            items = cp.get("csr")["items"]
            return {c["metadata"]["name"]: ",".join(x["type"] for x in c["status"].get(
                "conditions", [])) or "Pending" for c in items}

        tmp = work / "csrs"
        tmp.mkdir()
        node = lambda n: f"system:node:{n}"  # noqa: E731
        create("own", node_request(tmp, A), node(A))
        create("own-no-encipherment", node_request(tmp, B), node(B),
               usages=["digital signature", "server auth"])
        create("dns-only", node_request(tmp, C, f"DNS:{C}"), node(C))
        # A node's credentials asking for another node's address, or another node's name.
        create("other-address", node_request(tmp, D, f"DNS:{D},IP:{NODES[A]}"), node(D))
        create("other-name", node_request(tmp, E, f"DNS:{E},DNS:{A}"), node(E))
        # Crafted: the API server accepts each (Go's parser takes IA5 control characters).
        # A newline ended the SAN line a text reader checked, hiding A's address after it.
        create("control-character", crafted(D, [x509.DNSName(f"{D}\n"), ip(A)]), node(D))
        create("wildcard", crafted(D, [x509.DNSName(f"*.{D}"), ip(D)]), node(D))
        create("duplicate", crafted(B, [x509.DNSName(B), x509.DNSName(B), ip(B)]), node(B))
        create("email", crafted(C, [x509.DNSName(C), x509.RFC822Name(f"root@{C}")]), node(C))
        create("uri", crafted(C, [x509.DNSName(C), x509.UniformResourceIdentifier(
            f"https://{A}")]), node(C))
        # The API server itself (NodeRestriction) refuses a node's CSR for another CN.
        refused = create("other-subject", request(
            tmp, "subject", f"/O=system:nodes/CN=system:node:{A}", f"DNS:{A},IP:{NODES[A]}"),
            node(E))
        create("client-usage", request(tmp, "client", f"/O=system:nodes/CN=system:node:{B}",
                                       f"DNS:{B},IP:{NODES[B]}"), node(B),
               usages=[*SERVING, "client auth"])
        create("not-a-node", node_request(tmp, C))  # the admin, not the kubelet
        create("stranger", request(tmp, "stranger", "/O=system:nodes/CN=system:node:stranger",
                                   "DNS:stranger,IP:10.99.0.1"), node("stranger"))
        # Would mint credentials for the API server: not this approver's signer.
        create("api-client", request(tmp, "api", "/CN=intruder", "DNS:x"),
               signer="kubernetes.io/kube-apiserver-client", usages=["client auth"])
        time.sleep(3)  # the controller manager had its chance
        before = state()
        first, second = approve(), approve()
        cp.wait_for(lambda: all(c["status"].get("certificate") for c in cp.get("csr")["items"]
                                if c["metadata"]["name"] in ("own", "own-no-encipherment",
                                                             "dns-only")),
                    "the controller manager's signature on the approved CSRs", 60)
        yield {"cp": cp, "before": before, "after": state(), "first": first,
               "second": second, "refused": refused, "approver": approver,
               "csrs": {c["metadata"]["name"]: c for c in cp.get("csr")["items"]}}


def test_the_controller_manager_approves_no_serving_certificate(cluster: dict) -> None:
    assert set(cluster["before"].values()) == {"Pending"}, cluster["before"]


def test_only_what_the_inventory_vouches_for_is_approved(cluster: dict) -> None:
    assert cluster["first"].returncode == 0, cluster["first"].stderr
    assert cluster["after"] == {
        "own": "Approved", "own-no-encipherment": "Approved", "dns-only": "Approved",
        "other-address": "Denied", "other-name": "Denied",
        "control-character": "Denied", "wildcard": "Denied", "duplicate": "Denied",
        "email": "Denied", "uri": "Denied",
        "client-usage": "Denied", "not-a-node": "Denied",
        "stranger": "Pending",  # not in the inventory yet: an update that adds it lists it
        "api-client": "Pending",  # another signer: never looked at
    }, cluster["first"].stderr
    log = cluster["first"].stderr
    assert f"not an address of {D} in the inventory" in log
    assert f"it names DNS:{A}" in log
    assert f"it names DNS:{D}\\n (only DNS:{D}" in log  # shown escaped, not as a line break
    assert f"it names DNS:*.{D}" in log and f"it names {B} twice" in log
    assert "stranger is not in" in log


def test_a_node_cannot_even_ask_for_another_nodes_name(cluster: dict) -> None:
    assert cluster["refused"].returncode != 0
    assert f"can only create a node CSR with CN=system:node:{E}" in cluster["refused"].stderr


def test_a_second_run_changes_nothing(cluster: dict) -> None:
    assert cluster["second"].returncode == 0, cluster["second"].stderr
    assert "approved" not in cluster["second"].stdout
    assert "denied" not in cluster["second"].stderr


def test_the_certificate_verifies_against_the_ca_the_api_server_checks_kubelets_with(
        cluster: dict, tmp_path: Path) -> None:
    """kubeadm gives kube-controller-manager pki/ca.crt as --cluster-signing-cert-file; the API
    server verifies kubelets against the same file."""
    flags = {a["name"]: a["value"] for a in
             kubeadm.cluster_configuration(CLUSTER)["apiServer"]["extraArgs"]}
    assert flags["kubelet-certificate-authority"] == "/etc/kubernetes/pki/ca.crt"
    assert kubeadm.kubelet_configuration(CLUSTER)["serverTLSBootstrap"] is True
    cert = tmp_path / "own.crt"
    cert.write_bytes(base64.b64decode(cluster["csrs"]["own"]["status"]["certificate"]))
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(cluster["cp"].ca), str(cert)],
                            capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    text = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    assert f"DNS:{A}, IP Address:{NODES[A]}" in text and "TLS Web Server Authentication" in text


def test_the_approver_can_approve_nothing_else(cluster: dict) -> None:
    """Its identity approves kubelet-serving CSRs only: a client certificate for the API server
    (a credential for any name it likes) stays out of its reach."""
    cp = cluster["cp"]
    proc = subprocess.run([str(BINS[-1] / "kubectl"), f"--kubeconfig={cluster['approver']}",
                           "certificate", "approve", "api-client"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "Forbidden" in proc.stderr, proc.stdout + proc.stderr
    for verb, what in (("create", "pods"), ("get", "secrets"), ("delete", "nodes")):
        can = cp.kubectl("auth", "can-i", verb, what, f"--as={kubelet_serving.APPROVER_USER}",
                         check=False)
        assert can.stdout.strip() == "no", (verb, what)
