"""RDMA and NCCL rules: the pods' RDMA privileges and network attachment, and an NCCL
environment that names interfaces and HCAs the nodes have.

Props are what the engine passes: camelCase keys, read-only mappings, numbers as floats.
"""

from __future__ import annotations

import re
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ResourceValidationArgs,
    StackValidationArgs,
)

from .common import (
    NETWORKS_ANNOTATION,
    RDMA_RESOURCE_ANNOTATION,
    WORKLOAD_TYPES,
    cabled_rails,
    containers,
    env_of,
    env_value,
    kind,
    name_of,
    namespace_of,
    network_names,
    pod_containers,
    pod_gpus,
    pod_interfaces,
    pod_templates,
    published_hcas,
    rdma_resources,
    site_resources,
)
from .registry import Report, get, resource_rule, stack_rule

MANDATORY = EnforcementLevel.MANDATORY

@resource_rule(
    "rdma-ipc-lock-only",
    "RDMA containers add IPC_LOCK and nothing broader (no privileged, no other capabilities)",
    MANDATORY,
    WORKLOAD_TYPES,
)
def rdma_ipc_lock_only(args: ResourceValidationArgs, report: Report) -> None:
    """Verbs pin (lock) GPU and host memory for the HCA's DMA, which needs IPC_LOCK; without it
    NCCL cannot register memory and falls back to sockets. Privileged or SYS_ADMIN would also
    work, and would hand a training image root on the host."""
    for path, c in containers(args.resource_type, args.props):
        if not rdma_resources(c):
            continue
        sc = get(c, "securityContext")
        added = [a for a in (get(sc, "capabilities", "add") or ()) if isinstance(a, str)]
        if "IPC_LOCK" not in added:
            report(f"{path} requests RDMA without securityContext.capabilities.add IPC_LOCK")
        extra = sorted(set(added) - {"IPC_LOCK"})
        if extra:
            report(f"{path} adds {extra}; RDMA needs only IPC_LOCK")
        if get(sc, "privileged") is True:
            report(f"{path} is privileged; RDMA needs only IPC_LOCK")
        if get(sc, "allowPrivilegeEscalation") is True:
            report(f"{path} allows privilege escalation")


@resource_rule(
    "rdma-request-has-network",
    "A pod requesting an RDMA resource also carries its network attachment (and vice versa)",
    MANDATORY,
    WORKLOAD_TYPES,
)
def rdma_request_has_network(args: ResourceValidationArgs, report: Report) -> None:
    """The RDMA device plugin gives the pod the verbs devices, the attachment gives it the
    IPoIB interface NCCL bootstraps over; one without the other makes NCCL fall back to
    NET/Socket (10x slower) without an error."""
    for path, meta, spec in pod_templates(args.resource_type, args.props):
        rdma = [r for _, c in pod_containers(path, spec) for r in rdma_resources(c)]
        nets = network_names(meta)
        if rdma and not nets:
            report(f"{path} requests {sorted(set(rdma))} but has no {NETWORKS_ANNOTATION} "
                   "annotation")
        if nets and pod_gpus(spec) and not rdma:
            report(f"{path} attaches {[n for n, _, _ in nets]} but requests no rdma/ resource")


@stack_rule(
    "rdma-network-attachment-exists",
    "Every network a pod attaches exists as a NetworkAttachmentDefinition for its RDMA resource",
    MANDATORY,
)
def rdma_network_attachment_exists(args: StackValidationArgs, report: Report) -> None:
    """Multus refuses to start a pod whose attachment is missing; an attachment bound to a
    different RDMA resource than the pod requests schedules it onto devices it cannot use. In a
    split site the attachments are the platform part's, read from its `facts` output."""
    nads: dict[tuple[str, str], Any] = {}
    for r in site_resources(args.resources):  # a split site's attachments are the platform's
        if r.resource_type == "kubernetes:k8s.cni.cncf.io/v1:NetworkAttachmentDefinition":
            nads[(namespace_of(r.props), name_of(r))] = r
    for r in args.resources:
        if r.resource_type not in WORKLOAD_TYPES:
            continue
        ns = namespace_of(r.props)
        for path, meta, spec in pod_templates(r.resource_type, r.props):
            wanted = {x for _, c in pod_containers(path, spec) for x in rdma_resources(c)}
            for net, net_ns, _ in network_names(meta):
                nad = nads.get((net_ns or ns, net))
                if nad is None:
                    report(f"{kind(r.resource_type)} {name_of(r)!r} attaches {net!r}; no "
                           f"NetworkAttachmentDefinition {net_ns or ns}/{net} in the stack",
                           r.urn)
                    continue
                res = get(nad.props, "metadata", "annotations", RDMA_RESOURCE_ANNOTATION)
                if wanted and isinstance(res, str) and res not in wanted:
                    report(f"{kind(r.resource_type)} {name_of(r)!r} requests "
                           f"{sorted(wanted)} but {net!r} is bound to {res}", r.urn)


def _ifname_matches(spec: str, interfaces: list[str]) -> list[str]:
    """Interfaces NCCL_SOCKET_IFNAME selects (prefix list; '=' exact; '^' excludes)."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    items = [s for s in spec.lstrip("=").split(",") if s]

    def hit(name: str) -> bool:
        return any(name == i if exact else name.startswith(i) for i in items)

    return [n for n in interfaces if n != "lo" and (hit(n) != exclude)]


@resource_rule(
    "nccl-socket-ifname-exists",
    "NCCL_SOCKET_IFNAME names an interface the pod really has (not the primary eth0 only)",
    MANDATORY,
    WORKLOAD_TYPES,
)
def nccl_socket_ifname_exists(args: ResourceValidationArgs, report: Report) -> None:
    """NCCL bootstraps over the interface this names; a name the pod does not have (ib0 is the
    host's name, the pod sees net1) aborts the job or silently picks the slow primary network.
    The pod's interfaces are lo, eth0 and net1.. per Multus attachment (or the names given)."""
    launcher_rank = get(args.props, "spec", "runLauncherAsWorker") is True
    for path, meta, spec in pod_templates(args.resource_type, args.props):
        if ".Launcher." in path and not launcher_rank:
            continue  # an MPI launcher only runs mpirun (-x forwards the env); it is no rank
        interfaces = pod_interfaces(meta)
        for cpath, c in pod_containers(path, spec):
            value = env_value(c, "NCCL_SOCKET_IFNAME")
            if value is None:
                continue
            chosen = _ifname_matches(value, interfaces)
            if not chosen:
                report(f"{cpath} NCCL_SOCKET_IFNAME={value!r} matches none of the pod's "
                       f"interfaces {interfaces}")
            elif rdma_resources(c) and chosen == ["eth0"]:
                report(f"{cpath} NCCL_SOCKET_IFNAME={value!r} selects only eth0 (the primary "
                       "network), not the RDMA attachment")


_HCA_ITEM = re.compile(r"^([A-Za-z0-9_]+)(?::\d+)?$")


@stack_rule(
    "nccl-ib-hca-exists",
    "NCCL_IB_HCA names exactly the HCAs the GPU nodes are cabled with, matched exactly",
    MANDATORY,
)
def nccl_ib_hca_exists(args: StackValidationArgs, report: Report) -> None:
    """A name the nodes do not have drops that rail (NCCL uses what matches, or falls back to
    sockets when nothing does); a prefix without '=' (mlx5_1) also selects mlx5_10/mlx5_11.
    The HCA names come from the fabric's published facts (the switch port descriptions the
    fabric commands configure), in a split site's other parts from the core's `facts.hcas`
    output through their stack reference; a value that cannot be checked for lack of both is
    reported, not passed."""
    known = {hca for rails in cabled_rails(args.resources).values()
             for hcas, _ in rails.values() for hca in hcas} | published_hcas(args.resources)
    for r in args.resources:
        if r.resource_type not in WORKLOAD_TYPES:
            continue
        for path, c in containers(r.resource_type, r.props):
            value = env_value(c, "NCCL_IB_HCA")
            if value is None:
                continue
            who = f"{kind(r.resource_type)} {name_of(r)!r} {path}"
            if not known:
                report(f"{who} NCCL_IB_HCA={value!r} cannot be checked: neither this stack's "
                       "fabric nor a referenced core stack's `facts.hcas` says which HCAs the "
                       "nodes are cabled with (apply the core part first)", r.urn)
                continue
            if value.startswith("^"):
                continue  # an exclusion list cannot name a missing device harmfully
            if not value.startswith("="):
                report(f"{who} NCCL_IB_HCA={value!r} is a prefix match; start it with '=' "
                       "so mlx5_1 does not also select mlx5_10, mlx5_11", r.urn)
            names = []
            for item in value.lstrip("=").split(","):
                m = _HCA_ITEM.match(item.strip())
                if m:
                    names.append(m.group(1))
            missing = sorted(set(names) - known)
            if missing:
                report(f"{who} NCCL_IB_HCA names {missing}, which no node is cabled with "
                       f"(cabled: {sorted(known)})", r.urn)
            unused = sorted(known - set(names))
            if names and unused:
                report(f"{who} NCCL_IB_HCA leaves out cabled HCAs {unused}: those rails idle",
                       r.urn)


_DEBUG_KNOBS = {
    "NCCL_DEBUG": lambda v: v.upper() in ("INFO", "TRACE"),
    "NCCL_DEBUG_SUBSYS": lambda v: True,
    "NCCL_DEBUG_FILE": lambda v: True,
    "NCCL_IB_DISABLE": lambda v: v.strip() not in ("0", ""),
    "NCCL_P2P_DISABLE": lambda v: v.strip() not in ("0", ""),
    "NCCL_SHM_DISABLE": lambda v: v.strip() not in ("0", ""),
    "NCCL_NET": lambda v: v.strip().lower() == "socket",
    "NCCL_ALGO": lambda v: True,
    "NCCL_PROTO": lambda v: True,
    "NCCL_IB_GID_INDEX": lambda v: True,
}


@resource_rule(
    "nccl-no-debug-knobs",
    "No NCCL debugging or transport-disabling knobs in production (INFO/TRACE, *_DISABLE, ...)",
    MANDATORY,
    WORKLOAD_TYPES,
)
def nccl_no_debug_knobs(args: ResourceValidationArgs, report: Report) -> None:
    """NCCL_DEBUG=INFO floods logs from every rank; IB/P2P/SHM_DISABLE, NCCL_NET=Socket and
    pinned ALGO/PROTO are bisection tools that cost 2-10x bandwidth when left in;
    NCCL_IB_GID_INDEX is for RoCE, not native InfiniBand. Lower the level for a dev stack."""
    for path, c in containers(args.resource_type, args.props):
        for name, entry in env_of(c).items():
            check = _DEBUG_KNOBS.get(name)
            value = get(entry, "value")
            if check and isinstance(value, str) and check(value):
                report(f"{path} sets {name}={value!r}")
