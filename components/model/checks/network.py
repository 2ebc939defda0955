"""Address ranges the cluster hands out: the RDMA network's per-node blocks and kubeadm's per-node
pod ranges."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from components.model.cluster import Cluster
from components.model.fields import Problem
from components.model.tunables import PER_NODE_BLOCK

# kubeadm leaves kube-controller-manager's --node-cidr-mask-size at 24: every node gets a /24 of
# the pod CIDR, and a node that finds none left never gets a pod network (it stays NotReady).
NODE_CIDR_MASK = 24


def address_plan(c: Cluster) -> Iterator[Problem]:
    """Management, pod, service, RDMA, load-balancer and LNet ranges are disjoint and sized."""
    nets = [("network.managementCidr", c.network.management_cidr),
            ("kubernetes.podCidr", c.kubernetes.pod_cidr),
            ("kubernetes.serviceCidr", c.kubernetes.service_cidr),
            ("network.rdmaCidr", c.network.rdma_cidr),
            ("network.loadBalancerCidr", c.network.load_balancer_cidr)]
    if c.network.bmc_cidr:
        nets.append(("network.bmcCidr", c.network.bmc_cidr))
    nets.append(("storage.lnetAddresses.cidr", c.storage.lnet_addresses.cidr))
    for i, (pa, a) in enumerate(nets):
        for pb, b in nets[i + 1:]:
            if a.overlaps(b):
                yield Problem(pb, str(b), f"overlaps {pa} {a}",
                              "use disjoint ranges for management, pods, services, RDMA and "
                              "the Lustre servers' IPoIB subnet")
    yield from _pod_cidr_problems(c)
    rdma = c.network.rdma_cidr
    need = (len(c.nodes) + 1) * PER_NODE_BLOCK  # nv-ipam's block per node, and a spare
    if need > rdma.num_addresses:
        yield Problem("network.rdmaCidr", str(rdma), f"holds {rdma.num_addresses} addresses, "
                      f"fewer than {len(c.nodes)} GPU nodes x {PER_NODE_BLOCK} pod addresses "
                      "per node (+ one spare block)",
                      f"use a /{rdma.max_prefixlen - (need - 1).bit_length()} or larger")
    first, last = c.network.ingress_pool
    lb = c.network.load_balancer_cidr
    if first > last or first not in lb or last not in lb:
        yield Problem("network.ingressPool", [str(first), str(last)],
                      "not an ascending range inside network.loadBalancerCidr",
                      "give MetalLB [first, last] addresses on the service network "
                      f"({lb}), never on the management network")


def _pod_cidr_problems(c: Cluster) -> Iterator[Problem]:
    pod = c.kubernetes.pod_cidr
    kubelets = len(c.control_plane) + len(c.nodes)
    blocks = 2 ** (NODE_CIDR_MASK - pod.prefixlen) if pod.prefixlen <= NODE_CIDR_MASK else 0
    if blocks < kubelets:
        need = NODE_CIDR_MASK - (kubelets - 1).bit_length()
        wider = ipaddress.ip_network(f"{pod.network_address}/{need}", strict=False)
        yield Problem("kubernetes.podCidr", str(pod),
                      f"holds {blocks} per-node /{NODE_CIDR_MASK} pod ranges for {kubelets} "
                      "nodes (kubeadm gives each node a /24); the rest would never get a pod "
                      "network", f"use a /{need} or larger, e.g. {wider}, clear of the other "
                      "ranges")
