"""The hosts and GPU nodes: names, addresses, logins and keys, the control plane's quorum."""

from __future__ import annotations

from collections.abc import Iterator

from components.model.checks.common import duplicates, hostname_paths, management_ips
from components.model.cluster import Cluster
from components.model.fields import Problem, key_id


def node_expansion(c: Cluster) -> Iterator[Problem]:
    """What merging template, ranges, overrides and inventory found (`gpu_nodes`)."""
    yield from c.expansion.problems


def decommissioned_nodes_exist(c: Cluster) -> Iterator[Problem]:
    """Nodes being decommissioned are nodes of this stack."""
    nodes = c.nodes
    defined = {n.hostname for n in nodes}
    for i, host in enumerate(c.gpu_nodes.decommission):
        if host not in defined:
            yield Problem(f"gpuNodes.decommission[{i}]", host, "is not a GPU node of this stack",
                          "name a node its gpuNodes ranges define; once a node is removed from "
                          "the ranges, drop it from decommission too")


def ssh_user_not_root(c: Cluster) -> Iterator[Problem]:
    """Planned reboots need a login that /run/nologin keeps out."""
    if c.ssh_user == "root":
        # A planned reboot schedules `shutdown -r +1`, whose /run/nologin keeps the check after
        # the reboot from logging in before the host went down; pam_nologin exempts root.
        yield Problem("sshUser", c.ssh_user, "root logins pass /run/nologin, so the check after "
                      "a planned reboot could run on the host before it went down",
                      "log in as an unprivileged user with passwordless sudo (e.g. ubuntu)")


def credential_problems(c: Cluster) -> Iterator[Problem]:
    creds = c.credentials
    if creds.ssh_public_key is None:
        if c.environment == "production":
            yield Problem("credentials.sshPublicKey", None, "is required in production: "
                          "without it a new SSH key reaches every host unreviewed",
                          "paste the public half of sshPrivateKey (`ssh-keygen -y -f <key>`)")
        if creds.ssh_authorized_keys:
            yield Problem("credentials.sshAuthorizedKeys", len(creds.ssh_authorized_keys),
                          "needs credentials.sshPublicKey (the key in use is always authorised)",
                          "set credentials.sshPublicKey to the public half of sshPrivateKey")
        return
    seen = {key_id(creds.ssh_public_key): "credentials.sshPublicKey"}
    for i, key in enumerate(creds.ssh_authorized_keys):
        path = f"credentials.sshAuthorizedKeys[{i}]"
        if key_id(key) in seen:
            yield Problem(path, key_id(key), f"is the key of {seen[key_id(key)]} again",
                          "list each key once (the key in use is authorised already)")
        seen.setdefault(key_id(key), path)


def unique_hostnames(c: Cluster) -> Iterator[Problem]:
    """Every host and GPU node has its own name (names become Kubernetes names)."""
    host_paths, node_paths = hostname_paths(c)
    storage = [(f"fabric.storageServers[{i}].hostname", s.hostname)
               for i, s in enumerate(c.fabric.storage_servers)]
    for path, value, first in duplicates(host_paths + node_paths + storage):
        yield Problem(path, value, f"hostname already used at {first}",
                      "give every host a unique hostname (node names become Kubernetes names)")


def unique_addresses(c: Cluster) -> Iterator[Problem]:
    """Management and BMC addresses: each used once, inside the management network."""
    nodes = c.nodes
    ips = management_ips(c)
    for path, value, first in duplicates(ips):
        yield Problem(path, str(value), f"management IP already used at {first}",
                      "give every host its own management IP")
    for path, ip in ips:
        if ip not in c.network.management_cidr:
            yield Problem(path, str(ip), f"outside network.managementCidr "
                          f"{c.network.management_cidr}",
                          "use an address inside the management network or widen it")
    bmcs = [(f"hosts[{i}].bmcAddress", h.bmc_address) for i, h in enumerate(c.hosts)]
    bmcs += [(f"{n.origin} ({n.hostname}).bmcAddress", n.bmc_address) for n in nodes]
    for path, value, first in duplicates(bmcs):
        yield Problem(path, str(value), f"BMC address already used at {first}",
                      "give every BMC its own address")


def known_hosts(c: Cluster) -> Iterator[Problem]:
    """Overrides and inventory rows name hosts the stack defines."""
    nodes = c.nodes
    host_paths, node_paths = hostname_paths(c)
    known = {h for _, h in host_paths + node_paths}
    gpu_hosts = {n.hostname for n in nodes}
    for host in sorted(set(c.gpu_nodes.overrides) - gpu_hosts):
        yield Problem(f"gpuNodes.overrides.{host}", host,
                      "overrides a node no gpuNodes range defines",
                      "fix the hostname or add the node to a gpuNodes range (hosts[] entries "
                      "are configured in place)")
    defined = known | {r.hostname(i) for r in c.gpu_nodes.ranges for i in range(r.count)}
    for host in sorted(set(c.inventory.nodes) - defined):
        yield Problem("inventoryFile", host,
                      f"{c.inventory.source} describes a host the stack does not define",
                      "remove the host from the inventory or add it to gpuNodes")


def control_plane_quorum(c: Cluster) -> Iterator[Problem]:
    """An odd etcd quorum, and a free VIP inside the management network for HA."""
    ips = management_ips(c)
    cp = c.control_plane
    if len(cp) not in (1, 3, 5):
        yield Problem("hosts", [h.hostname for h in cp],
                      f"{len(cp)} control-plane hosts: etcd needs an odd quorum",
                      "use 1 control-plane host, or 3 (or 5) with kubernetes."
                      "controlPlaneEndpoint.vip set")
    elif len(cp) > 1 and c.kubernetes.control_plane_endpoint.vip is None:
        yield Problem("kubernetes.controlPlaneEndpoint.vip", None,
                      f"{len(cp)} control-plane hosts need a virtual IP",
                      "set a free management-network address as the kube-vip VIP")
    vip = c.kubernetes.control_plane_endpoint.vip
    if vip is not None and vip not in c.network.management_cidr:
        yield Problem("kubernetes.controlPlaneEndpoint.vip", str(vip),
                      "VIP outside network.managementCidr", "pick a management-network address")
    for path, ip in ips:
        if vip is not None and ip == vip:
            yield Problem("kubernetes.controlPlaneEndpoint.vip", str(vip),
                          f"is also {path}", "give kube-vip an address no host uses")
