"""workloads layer: training jobs, the NCCL acceptance test and inference services, rendered
correct by construction."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s

from components.layers.kube import apply
from components.layers.remote import remote_command
from components.planning import names
from components.planning.workloads import POLICY_SUPPRESS_ANNOTATION


@dataclass(frozen=True)
class AcceptanceGate:
    """A check run on the control plane once the workload's objects exist (see nccl.py)."""

    connection: command.remote.ConnectionArgs
    script: str
    depends_on: list[pulumi.Resource]
    facts: dict[str, str]  # its settings, for the preview's readers (planning/facts.py gate_facts)


@dataclass(frozen=True)
class ControlPlaneSetup:
    """A command run on the control plane before the workload's objects (e.g. minting an
    API key Secret), undone by `delete` when the workload goes."""

    connection: command.remote.ConnectionArgs
    script: str
    delete: str


@dataclass(frozen=True)
class WorkloadArgs:
    provider: k8s.Provider
    manifests: list[dict]
    depends_on: list[pulumi.Resource]
    gate: AcceptanceGate | None = None
    setup: ControlPlaneSetup | None = None


class Workload(pulumi.ComponentResource):
    """One workload: its Kubernetes objects, named by the workload, and optionally the
    acceptance gate that must pass for `pulumi up` to succeed."""

    def __init__(self, name: str, args: WorkloadArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(names.WORKLOAD_TYPE, name,
                         {"facts": args.gate.facts} if args.gate is not None else None, opts)
        self.setup = None
        if args.setup is not None:
            self.setup = remote_command(
                names.name(names.SETUP, name), connection=args.setup.connection,
                create="sudo bash -s", stdin=args.setup.script, delete=args.setup.delete,
                opts=pulumi.ResourceOptions(parent=self, depends_on=args.depends_on))
        child = pulumi.ResourceOptions(parent=self, provider=args.provider,
                                       depends_on=[*args.depends_on,
                                                   *([self.setup] if self.setup else [])])
        self.objects = [apply(m, _opts(m, child)) for m in args.manifests]
        self.gate = None
        if args.gate is not None:
            g = args.gate
            # Runs when created and again whenever the test or the checker changes; a failing
            # check fails the update (non-zero exit), and the failure is in the update's log.
            self.gate = remote_command(
                names.name(names.ACCEPTANCE, name),
                connection=g.connection,
                create="sudo bash -s",  # reads /etc/kubernetes/admin.conf
                stdin=g.script,
                # No delete command: a changed gate is replaced, new before old, and the old
                # one's delete would remove the new run and the record it left.
                triggers=[_digest(g.script, args.manifests)],
                opts=pulumi.ResourceOptions(parent=self,
                                            depends_on=[*self.objects, *g.depends_on]),
            )
        self.register_outputs({})


# Training Operator v1 ignores most changes to a submitted job's spec; a changed job is
# deleted and submitted again (a training job resumes from its last checkpoint, a changed
# NCCL test runs again, and its gate with it).
JOB_KINDS = {("kubeflow.org/v1", "PyTorchJob"), ("kubeflow.org/v1", "MPIJob")}


def _opts(manifest: dict, child: pulumi.ResourceOptions) -> pulumi.ResourceOptions:
    if (manifest["apiVersion"], manifest["kind"]) in JOB_KINDS:
        return pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
            replace_on_changes=["spec"], delete_before_replace=True))
    return child


def _digest(script: str, manifests: list[dict]) -> str:
    h = hashlib.sha256(script.encode())
    h.update(json.dumps([_without_policy_notes(m) for m in manifests], sort_keys=True).encode())
    return "sha256:" + h.hexdigest()[:16]  # a change marker, not a credential-length hex


def _without_policy_notes(manifest: dict) -> dict:
    """A rule set aside for the object is no change to what the test runs: it re-runs nothing."""
    notes = manifest.get("metadata", {}).get("annotations", {})
    if POLICY_SUPPRESS_ANNOTATION not in notes:
        return manifest
    rest = {k: v for k, v in notes.items() if k != POLICY_SUPPRESS_ANNOTATION}
    metadata = {k: v for k, v in manifest["metadata"].items() if k != "annotations"}
    return {**manifest, "metadata": metadata | ({"annotations": rest} if rest else {})}
