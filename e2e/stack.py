"""The e2e stack: prod's cluster with every endpoint the engine dials moved onto this machine.

Management addresses (hosts, GPU nodes, switches) move into 127.77.0.0/16 and BMCs into
127.78.0.0/16, keeping their low 16 bits, so the cluster's shape, names and plan are prod's. Every
host and switch gets the host key its simulated sshd serves, and the stack authorises the e2e
client key. Pure: the caller writes the files and makes the keys."""

from __future__ import annotations

import copy
import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, ip_address
from typing import Any

CLUSTER_KEY = "gpu-cluster:cluster"
STACK = "e2e"
MANAGEMENT = IPv4Network("127.77.0.0/16")
BMC = IPv4Network("127.78.0.0/16")


@dataclass(frozen=True)
class Keys:
    client_public: str  # the public half of the stack's sshPrivateKey
    host_keys: Mapping[str, str]  # host or switch name -> its "ssh-ed25519 AAAA…" host key


def moved(address: str, into: IPv4Network) -> str:
    """The address with its network part replaced by `into`'s (a /16 keeps the low 16 bits)."""
    host_bits = int(ip_address(address)) & int(into.hostmask)
    return str(IPv4Address(int(into.network_address) + host_bits))


def e2e_stack(prod: Mapping[str, Any], keys: Keys, charts: str) -> dict[str, Any]:
    """The e2e stack file's document from prod's: same cluster, local endpoints, the keys of
    the simulated hosts, the charts from the archives in `charts` and the Training Operator
    vendored (nothing is fetched from outside)."""
    doc = copy.deepcopy(dict(prod))
    c = doc["config"][CLUSTER_KEY]
    net = c["network"]
    net["managementCidr"], net["bmcCidr"] = str(MANAGEMENT), str(BMC)
    for host in c["hosts"]:
        host["managementIp"] = moved(host["managementIp"], MANAGEMENT)
        host["bmcAddress"] = moved(host["bmcAddress"], BMC)
        host["sshHostKey"] = keys.host_keys[host["hostname"]]
    endpoint = c["kubernetes"]["controlPlaneEndpoint"]
    if endpoint.get("vip"):  # kube-vip's address, on the management network
        endpoint["vip"] = moved(endpoint["vip"], MANAGEMENT)
    for r in c["gpuNodes"]["ranges"]:
        r["managementIpStart"] = moved(r["managementIpStart"], MANAGEMENT)
        r["bmcAddressStart"] = moved(r["bmcAddressStart"], BMC)
    fabric = c["fabric"]
    fabric["switchManagementIps"] = {name: moved(ip, MANAGEMENT)
                                     for name, ip in fabric["switchManagementIps"].items()}
    fabric["switchHostKeys"] = {name: keys.host_keys[name] for name in fabric["switchHostKeys"]}
    c["credentials"]["sshPublicKey"] = keys.client_public
    c["credentials"]["sshAuthorizedKeys"] = []
    c["platform"]["charts"] = {"archives": charts}
    c["platform"]["trainingOperator"]["source"] = "vendored"
    return doc


def e2e_inventory(prod_csv: str, host_keys: Mapping[str, str]) -> str:
    """The inventory with each GPU node's host key replaced by its simulated sshd's."""
    rows = list(csv.DictReader(io.StringIO(prod_csv)))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        if row.get("sshHostKey"):
            row["sshHostKey"] = host_keys[row["hostname"]]
        writer.writerow(row)
    return out.getvalue()
