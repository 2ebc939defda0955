"""Training job rules: whole GPU nodes, shared memory, gang scheduling that fits its queue, bounded
retries.

Props are what the engine passes: camelCase keys, read-only mappings, numbers as floats.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ResourceValidationArgs,
    StackValidationArgs,
)

from .common import (
    GPU,
    REPLICA_FIELDS,
    TRAINING_JOB_TYPES,
    WORKLOAD_TYPES,
    config,
    container_gpus,
    gpu_workload,
    kind,
    name_of,
    pod_containers,
    pod_gpus,
    pod_templates,
    qty,
    quantity_bytes,
    site_resources,
)
from .registry import Report, get, is_map, resource_rule, stack_rule

MANDATORY = EnforcementLevel.MANDATORY
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
def multinode_whole_gpu_nodes(args: ResourceValidationArgs, report: Report) -> None:
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
def dev_shm_memory_emptydir(args: ResourceValidationArgs, report: Report) -> None:
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
    "gang-scheduling-min-members",
    "Training jobs are gang-scheduled (Volcano) with min members equal to all replicas",
    MANDATORY,
    TRAINING_JOB_TYPES,
)
def gang_scheduling_min_members(args: ResourceValidationArgs, report: Report) -> None:
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
    for r in site_resources(args.resources):  # a split site's queues are the platform's
        if r.resource_type == QUEUE:
            cap = qty(get(r.props, "spec", "capability", GPU))
            caps[name_of(r)] = float(cap) if isinstance(cap, int | float) else None
    return caps


@stack_rule(
    "gang-fits-queue",
    "Every gang's GPUs fit the capability of the Volcano queue it names, and the queue exists",
    MANDATORY,
)
def gang_fits_queue(args: StackValidationArgs, report: Report) -> None:
    """Volcano's proportion plugin admits a PodGroup only while the queue's allocated GPUs
    plus the group's minResources stay within the queue's capability: a gang larger than its
    queue stays Pending forever, with GPUs idle. A PodGroup naming a missing queue is refused
    by Volcano's admission. In a split site the queues are the platform part's, read from its
    `facts` output."""
    caps = _queue_gpus(args)
    for r in args.resources:
        if r.resource_type in TRAINING_JOB_TYPES:
            queue = get(r.props, "spec", "runPolicy", "schedulingPolicy", "queue") or "default"
            pods = sorted(pod_gpus(get(replica, "template", "spec"))
                          for _, n, replica in _replicas(r.props) for _ in range(n))
            min_av = qty(get(r.props, "spec", "runPolicy", "schedulingPolicy", "minAvailable"))
            gang = sum(pods[:min_av] if isinstance(min_av, int) else pods)
        elif r.resource_type == DEPLOYMENT and gpu_workload(r):
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
                   f"least {gang} (components/planning/volcano.py queue_capabilities)",
                   r.urn)


@resource_rule(
    "training-backoff-bounded",
    "Training jobs set a bounded backoff limit",
    MANDATORY,
    (*TRAINING_JOB_TYPES, "kubernetes:batch/v1:Job"),
)
def training_backoff_bounded(args: ResourceValidationArgs, report: Report) -> None:
    """Restart-from-checkpoint is the answer to hardware failures, but a job that crashes on a
    config bug would restart forever and hold every GPU it gang-scheduled. Config: maxBackoff
    (10) restarts of the job. A PyTorchJob's gang restarts together and the Training Operator
    counts every pod's container restart, so its limit is maxBackoff per pod."""
    maximum = config(args, "maxBackoff", 10)
    pods = 1
    if args.resource_type == "kubernetes:batch/v1:Job":
        value, path = qty(get(args.props, "spec", "backoffLimit")), "spec.backoffLimit"
    else:
        value = qty(get(args.props, "spec", "runPolicy", "backoffLimit"))
        path = "spec.runPolicy.backoffLimit"
        if args.resource_type == TRAINING_JOB_TYPES[0]:  # PyTorchJob
            replicas = [qty(get(r, "replicas")) for r in
                        (get(args.props, "spec", "pytorchReplicaSpecs") or {}).values()]
            pods = sum(r for r in replicas if isinstance(r, int) and r > 0) or 1
    if value is None:
        report(f"{path} is not set (unbounded restarts)")
    elif not isinstance(value, int) or value < 0 or value > maximum * pods:
        per = f" ({maximum} restarts of its {pods} pods)" if pods > 1 else ""
        report(f"{path} is {value}; keep it within 0..{maximum * pods}{per}")
