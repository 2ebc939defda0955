"""Kubernetes workload rules: training jobs, RDMA pods, NCCL, inference services, security.

Props are what the engine passes: camelCase keys, read-only mappings, numbers as floats.
"""

from __future__ import annotations

import re
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    StackValidationArgs,
)

from .common import (
    GPU,
    NETWORKS_ANNOTATION,
    RDMA_RESOURCE_ANNOTATION,
    REPLICA_FIELDS,
    TRAINING_JOB_TYPES,
    WORKLOAD_TYPES,
    cabled_hcas,
    config,
    container_gpus,
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
    qty,
    quantity_bytes,
    rdma_resources,
)
from .registry import get, is_list, is_map, resource_rule, stack_rule

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY
DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def _replicas(props: Any) -> list[tuple[str, int, Any]]:
    """(role, replicas, replica spec) of a PyTorchJob/MPIJob."""
    out = []
    for field in REPLICA_FIELDS:
        specs = get(props, "spec", field)
        if is_map(specs):
            for role in sorted(specs):
                n = qty(get(specs, role, "replicas"))
                out.append((role, n if isinstance(n, int) else 1, get(specs, role)))
    return out


@resource_rule(
    "multinode-whole-gpu-nodes",
    "Multi-node training pods each take a whole 8-GPU node",
    MANDATORY,
    TRAINING_JOB_TYPES,
)
def multinode_whole_gpu_nodes(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """A pod with fewer GPUs than the node shares the node's HCAs and NVSwitch with another
    job, so NCCL's rings cross PCIe/other tenants and the job runs at the slowest pod's pace;
    ranks split across nodes also break the TP-inside-a-node layout. Config: gpusPerNode (8)."""
    per_node = config(args, "gpusPerNode", 8)
    roles = _replicas(args.props)
    if sum(n for _, n, _ in roles) <= 1:
        return
    for path, _meta, spec in pod_templates(args.resource_type, args.props):
        gpus = pod_gpus(spec)
        if gpus and gpus != per_node:
            report(f"{path} asks for {gpus} GPUs; a multi-node job takes whole nodes "
                   f"({per_node} GPUs per pod)")


@resource_rule(
    "dev-shm-memory-emptydir",
    "GPU pods mount /dev/shm from a memory emptyDir of at least the configured size",
    MANDATORY,
    WORKLOAD_TYPES,
)
def dev_shm_memory_emptydir(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Containers get a 64 MiB /dev/shm; NCCL's intra-node transport and PyTorch data loaders
    need gigabytes and fail with bus errors or hang. Config: minSize (16Gi)."""
    minimum = str(config(args, "minSize", "16Gi"))
    min_bytes = quantity_bytes(minimum) or 0
    for path, _meta, spec in pod_templates(args.resource_type, args.props):
        if not pod_gpus(spec):
            continue
        vols = {get(v, "name"): v for v in (get(spec, "volumes") or ()) if is_map(v)}
        for cpath, c in pod_containers(path, spec, init=False):
            if not container_gpus(c):
                continue
            mounts = [m for m in (get(c, "volumeMounts") or ()) if get(m, "mountPath") ==
                      "/dev/shm"]
            if not mounts:
                report(f"{cpath} has no /dev/shm mount; add a memory emptyDir of {minimum}")
                continue
            vol = vols.get(get(mounts[0], "name"))
            if get(vol, "emptyDir", "medium") != "Memory":
                report(f"{cpath} /dev/shm is not an emptyDir with medium: Memory")
                continue
            size = get(vol, "emptyDir", "sizeLimit")
            size_b = quantity_bytes(size)
            if size_b is None or size_b < min_bytes:
                report(f"{cpath} /dev/shm sizeLimit {size!r} is below {minimum}")


@resource_rule(
    "rdma-ipc-lock-only",
    "RDMA containers add IPC_LOCK and nothing broader (no privileged, no other capabilities)",
    MANDATORY,
    WORKLOAD_TYPES,
)
def rdma_ipc_lock_only(args: ResourceValidationArgs, report: ReportViolation) -> None:
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
def rdma_request_has_network(args: ResourceValidationArgs, report: ReportViolation) -> None:
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
def rdma_network_attachment_exists(args: StackValidationArgs, report: ReportViolation) -> None:
    """Multus refuses to start a pod whose attachment is missing; an attachment bound to a
    different RDMA resource than the pod requests schedules it onto devices it cannot use."""
    nads: dict[tuple[str, str], Any] = {}
    for r in args.resources:
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
def nccl_socket_ifname_exists(args: ResourceValidationArgs, report: ReportViolation) -> None:
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
def nccl_ib_hca_exists(args: StackValidationArgs, report: ReportViolation) -> None:
    """A name the nodes do not have drops that rail (NCCL uses what matches, or falls back to
    sockets when nothing does); a prefix without '=' (mlx5_1) also selects mlx5_10/mlx5_11.
    The HCA names come from the switch port descriptions the fabric commands configure."""
    cabled = cabled_hcas(args.resources)
    known = {hca for rails in cabled.values() for hca, _ in rails.values()}
    if not known:
        return
    for r in args.resources:
        if r.resource_type not in WORKLOAD_TYPES:
            continue
        for path, c in containers(r.resource_type, r.props):
            value = env_value(c, "NCCL_IB_HCA")
            if value is None:
                continue
            who = f"{kind(r.resource_type)} {name_of(r)!r} {path}"
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
def nccl_no_debug_knobs(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """NCCL_DEBUG=INFO floods logs from every rank; IB/P2P/SHM_DISABLE, NCCL_NET=Socket and
    pinned ALGO/PROTO are bisection tools that cost 2-10x bandwidth when left in;
    NCCL_IB_GID_INDEX is for RoCE, not native InfiniBand. Lower the level for a dev stack."""
    for path, c in containers(args.resource_type, args.props):
        for name, entry in env_of(c).items():
            check = _DEBUG_KNOBS.get(name)
            value = get(entry, "value")
            if check and isinstance(value, str) and check(value):
                report(f"{path} sets {name}={value!r}")


@resource_rule(
    "gang-scheduling-min-members",
    "Training jobs are gang-scheduled (Volcano) with min members equal to all replicas",
    MANDATORY,
    TRAINING_JOB_TYPES,
)
def gang_scheduling_min_members(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Without a gang, a partly scheduled job holds GPUs while waiting for the rest: two
    such jobs deadlock the cluster. minAvailable below the replica count starts ranks that
    block in NCCL init; above it the job never starts."""
    total = sum(n for _, n, _ in _replicas(args.props))
    for path, _meta, spec in pod_templates(args.resource_type, args.props):
        if get(spec, "schedulerName") != "volcano":
            report(f"{path}.schedulerName is {get(spec, 'schedulerName')!r}; use 'volcano'")
    min_av = qty(get(args.props, "spec", "runPolicy", "schedulingPolicy", "minAvailable"))
    if min_av is None:
        report("spec.runPolicy.schedulingPolicy.minAvailable is not set")
    elif min_av != total:
        report(f"spec.runPolicy.schedulingPolicy.minAvailable is {min_av}, replicas total "
               f"{total}; set them equal")


QUEUE = "kubernetes:scheduling.volcano.sh/v1beta1:Queue"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"


def _queue_gpus(args: StackValidationArgs) -> dict[str, float | None]:
    """Each Volcano queue's GPU capability (None: no GPU cap)."""
    caps: dict[str, float | None] = {}
    for r in args.resources:
        if r.resource_type == QUEUE:
            cap = qty(get(r.props, "spec", "capability", GPU))
            caps[name_of(r)] = float(cap) if isinstance(cap, int | float) else None
    return caps


@stack_rule(
    "gang-fits-queue",
    "Every gang's GPUs fit the capability of the Volcano queue it names, and the queue exists",
    MANDATORY,
)
def gang_fits_queue(args: StackValidationArgs, report: ReportViolation) -> None:
    """Volcano's proportion plugin admits a PodGroup only while the queue's allocated GPUs
    plus the group's minResources stay within the queue's capability: a gang larger than its
    queue stays Pending forever, with GPUs idle. A PodGroup naming a missing queue is refused
    by Volcano's admission."""
    caps = _queue_gpus(args)
    for r in args.resources:
        if r.resource_type in TRAINING_JOB_TYPES:
            queue = get(r.props, "spec", "runPolicy", "schedulingPolicy", "queue") or "default"
            pods = sorted(pod_gpus(get(replica, "template", "spec"))
                          for _, n, replica in _replicas(r.props) for _ in range(n))
            min_av = qty(get(r.props, "spec", "runPolicy", "schedulingPolicy", "minAvailable"))
            gang = sum(pods[:min_av] if isinstance(min_av, int) else pods)
        elif r.resource_type == DEPLOYMENT and _gpu_deployment(r):
            queue = get(r.props, "spec", "template", "metadata", "annotations",
                        QUEUE_ANNOTATION) or "default"
            gang = pod_gpus(get(r.props, "spec", "template", "spec"))  # one PodGroup a pod
        else:
            continue
        what = f"{kind(r.resource_type)} {name_of(r)!r}"
        if queue not in caps and queue != "default":
            report(f"{what} names Volcano queue {queue!r}, which the stack does not create",
                   r.urn)
        elif (cap := caps.get(queue)) is not None and gang > cap:
            report(f"{what} needs {gang} GPUs at once but queue {queue!r} is capped at "
                   f"{cap:g}: Volcano never admits it; raise the queue's capability to at "
                   f"least {gang} (components/planning/platform.py queue_capabilities)",
                   r.urn)


@resource_rule(
    "training-backoff-bounded",
    "Training jobs set a bounded backoff limit",
    MANDATORY,
    (*TRAINING_JOB_TYPES, "kubernetes:batch/v1:Job"),
)
def training_backoff_bounded(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Restart-from-checkpoint is the answer to hardware failures, but a job that crashes on a
    config bug would restart forever and hold every GPU it gang-scheduled. Config: maxBackoff
    (10)."""
    maximum = config(args, "maxBackoff", 10)
    if args.resource_type == "kubernetes:batch/v1:Job":
        value, path = qty(get(args.props, "spec", "backoffLimit")), "spec.backoffLimit"
    else:
        value = qty(get(args.props, "spec", "runPolicy", "backoffLimit"))
        path = "spec.runPolicy.backoffLimit"
    if value is None:
        report(f"{path} is not set (unbounded restarts)")
    elif not isinstance(value, int) or value < 0 or value > maximum:
        report(f"{path} is {value}; keep it within 0..{maximum}")


def _gpu_deployment(args: Any) -> bool:
    return any(pod_gpus(spec) for _, _, spec in pod_templates(args.resource_type, args.props))


@resource_rule(
    "inference-probes",
    "GPU Deployments have startup, readiness and liveness probes",
    MANDATORY,
    (DEPLOYMENT,),
)
def inference_probes(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Loading 140 GB of weights takes minutes: without a startup probe the liveness probe
    kills the pod mid-load forever; without readiness, traffic reaches a server that cannot
    answer; without liveness a wedged CUDA context keeps its GPUs."""
    for path, _meta, spec in pod_templates(args.resource_type, args.props):
        for cpath, c in pod_containers(path, spec, init=False):
            if not container_gpus(c):
                continue
            missing = [p for p in ("startupProbe", "readinessProbe", "livenessProbe")
                       if not is_map(get(c, p))]
            if missing:
                report(f"{cpath} has no {', '.join(missing)}")


def _selects(selector: Any, labels: Any) -> bool:
    ml = get(selector, "matchLabels")
    if not is_map(ml) or not ml or not is_map(labels):
        return False
    return all(get(labels, k) == v for k, v in ml.items())


@stack_rule(
    "inference-pdb",
    "Every GPU Deployment is covered by a PodDisruptionBudget",
    MANDATORY,
)
def inference_pdb(args: StackValidationArgs, report: ReportViolation) -> None:
    """Node drains (driver upgrades, the Network Operator's OFED rollout, a removed worker)
    would otherwise evict every replica of a model at once: minutes of outage while the
    weights reload."""
    pdbs = [r for r in args.resources
            if r.resource_type == "kubernetes:policy/v1:PodDisruptionBudget"]
    for r in args.resources:
        if r.resource_type != DEPLOYMENT or not _gpu_deployment(r):
            continue
        labels = get(r.props, "spec", "template", "metadata", "labels")
        ns = namespace_of(r.props)
        if not any(namespace_of(p.props) == ns and _selects(get(p.props, "spec", "selector"),
                                                            labels) for p in pdbs):
            report(f"Deployment {name_of(r)!r} has no PodDisruptionBudget selecting its pods",
                   r.urn)


@resource_rule(
    "inference-hpa-min-replicas",
    "Inference autoscalers keep at least two replicas (production)",
    MANDATORY,
    ("kubernetes:autoscaling/v2:HorizontalPodAutoscaler",),
)
def inference_hpa_min_replicas(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """One replica means every node drain, OOM or driver reset is an outage of the endpoint.
    Config: minReplicas (2); lower the level for a dev stack."""
    minimum = config(args, "minReplicas", 2)
    value = qty(get(args.props, "spec", "minReplicas"))
    if value is None:
        value = 1  # the Kubernetes default
    if value < minimum:
        report(f"spec.minReplicas is {value}; production needs at least {minimum}")
    maximum = qty(get(args.props, "spec", "maxReplicas"))
    if isinstance(maximum, int) and maximum < value:
        report(f"spec.maxReplicas {maximum} is below minReplicas {value}")


_TP_ARG = re.compile(r"^--tensor-parallel-size(?:=(\d+))?$")


def _tp_size(c: Any) -> int | None:
    items = [a for a in (*(get(c, "command") or ()), *(get(c, "args") or ()))
             if isinstance(a, str)]
    for i, a in enumerate(items):
        m = _TP_ARG.match(a)
        if m:
            raw = m.group(1) or (items[i + 1] if i + 1 < len(items) else "")
            return int(raw) if str(raw).isdigit() else None
    return None


@resource_rule(
    "vllm-tp-equals-gpus",
    "An inference server's tensor-parallel size equals the GPUs its container gets",
    MANDATORY,
    (DEPLOYMENT, "kubernetes:apps/v1:StatefulSet"),
)
def vllm_tp_equals_gpus(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """vLLM shards the model over --tensor-parallel-size GPUs of the pod: more than it has
    fails at start-up after the scheduler placed it; fewer leaves paid-for GPUs idle."""
    for path, c in containers(args.resource_type, args.props):
        tp = _tp_size(c)
        gpus = container_gpus(c)
        if tp is not None and gpus and tp != gpus:
            report(f"{path} --tensor-parallel-size={tp} but the container gets {gpus} GPUs")


@resource_rule(
    "ingress-tls",
    "Every Ingress host is served with TLS",
    MANDATORY,
    ("kubernetes:networking.k8s.io/v1:Ingress",),
)
def ingress_tls(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Prompts and completions are user data and the API carries bearer tokens; plain HTTP
    through the bare-metal load balancer exposes both on the management network."""
    tls = get(args.props, "spec", "tls")
    covered = {h for t in (tls or ()) for h in (get(t, "hosts") or ())}
    secrets = [get(t, "secretName") for t in (tls or ())]
    if not is_list(tls) or not tls:
        report("spec.tls is empty; add a TLS section (cert-manager issues the certificate)")
        return
    if not all(isinstance(s, str) and s for s in secrets):
        report("a spec.tls entry has no secretName")
    for rule in get(args.props, "spec", "rules") or ():
        host = get(rule, "host")
        if isinstance(host, str) and host not in covered:
            report(f"host {host!r} is not covered by spec.tls")


DEFAULT_OPERATOR_NAMESPACES = (
    "kube-system", "gpu-operator", "nvidia-network-operator", "tigera-operator",
    "calico-system", "volcano-system", "metallb-system", "ingress-nginx", "cert-manager",
    "lustre-csi-system", "monitoring", "kubeflow",
)


@resource_rule(
    "privileged-only-operator-namespaces",
    "Privileged containers and host namespaces only in operator namespaces",
    MANDATORY,
    WORKLOAD_TYPES,
)
def privileged_only_operator_namespaces(args: ResourceValidationArgs,
                                        report: ReportViolation) -> None:
    """Drivers, device plugins and CNIs need the host; a training or inference image does
    not, and a privileged tenant pod owns the node (and its neighbours' GPUs and data).
    Config: namespaces (the operator namespaces)."""
    allowed = set(config(args, "namespaces", DEFAULT_OPERATOR_NAMESPACES))
    ns = namespace_of(args.props)
    if ns in allowed:
        return
    for path, _meta, spec in pod_templates(args.resource_type, args.props):
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            if get(spec, field) is True:
                report(f"{path}.{field} is true in namespace {ns!r}")
        for v in get(spec, "volumes") or ():
            if is_map(get(v, "hostPath")):
                report(f"{path} mounts hostPath {get(v, 'hostPath', 'path')!r} in "
                       f"namespace {ns!r}")
        for cpath, c in pod_containers(path, spec):
            sc = get(c, "securityContext")
            if get(sc, "privileged") is True:
                report(f"{cpath} is privileged in namespace {ns!r}")
            added = {a for a in (get(sc, "capabilities", "add") or ()) if isinstance(a, str)}
            if added & {"SYS_ADMIN", "ALL", "NET_ADMIN", "SYS_PTRACE"}:
                report(f"{cpath} adds {sorted(added)} in namespace {ns!r}")


_SECRETISH = re.compile(r"(TOKEN|PASSWORD|PASSWD|SECRET|PRIVATE_KEY|API_KEY|ACCESS_KEY|"
                        r"CREDENTIAL)", re.I)


@resource_rule(
    "secrets-via-secret-key-ref",
    "Secret-looking env vars come from a Secret (valueFrom.secretKeyRef), never a literal",
    MANDATORY,
    WORKLOAD_TYPES,
)
def secrets_via_secret_key_ref(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """A literal lands in the object spec, `kubectl get -o yaml`, the rendered diff and
    Pulumi state; a Pulumi secret in env would also hide the entire spec from the diff."""
    for path, c in containers(args.resource_type, args.props):
        for name, entry in env_of(c).items():
            if not _SECRETISH.search(name):
                continue
            if get(entry, "value") is not None:
                report(f"{path} env {name} is a literal; use valueFrom.secretKeyRef")
            elif get(entry, "valueFrom") is not None and not is_map(
                    get(entry, "valueFrom", "secretKeyRef")):
                report(f"{path} env {name} is not read from a Secret")


@resource_rule(
    "gpu-node-selector-real-label",
    "GPU product node selectors use a value GPU Feature Discovery really sets",
    MANDATORY,
    WORKLOAD_TYPES,
)
def gpu_node_selector_real_label(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """GFD labels an H100 SXM `NVIDIA-H100-80GB-HBM3`; a made-up value such as
    `NVIDIA-H100-SXM` matches no node and the pods stay Pending with no error.
    Config: products (accepted values)."""
    products = set(config(args, "products", ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-NVL",
                                             "NVIDIA-H200", "NVIDIA-H100-PCIe")))
    for path, spec in ((p, s) for p, _m, s in pod_templates(args.resource_type, args.props)):
        value = get(spec, "nodeSelector", "nvidia.com/gpu.product")
        if isinstance(value, str) and value not in products:
            report(f"{path}.nodeSelector nvidia.com/gpu.product={value!r} is not a GFD value "
                   f"({sorted(products)})")


@resource_rule(
    "gpu-taint-tolerated",
    "GPU pods tolerate the GPU nodes' nvidia.com/gpu taint",
    MANDATORY,
    WORKLOAD_TYPES,
)
def gpu_taint_tolerated(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """GPU nodes are tainted nvidia.com/gpu=present:NoSchedule so nothing else lands on them;
    a GPU pod without the toleration is never scheduled."""
    for path, _meta, spec in pod_templates(args.resource_type, args.props):
        if not pod_gpus(spec):
            continue
        tols = get(spec, "tolerations") or ()
        if not any(get(t, "key") in (GPU, None) and get(t, "operator") == "Exists"
                   or get(t, "key") == GPU and get(t, "value") == "present" for t in tols):
            report(f"{path} has no toleration for the {GPU} taint")
