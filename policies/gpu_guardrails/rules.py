"""Core rules (images, charts, checkpoints, SSH, GPU requests). Props are resource inputs
as the engine sees them: camelCase keys, numbers as floats, secrets as plaintext, read-only
mappings that raise on values unknown during preview."""

from __future__ import annotations

import re
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ResourceValidationArgs,
    StackValidationArgs,
)

from .common import WORKLOAD_TYPES, containers, pod_containers, pod_templates, qty
from .registry import Report, get, is_list, resource_rule, stack_rule
from .resource_names import SWITCH_CONFIG, subject
from .vocabulary import PURPOSE_LABEL


def _image_unpinned(image: str) -> str | None:
    if "@sha256:" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "has no tag (defaults to :latest)"
    if last.rsplit(":", 1)[1] == "latest":
        return "uses :latest"
    return None


@resource_rule(
    "no-latest-image",
    "Container images are pinned to a tag or digest, never :latest or untagged",
    EnforcementLevel.MANDATORY,
    WORKLOAD_TYPES,
)
def no_latest_image(args: ResourceValidationArgs, report: Report) -> None:
    """A moving tag makes a 1000-GPU job restart onto a different image after a node failure,
    so a resumed run silently mixes library versions; the preview diff also cannot show it."""
    for path, c in containers(args.resource_type, args.props):
        image = get(c, "image")
        if not isinstance(image, str) or not image:
            report(f"{path}.image is not set")
            continue
        problem = _image_unpinned(image)
        if problem:
            report(f"{path}.image {image!r} {problem}; pin a version tag or a digest")


_EXACT_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")


@resource_rule(
    "helm-chart-pinned",
    "Helm releases pin an exact chart version (no range, no latest)",
    EnforcementLevel.MANDATORY,
    ("kubernetes:helm.sh/*:Release",),
)
def helm_chart_pinned(args: ResourceValidationArgs, report: Report) -> None:
    """Without an exact version, `helm` resolves the newest chart at apply time: GPU Operator and
    Network Operator versions are only supported in specific pairs (RDMA breaks otherwise)."""
    version = get(args.props, "version")
    chart = get(args.props, "chart")
    if not isinstance(version, str) or not version:
        report(f"chart {chart!r} has no version; set an exact one like v26.3.2")
    elif not _EXACT_VERSION.match(version):
        report(f"chart {chart!r} version {version!r} is a range or tag; set an exact version")


def _name(args_or_res: Any) -> str:
    meta_name = get(args_or_res.props, "metadata", "name")
    return meta_name if isinstance(meta_name, str) else args_or_res.name


@resource_rule(
    "checkpoint-volume-retained",
    "PersistentVolumes holding checkpoints use reclaim policy Retain",
    EnforcementLevel.MANDATORY,
    ("kubernetes:core/v1:PersistentVolume",),
)
def checkpoint_volume_retained(args: ResourceValidationArgs, report: Report) -> None:
    """Checkpoints are what a multi-week run restarts from after the (frequent) hardware
    failures; a Delete/Recycle policy would erase them when the claim goes away."""
    if "checkpoint" not in _name(args):
        return
    policy = get(args.props, "spec", "persistentVolumeReclaimPolicy")
    if policy != "Retain":
        report(f"spec.persistentVolumeReclaimPolicy is {policy!r}; set 'Retain'")


@stack_rule(
    "checkpoint-volume-protected",
    "Checkpoint volumes and the claims bound to them are Pulumi-protected",
    EnforcementLevel.MANDATORY,
)
def checkpoint_volume_protected(args: StackValidationArgs, report: Report) -> None:
    """`protect` makes `pulumi destroy` or a replacement refuse to delete them. A stack rule
    because a claim is a checkpoint claim also when it only binds a checkpoint PV by
    `spec.volumeName`. `opts.protect` is what pulumi-policy exposes (PolicyResourceOptions) for
    resource and stack rules alike."""
    pvs = {}
    for r in args.resources:
        if r.resource_type == "kubernetes:core/v1:PersistentVolume":
            pvs[_name(r)] = r
    for r in args.resources:
        if r.resource_type == "kubernetes:core/v1:PersistentVolume":
            hit = "checkpoint" in _name(r)
        elif r.resource_type == "kubernetes:core/v1:PersistentVolumeClaim":
            bound = get(r.props, "spec", "volumeName")
            hit = "checkpoint" in _name(r) or (
                isinstance(bound, str) and bound in pvs and "checkpoint" in bound)
        else:
            continue
        if hit and not r.opts.protect:
            report(f"{r.resource_type.rsplit(':', 1)[1]} {_name(r)!r} is not protected; "
                   "set ResourceOptions(protect=True)", r.urn)


@resource_rule(
    "ssh-host-key-pinned",
    "Every remote command pins the host's SSH key (connection.hostKey)",
    EnforcementLevel.MANDATORY,
    ("command:remote:*",),
)
def ssh_host_key_pinned(args: ResourceValidationArgs, report: Report) -> None:
    """Without a host key pulumi-command accepts any key, so a re-imaged or spoofed host on the
    management network would receive the kubeadm join token and the cluster's private key."""
    conn = get(args.props, "connection")
    key = get(conn, "hostKey")
    if not isinstance(key, str) or not key.strip():
        host = get(conn, "host")
        # The stack's switch commands (`<switch>-config`, in a fabric component) take the
        # key from fabric.switchHostKeys (a storage fabric's from fabric.storageFabric's);
        # hosts and GPU nodes from their inventory rows.
        switch = ":fabric:" in args.urn and subject(args.name, SWITCH_CONFIG) is not None
        keys = ("fabric.storageFabric.switchHostKeys" if ":fabric:StorageFabric" in args.urn
                else "fabric.switchHostKeys")
        where = (f"{keys} in the stack file" if switch
                 else "the host's inventory entry (sshHostKey)")
        report(f"connection to {host!r} has no hostKey; add `ssh-keyscan -t ed25519 {host}`'s "
               f"key to {where}")


@resource_rule(
    "gpu-requests-equal-limits",
    "Containers asking for nvidia.com/gpu set limits, and requests equal to them",
    EnforcementLevel.MANDATORY,
    WORKLOAD_TYPES,
)
def gpu_requests_equal_limits(args: ResourceValidationArgs, report: Report) -> None:
    """GPUs are an extended resource: Kubernetes rejects requests that differ from limits, and a
    request without a limit is not scheduled onto a GPU at all — found only at apply time."""
    for path, c in containers(args.resource_type, args.props):
        req = qty(get(c, "resources", "requests", "nvidia.com/gpu"))
        lim = qty(get(c, "resources", "limits", "nvidia.com/gpu"))
        if req is None and lim is None:
            continue
        if lim is None:
            report(f"{path} requests nvidia.com/gpu={req} without a limit")
        elif req is not None and req != lim:
            report(f"{path} nvidia.com/gpu request {req} differs from limit {lim}")


def _access_modes(props: Any) -> list[str]:
    modes = get(props, "spec", "accessModes")
    return [m for m in modes if isinstance(m, str)] if modes is not None else []


@resource_rule(
    "checkpoint-volume-rwx",
    "Checkpoint volumes and claims are ReadWriteMany",
    EnforcementLevel.MANDATORY,
    ("kubernetes:core/v1:PersistentVolume", "kubernetes:core/v1:PersistentVolumeClaim"),
)
def checkpoint_volume_rwx(args: ResourceValidationArgs, report: Report) -> None:
    """Every rank of every node writes its shard of a checkpoint at once; a ReadWriteOnce
    volume mounts on one node only, so the job's other pods never start (or cannot save)."""
    labels = get(args.props, "metadata", "labels", PURPOSE_LABEL)
    if "checkpoint" not in _name(args) and labels != "checkpoints":
        return
    modes = _access_modes(args.props)
    if "ReadWriteMany" not in modes:
        report(f"spec.accessModes is {modes}; checkpoints need ReadWriteMany")


def _checkpoint_pv(r: Any) -> bool:
    return r.resource_type == "kubernetes:core/v1:PersistentVolume" and (
        "checkpoint" in _name(r)
        or get(r.props, "metadata", "labels", PURPOSE_LABEL) == "checkpoints")


@stack_rule(
    "checkpoint-volume-writable",
    "Checkpoint volumes are mounted read-write everywhere they are mounted",
    EnforcementLevel.MANDATORY,
)
def checkpoint_volume_writable(args: StackValidationArgs, report: Report) -> None:
    """A read-only checkpoint mount (the PV's CSI `readOnly`, a `ro` mount option, the claim
    mounted `readOnly`) lets a job start and train for hours, then fail at its first save — and
    every restart after a hardware failure goes back to the last checkpoint that was written.
    A stack rule: which claims hold checkpoints follows from the PVs they bind."""
    pvs = [r for r in args.resources if _checkpoint_pv(r)]
    for pv in pvs:
        if get(pv.props, "spec", "csi", "readOnly") is True:
            report(f"PersistentVolume {_name(pv)!r} sets spec.csi.readOnly: checkpoints "
                   "cannot be written", pv.urn)
        options = get(pv.props, "spec", "mountOptions")
        if is_list(options) and "ro" in options:
            report(f"PersistentVolume {_name(pv)!r} mounts with option ro: checkpoints "
                   "cannot be written", pv.urn)
    names = {_name(pv) for pv in pvs}
    claims = {_name(r) for r in args.resources
              if r.resource_type == "kubernetes:core/v1:PersistentVolumeClaim"
              and (get(r.props, "spec", "volumeName") in names or "checkpoint" in _name(r))}
    for r in args.resources:
        if r.resource_type not in WORKLOAD_TYPES:
            continue
        for path, _meta, spec in pod_templates(r.resource_type, r.props):
            volumes = {get(v, "name"): v for v in (get(spec, "volumes") or ())
                       if get(v, "persistentVolumeClaim", "claimName") in claims}
            for name, v in volumes.items():
                if get(v, "persistentVolumeClaim", "readOnly") is True:
                    report(f"{path} volume {name!r} mounts checkpoint claim "
                           f"{get(v, 'persistentVolumeClaim', 'claimName')!r} readOnly", r.urn)
            for cpath, c in pod_containers(path, spec):
                for m in get(c, "volumeMounts") or ():
                    if get(m, "name") in volumes and get(m, "readOnly") is True:
                        report(f"{cpath} mounts checkpoint volume {get(m, 'name')!r} at "
                               f"{get(m, 'mountPath')} readOnly: every save would fail", r.urn)
