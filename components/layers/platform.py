"""platform layer: CNI, GPU and Network Operators, RDMA networks, Volcano, Training Operator,
ingress, metrics — all through the bootstrap layer's Kubernetes provider."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.layers.kube import KustomizeDirectory, apply
from components.layers.remote import remote_command
from components.planning import names
from components.planning.platform import (
    OPERATOR_KINDS,
    ROLLOUT_READY,
    Release,
    rollout_wait_command,
)


@dataclass(frozen=True)
class PlatformArgs:
    provider: k8s.Provider
    namespaces: list[dict]  # workload namespaces with their Pod Security labels
    releases: list[Release]  # in installation order
    # Objects that need a release's CRDs or controllers, keyed by release name; a release that
    # names another in `after` waits for these too (e.g. ingress-nginx for MetalLB's pool).
    release_objects: dict[str, list[dict]]
    network_attachments: list[dict]
    priority_classes: list[dict]
    training_operator_dir: str  # our kustomization (upstream overlay + gang-scheduling patch)
    # Where `pulumi up` waits for the operators' rollouts (the first control plane); None: no wait
    wait_connection: Any = None
    network_policies: list[dict] = field(default_factory=list)  # each namespace's baseline
    # Admission policies (a policy before its binding), in place before any workload.
    admission_policies: list[dict] = field(default_factory=list)
    access_bindings: list[dict] = field(default_factory=list)  # people's groups → roles
    # Budgets for kube-system pods kubeadm deploys (CoreDNS): a drain evicts one at a time.
    system_budgets: list[dict] = field(default_factory=list)
    # node-problem-detector on the GPU nodes: its identity and files, then its DaemonSet.
    node_health: list[dict] = field(default_factory=list)


class Platform(pulumi.ComponentResource):
    def __init__(self, name: str, args: PlatformArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:platform:Platform", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.namespaces = {
            ns["metadata"]["name"]: apply(ns, child) for ns in args.namespaces
        }
        self.network_policies = [
            apply(p, pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                depends_on=[self.namespaces[p["metadata"]["namespace"]]])))
            for p in args.network_policies]
        self.admission_policies: list[pulumi.CustomResource] = []
        for p in args.admission_policies:
            self.admission_policies.append(apply(p, pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=self.admission_policies[-1:]))))
        self.access_bindings = [apply(b, child) for b in args.access_bindings]
        self.system_budgets = [apply(b, child) for b in args.system_budgets]
        # Its ConfigMaps and service account exist before a pod of the DaemonSet asks for them.
        files = [apply(m, child) for m in args.node_health if m["kind"] != "DaemonSet"]
        self.node_health = files + [
            apply(m, pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                depends_on=files))) for m in args.node_health if m["kind"] == "DaemonSet"]
        # Before any workload: a pod naming a class that does not exist is refused at admission.
        self.priority_classes = [apply(pc, child) for pc in args.priority_classes]
        self.releases: dict[str, k8s.helm.v3.Release] = {}
        self.objects: dict[str, list[pulumi.CustomResource]] = {}
        for rel in args.releases:
            missing = [d for d in rel.after if d not in self.releases]
            if missing:
                raise ValueError(f"release {rel.name} is listed before {', '.join(missing)}")
            self._install(rel, args, child)
        unknown = set(args.release_objects) - set(self.releases)
        if unknown:
            raise ValueError(f"objects for releases that are not installed: {sorted(unknown)}")
        # The attachments need Multus and nv-ipam (NicClusterPolicy) and their namespace.
        net = [self.releases["network-operator"], *self.objects["network-operator"]]
        self.network_attachments = [
            apply(nad, pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                depends_on=[*net, self.namespaces[nad["metadata"]["namespace"]]])))
            for nad in args.network_attachments
        ]
        # Gang scheduling needs Volcano's PodGroup CRD before the operator starts.
        self.training_operator = KustomizeDirectory(
            "training-operator",
            directory=args.training_operator_dir,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                depends_on=[self.releases["volcano"]])),
        )
        self.register_outputs({"releases": list(self.releases)})

    def _install(self, rel: Release, args: PlatformArgs, child: pulumi.ResourceOptions) -> None:
        """One chart: its release after the releases it names, its objects after it, the
        wait for its operator's rollout, and the objects whose CRD the operator installs."""
        deps: list[pulumi.Resource] = [*self.namespaces.values()]
        for d in rel.after:
            deps += [self.releases[d], *self.objects.get(d, [])]
        ref = rel.ref
        release = k8s.helm.v3.Release(
            rel.name,
            name=rel.name,
            chart=ref.chart,
            version=rel.chart.version,
            repository_opts=None if ref.repo is None else k8s.helm.v3.RepositoryOptsArgs(
                repo=ref.repo),
            namespace=rel.chart.namespace,
            create_namespace=True,
            atomic=True,
            timeout=900,
            values=dict(rel.values),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=deps)),
        )
        self.releases[rel.name] = release
        after_release = pulumi.ResourceOptions.merge(
            child, pulumi.ResourceOptions(depends_on=[release, *self.namespaces.values()]))
        objects = args.release_objects.get(rel.name, [])
        operator_kinds = OPERATOR_KINDS.get(rel.name, set())
        self.objects[rel.name] = [apply(m, after_release) for m in objects
                                  if (m["apiVersion"], m["kind"]) not in operator_kinds]
        if rel.name in ROLLOUT_READY and args.wait_connection is not None:
            # A new chart or values (a new driver) re-runs the wait; releases listed after
            # this one wait for it too (GPU after network operator).
            changed = hashlib.sha256(json.dumps(
                [rel.chart.version, rel.values], sort_keys=True).encode()).hexdigest()[:16]
            self.objects[rel.name].append(remote_command(
                names.name(names.ROLLOUT, rel.name), connection=args.wait_connection,
                create=rollout_wait_command(rel.name), triggers=[changed],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[
                    release, *self.objects[rel.name]])))
        after_operator = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
            depends_on=[release, *self.namespaces.values(), *self.objects[rel.name]]))
        self.objects[rel.name] += [apply(m, after_operator) for m in objects
                                   if (m["apiVersion"], m["kind"]) in operator_kinds]
