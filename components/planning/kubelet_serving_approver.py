#!/usr/bin/python3
"""Approves the kubelet serving certificates the inventory vouches for — installed by
gpu-cluster; do not edit. Run by gpu-cluster-kubelet-serving.timer on every control-plane host.

kube-controller-manager signs kubernetes.io/kubelet-serving CSRs but never approves them.
Approved here only when all of these hold (the signer's rules, kubernetes.io/docs/reference/
access-authn-authz/certificate-signing-requests/#kubernetes-signers, plus the inventory):

- a node asked (spec.username system:node:<name>) and the inventory lists <name>;
- the subject is exactly O=system:nodes, CN=system:node:<name>, nothing else;
- one subjectAltName extension, each name in it DNS:<name> or one of <name>'s inventory
  addresses, at least one, none twice;
- the usages are digital signature and server auth, key encipherment optional;
- the request is signed by its own key.

The request is read with an X.509 parser (python3-cryptography), never from openssl's text: a
DNS name is compared whole, so one holding a control character, a wildcard or anything but a
hostname is another name, and denied. Anything else from a listed node, or from a requester
that is no node, is denied: a node's credentials cannot buy a certificate for another node's
address. A node the inventory does not list yet is left pending: an update that adds it lists
it first, and the kubelet waits.

Standard library and python3-cryptography only, no project imports: the control planes run
this file as it is (tests run it against a real API server and signer).

Usage: approve-kubelet-serving [KUBECONFIG [KUBELETS]]; KUBELETS lines are `name address...`.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence

from cryptography import x509
from cryptography.x509.oid import NameOID

SIGNER = "kubernetes.io/kubelet-serving"
NODE_PREFIX = "system:node:"
# RFC 1123 host names, as the inventory's names are: labels of letters, digits and hyphens.
HOSTNAME = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*")
USAGES = ({"digital signature", "server auth"},
          {"digital signature", "key encipherment", "server auth"})


def _shown(value: str) -> str:
    """A requester's value as the log may print it: control characters escaped."""
    return json.dumps(value)[1:-1]


def objection(node: str, pem: bytes, usages: Sequence[str], addresses: Sequence[str]) -> str:
    """Why the CSR may not have a serving certificate for `node`; "" to approve it."""
    try:
        csr = x509.load_pem_x509_csr(pem)
        valid = csr.is_signature_valid
        subject = [(a.oid, a.value) for a in csr.subject]
        sans = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "it names no DNS name or address"
    except Exception as err:  # what cannot be parsed is not vouched for
        return f"its request cannot be read as one CSR ({_shown(str(err))})"
    if not valid:
        return "its request is not signed by its own key"
    want = [(NameOID.ORGANIZATION_NAME, "system:nodes"), (NameOID.COMMON_NAME, NODE_PREFIX + node)]
    if sorted(subject, key=str) != sorted(want, key=str):
        return (f"its subject is {_shown(csr.subject.rfc4514_string())} "
                f"(want CN={NODE_PREFIX}{node},O=system:nodes)")
    allowed = {ipaddress.ip_address(a) for a in addresses}
    seen: list[object] = []
    for name in sans:
        if isinstance(name, x509.DNSName):
            if name.value != node or not HOSTNAME.fullmatch(name.value):
                return f"it names DNS:{_shown(name.value)} (only DNS:{node} and {node}'s addresses)"
        elif isinstance(name, x509.IPAddress):
            if name.value not in allowed:
                return (f"it names IP Address:{name.value}, not an address of {node} in the "
                        f"inventory ({' '.join(addresses)})")
        else:
            return f"it names {_shown(str(name))} (only DNS:{node} and {node}'s addresses)"
        if name.value in seen:
            return f"it names {_shown(str(name.value))} twice"
        seen.append(name.value)
    if not seen:
        return "it names no DNS name or address"
    if set(usages) not in USAGES or len(usages) != len(set(usages)):
        return (f"its usages are {','.join(sorted(usages))} (want digital signature, server auth "
                "and optionally key encipherment)")
    return ""


def kubelets(text: str) -> dict[str, list[str]]:
    """The inventory's `name address...` lines."""
    return {f[0]: f[1:] for line in text.splitlines() if (f := line.split())}


def decide(csr: Mapping, inventory: Mapping[str, Sequence[str]]) -> tuple[str, str]:
    """("approve" | "deny" | "pending", why) for one pending CSR of the signer."""
    spec = csr.get("spec", {})
    requester = spec.get("username", "")
    if not requester.startswith(NODE_PREFIX):
        return "deny", f"requested by {_shown(requester)}, not by a node"
    node = requester[len(NODE_PREFIX):]
    if node not in inventory:
        return "pending", f"{_shown(node)} is not in the inventory"
    why = objection(node, base64.b64decode(spec.get("request", "")), spec.get("usages", []),
                    inventory[node])
    return ("deny", f"for {node}: {why}") if why else (
        "approve", f"for {node} ({' '.join(inventory[node])})")


def main(argv: list[str]) -> int:
    kubeconfig = argv[1] if len(argv) > 1 else "/etc/kubernetes/kubelet-serving-approver.conf"
    path = argv[2] if len(argv) > 2 else "/etc/kubernetes/gpu-cluster-kubelets"

    def k(*args: str) -> str:
        return subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], check=True,
                              capture_output=True, text=True).stdout

    try:
        with open(path) as f:
            inventory = kubelets(f.read())
    except FileNotFoundError:
        print(f"no {path} yet: nothing approved", file=sys.stderr)
        return 0
    listed = json.loads(k("get", "csr", "--field-selector", f"spec.signerName={SIGNER}",
                          "-o", "json"))
    for csr in listed["items"]:
        if csr.get("status", {}).get("conditions"):
            continue  # decided already
        name = csr["metadata"]["name"]
        verdict, why = decide(csr, inventory)
        if verdict == "approve":
            print(f"{name}: approved {why}")
            k("certificate", "approve", name)
        elif verdict == "deny":
            print(f"{name}: denied {why}", file=sys.stderr)
            k("certificate", "deny", name)
        else:
            print(f"{name}: left pending: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
