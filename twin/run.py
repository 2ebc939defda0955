"""Apply a rendered stack to the twin and read back what a real cluster would do with it.

Every planned node becomes a KWOK node with the labels, taints and allocatable resources the
stack and the device plugins give it; every rendered Kubernetes object is applied to the real
API server (admission, CRD validation and Pod Security included); each Helm release, whose
chart cannot be fetched here, is stood in for by one probe pod per component, carrying the
placement the release's values give that component (the ingress controller, whose replicas and
budget a drain tests, by the chart's Deployment, Service and budget); kubeadm's CoreDNS is
created as `kubeadm init` creates it; the real scheduler places what it can.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from components.planning import acceptance_run
from components.planning.labels import CONTROL_PLANE_LABEL
from components.planning.nodes import PlannedNode
from components.planning.release_placement import COMPONENTS, probes

from .controlplane import ControlPlane
from .objects import describe_event, get, items, mapping

KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
PAUSE = "registry.k8s.io/pause:3.10"
JOB_KINDS = ("PyTorchJob", "MPIJob")


@dataclass
class TwinReport:
    rejected: dict[str, str] = field(default_factory=dict)  # object -> API server's reason
    unscheduled: dict[str, str] = field(default_factory=dict)  # pod -> scheduler's reason
    placed: dict[str, str] = field(default_factory=dict)  # pod -> node
    failures: list[str] = field(default_factory=list)  # what a cluster would not do
    gates: dict[str, str] = field(default_factory=dict)  # acceptance job -> its final state
    seen: list[str] = field(default_factory=list)  # what the twin did and saw (drains)
    stand_ins: list[str] = field(default_factory=list)
    # API objects without optional fields the twin reads: written with "-" for each, not a
    # failure of the stack.
    incomplete: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.rejected and not self.unscheduled and not self.failures

    def lines(self) -> list[str]:
        out = [f"twin: {len(self.placed)} pods placed, {len(self.unscheduled)} unschedulable, "
               f"{len(self.rejected)} objects rejected, {len(self.failures)} checks failed"]
        out += [f"  rejected   {k}: {v}" for k, v in sorted(self.rejected.items())]
        out += [f"  no node    {k}: {v}" for k, v in sorted(self.unscheduled.items())]
        out += [f"  gate       {k}: {v}" for k, v in sorted(self.gates.items())]
        out += [f"  seen       {s}" for s in self.seen]
        out += [f"  FAILED     {f}" for f in self.failures]
        out += [f"  stand-in   {s}" for s in self.stand_ins]
        out += [f"  incomplete {s}" for s in self.incomplete]
        return out

    def as_json(self) -> dict[str, Any]:
        return {"rejected": self.rejected, "unscheduled": self.unscheduled,
                "placed": self.placed, "failures": self.failures, "gates": self.gates,
                "seen": self.seen, "standIns": self.stand_ins, "incomplete": self.incomplete}


def node_object(n: PlannedNode) -> dict[str, Any]:
    """A planned node as it is once placed: a GPU node also carries what its kubelet registers
    (kubeadm join) until the acceptance gate has tested it."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n.name, "labels": {**n.labels, **n.registered},
                         "annotations": dict(KWOK_ANNOTATION)},
            "spec": {"taints": [dict(t) for t in n.taints]},
            "status": {"allocatable": dict(n.allocatable), "capacity": dict(n.allocatable)}}


def crd_files(shared: Path, kinds: Iterable[tuple[str, str]]) -> list[Path]:
    """The upstream CRD of every custom kind the stack renders (the validator's own table)."""
    sys.path.insert(0, str(shared / "tools"))
    try:
        import validate_manifests
    finally:
        sys.path.remove(str(shared / "tools"))
    return sorted({shared / "ref" / validate_manifests.CRDS[k] for k in kinds
                   if k in validate_manifests.CRDS})


def _submit(cp: ControlPlane, obj: Mapping[str, Any], report: TwinReport) -> None:
    """Server-side apply; the API server's refusal, if any, goes into the report."""
    proc = cp.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=twin",
                      "-f", "-", stdin=yaml.safe_dump(dict(obj)), check=False)
    if proc.returncode != 0:
        report.rejected[_key(obj)] = proc.stderr.strip()


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    ns = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj['kind']} {ns}{meta['name']}"


PROBE_LABEL = "gpucluster.io/twin-probe"
AGENT_LABEL = "gpucluster.io/twin-node-agent"  # release/component of a node-agent probe


# What Pod Security's restricted level admits: a stand-in passes admission in any namespace.
PROBE_SECURITY = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 65532,
                  "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def _pause(name: str = "probe", **extra: Any) -> dict[str, Any]:
    """A pause container standing in for a component's own."""
    return {"name": name, "image": PAUSE, "securityContext": dict(PROBE_SECURITY), **extra}


def probe(release: str, component: str, namespace: str, placement: Mapping[str, Any],
          node_agent: bool) -> dict[str, Any]:
    """A pause pod with one chart component's placement and priority; a node agent's is a
    DaemonSet, so the real DaemonSet controller decides which nodes it covers."""
    name = f"probe-{release}-{component}"[:57].rstrip("-")
    labels = {PROBE_LABEL: release, **({AGENT_LABEL: f"{release}.{component}"}
                                       if node_agent else {})}
    spec = {**placement, "containers": [_pause()]}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    if not node_agent:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta,
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": spec}}}


def load_rendering(build: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rendered manifests and Helm releases of one stack (build/<stack>)."""
    manifests = [yaml.safe_load(p.read_text())
                 for p in sorted((build / "manifests").rglob("*.yaml"))]
    releases = [yaml.safe_load(p.read_text()) for p in sorted((build / "helm").glob("*.yaml"))]
    return manifests, releases


def prepare(cp: ControlPlane, shared: Path, manifests: list[dict[str, Any]],
            releases: list[dict[str, Any]], nodes: list[PlannedNode]) -> None:
    """CRDs, the planned nodes and the releases' namespaces (each release creates its own)."""
    kinds = {(m["apiVersion"], m["kind"]) for m in manifests}
    for crd in crd_files(shared, kinds):
        cp.kubectl("apply", "--server-side", "-f", str(crd))
    cp.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=120s",
               timeout=180)
    for n in nodes:
        cp.kubectl("create", "-f", "-", stdin=yaml.safe_dump(node_object(n)))
    for ns in sorted({r["namespace"] for r in releases}):
        cp.kubectl("create", "namespace", ns, check=False)


def apply_manifests(cp: ControlPlane, manifests: Iterable[dict[str, Any]],
                    report: TwinReport) -> None:
    # Namespaces first, as `pulumi up` orders them.
    for m in sorted(manifests, key=lambda m: m["kind"] != "Namespace"):
        _submit(cp, m, report)
        if m["kind"] == "Namespace":
            cp.wait_for_service_account(m["metadata"]["name"])


def apply_probes(cp: ControlPlane, releases: list[dict[str, Any]], report: TwinReport) -> None:
    for doc in releases:
        cp.wait_for_service_account(doc["namespace"])
        agents = {c.name for c in COMPONENTS.get(doc["name"], ()) if c.runs_on == "every-node"}
        for component, placement in probes(doc["name"], doc["values"]).items():
            if (doc["chart"], component) == ("ingress-nginx", "controller"):
                objs = ingress_controller(doc["name"], doc["namespace"], doc["values"],
                                          placement)
            else:
                objs = [probe(doc["name"], component, doc["namespace"], placement,
                              component in agents)]
            for obj in objs:
                _submit(cp, obj, report)
        report.stand_ins.append(f"Helm release {doc['name']} ({doc['chart']} {doc['version']}): "
                                "probe pods (DaemonSets for node agents) with its placement "
                                "and priority values")
        if doc["chart"] == "ingress-nginx":
            report.stand_ins.append(
                f"Helm release {doc['name']}'s controller: a Deployment of pause pods with "
                "the replicas, placement, affinity and priority its values give, the chart's "
                "Service and, with more than one replica, the chart's PodDisruptionBudget")


# ---------------------------------------------------------------- kubeadm's CoreDNS


DNS_SERVICE = ("kube-system", "kube-dns")
DNS_LABELS = {"k8s-app": "kube-dns"}


def coredns(service_cidr: str) -> list[dict[str, Any]]:
    """kubeadm's CoreDNS (cmd/kubeadm/app/phases/addons/dns/manifests.go at the pinned
    Kubernetes) around a pause container: its ServiceAccount, the `coredns` Deployment with
    kubeadm's replicas (CoreDNSReplicas), strategy, priority, anti-affinity, tolerations and
    node selector, and the `kube-dns` Service at kubeadm's address, the service CIDR's 10th
    (constants.GetDNSIP)."""
    meta = {"namespace": "kube-system", "labels": dict(DNS_LABELS)}
    dns = [{"name": "dns", "port": 53, "protocol": "UDP"},
           {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]
    spec = {
        "priorityClassName": "system-cluster-critical", "serviceAccountName": "coredns",
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {
                "labelSelector": {"matchExpressions": [
                    {"key": "k8s-app", "operator": "In", "values": ["kube-dns"]}]},
                "topologyKey": "kubernetes.io/hostname"}}]}},
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {"key": CONTROL_PLANE_LABEL, "effect": "NoSchedule"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "containers": [_pause("coredns", resources={"limits": {"memory": "170Mi"},
                                                    "requests": {"cpu": "100m",
                                                                 "memory": "70Mi"}},
                              ports=[{"containerPort": 53, "name": p["name"],
                                      "protocol": p["protocol"]} for p in dns])],
        "dnsPolicy": "Default"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "coredns", "namespace": "kube-system"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", **meta},
         "spec": {"replicas": 2, "strategy": {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxUnavailable": 1}},
                  "selector": {"matchLabels": dict(DNS_LABELS)},
                  "template": {"metadata": {"labels": dict(DNS_LABELS)}, "spec": spec}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", **meta},
         "spec": {"clusterIP": str(ipaddress.ip_network(service_cidr)[10]),
                  "selector": dict(DNS_LABELS),
                  "ports": [{**p, "targetPort": 53} for p in dns]}}]


def install_coredns(cp: ControlPlane, nodes: Iterable[PlannedNode], service_cidr: str,
                    report: TwinReport) -> None:
    """CoreDNS as `kubeadm init` leaves it: created while only the first control plane has
    joined (the others cordoned), so both replicas run there; then the others join
    (uncordoned). The scheduler never moves them: only a drain spreads them."""
    later = [n.name for n in nodes if n.role == "control-plane"][1:]
    for n in later:
        cp.kubectl("cordon", n)
    try:
        for obj in coredns(service_cidr):
            _submit(cp, obj, report)
        # A replica that finds no node is the report's to show (unscheduled), not the twin's.
        cp.kubectl("rollout", "status", "deployment/coredns", "-n", "kube-system",
                   "--timeout=180s", check=False, timeout=200)
    finally:
        for n in later:
            cp.kubectl("uncordon", n, check=False)
    report.stand_ins.append(
        "cluster DNS: kubeadm's coredns Deployment (its replicas, strategy, priority, "
        "anti-affinity, tolerations and node selector; pause containers) and kube-dns "
        "Service, created while only the first control plane had joined")


# ---------------------------------------------------------------- ingress-nginx's controller


def _ingress_fullname(release: str) -> str:
    """The chart's "ingress-nginx.controller.fullname" (no name or fullname overrides)."""
    return f"{release if 'ingress-nginx' in release else f'{release}-ingress-nginx'}-controller"


def ingress_services(releases: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(namespace, name) of every ingress-nginx release's controller Service."""
    return [(r["namespace"], _ingress_fullname(r["name"])) for r in releases
            if r["chart"] == "ingress-nginx"]


def ingress_controller(release: str, namespace: str, values: Mapping[str, Any],
                       placement: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ingress-nginx 4.13.3 chart's controller (templates/controller-deployment.yaml,
    controller-service.yaml, controller-poddisruptionbudget.yaml) with pause containers: the
    replicas, placement, affinity and priority the values give, its Service, and its budget
    exactly when the chart writes one (more than one replica)."""
    c = mapping(values, "controller")
    name = _ingress_fullname(release)
    selector = {"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/instance": release,
                "app.kubernetes.io/component": "controller"}
    meta = {"name": name, "namespace": namespace, "labels": dict(selector)}
    # With an autoscaler the chart leaves replicas to it and sizes the budget by its minimum.
    auto = mapping(c, "autoscaling")
    replicas = int(auto.get("minReplicas", 1) if auto.get("enabled") else
                   c.get("replicaCount", 1))
    spec = {**placement, **{k: c[k] for k in ("affinity", "topologySpreadConstraints")
                            if c.get(k)},
            "containers": [_pause("controller", ports=[
                {"name": "http", "containerPort": 80}, {"name": "https", "containerPort": 443}])]}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
        "replicas": replicas, "selector": {"matchLabels": selector},
        "minReadySeconds": int(c.get("minReadySeconds", 0)),
        **({"strategy": c["updateStrategy"]} if c.get("updateStrategy") else {}),
        "template": {"metadata": {"labels": {**selector, PROBE_LABEL: release}}, "spec": spec}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
        "type": mapping(c, "service").get("type", "LoadBalancer"), "selector": selector,
        "ports": [{"name": p, "port": port, "targetPort": p, "protocol": "TCP"}
                  for p, port in (("http", 80), ("https", 443))]}}
    if replicas <= 1:
        return [deployment, service]
    # The template's precedence: minAvailable (the chart's default 1) unless the values hold
    # the key maxUnavailable.
    least = c.get("minAvailable", 1)
    budget = ({"minAvailable": least} if least and "maxUnavailable" not in c else
              {"maxUnavailable": c["maxUnavailable"]} if c.get("maxUnavailable") else {})
    return [deployment, service, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta,
        "spec": {"selector": {"matchLabels": selector}, **budget}}]


def training_operator_objects(cp: ControlPlane, kustomization: str, module: Path,
                              work: Path) -> list[dict[str, Any]]:
    """The stack's kustomization of the Training Operator built by the real `kubectl
    kustomize`: its upstream overlay comes from the operator's Go module (the same files as
    the release the kustomization names by its tag's commit), since GitHub cannot be reached."""
    root = work / "training-operator"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(module / "manifests", root / "manifests")
    remote = re.search(r"^\s*- (github\.com/kubeflow/training-operator\.git/(\S+)\?ref=\S+)$",
                       kustomization, re.M)
    assert remote is not None, "the kustomization names no upstream overlay"
    (root / "kustomization.yaml").write_text(kustomization.replace(
        remote.group(1), remote.group(2)))
    return [o for o in yaml.safe_load_all(cp.kubectl("kustomize", str(root)).stdout) if o]


# ---------------------------------------------------------------- the order of `pulumi up`


@dataclass(frozen=True)
class Gate:
    """An acceptance gate of the plan: a command that waits for a job and checks it."""

    name: str
    job: tuple[str, str, str]  # (kind, namespace, name) of the job it waits for
    after: frozenset[tuple[str, str, str]]  # objects the plan creates only once it passed


def object_key(obj: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(kind, namespace, name) of a manifest or of a plan resource's inputs."""
    meta = obj.get("metadata") or {}
    if "kind" not in obj or "name" not in meta:
        return None
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


def gates(plan: Mapping[str, Any]) -> list[Gate]:
    """The plan's acceptance gates (commands of a workload that wait for one of its jobs) and
    the Kubernetes objects that depend on each, directly or through other resources."""
    res = {r["urn"]: r for r in plan["resources"]}
    deps: dict[str, set[str]] = {}

    def closure(urn: str) -> set[str]:
        if urn not in deps:
            deps[urn] = set()
            for d in res.get(urn, {}).get("options", {}).get("dependsOn", []):
                deps[urn] |= {d} | closure(d)
        return deps[urn]

    found = []
    for r in plan["resources"]:
        parent = res.get(r.get("parent", ""), {})
        if r["type"] != "command:remote:Command" or parent.get("type") != \
                "gpucluster:workloads:Workload":
            continue
        jobs = [object_key(res[d]["inputs"]) for d in r["options"]["dependsOn"]
                if d in res and res[d]["type"].startswith("kubernetes:")
                and res[d]["inputs"].get("kind") in JOB_KINDS]
        if not jobs:
            continue
        after = frozenset(k for u, o in res.items() if o["type"].startswith("kubernetes:")
                          and r["urn"] in closure(u) and (k := object_key(o["inputs"])))
        if jobs[0] is None:
            raise ValueError(f"{r['urn']} waits for a job without a kind or metadata.name")
        found.append(Gate(r["name"], jobs[0], after))
    return found


def play_gate(cp: ControlPlane, gate: Gate, sus: Mapping[str, str], timeout: float
              ) -> tuple[str, tuple[str, str, str]]:
    """Play an acceptance gate as its script does (components/planning/acceptance_run.py):
    the nodes it chooses on a cluster's first run, a copy of the job it waits for run there,
    and those nodes opened to work once it succeeded. Its state and the run's key."""
    kind, ns, name = gate.job
    chosen = acceptance_run.select(sus, cp.get("nodes")["items"],
                                   cp.get("pods", "--all-namespaces")["items"], changed=True)
    run = acceptance_run.instance(cp.get(kind.lower(), name, "-n", ns), chosen.hosts)
    cp.kubectl("create", "-f", "-", stdin=json.dumps(run))
    key = (kind, ns, run["metadata"]["name"])
    state = wait_for_job(cp, key, timeout)
    if "Succeeded" in state and chosen.untested:
        cp.kubectl("label", "nodes", *chosen.untested, f"{acceptance_run.UNTESTED}-")
    return state, key


def wait_for_job(cp: ControlPlane, key: tuple[str, str, str], timeout: float) -> str:
    """Play an acceptance gate's wait: the job's final condition (or how far it got)."""
    kind, ns, name = key
    state = "not created"
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        cp.check_alive()
        proc = cp.kubectl("get", kind.lower(), name, "-n", ns, "-o", "json", check=False)
        if proc.returncode == 0:
            conds = items(json.loads(proc.stdout), "status", "conditions")
            true = [str(get(c, "type")) for c in conds if get(c, "status") == "True"]
            state = ", ".join(true) or "no condition"
            if {"Succeeded", "Failed"} & set(true):
                return state
        time.sleep(1)
    return f"timed out after {timeout:g}s ({state})"


# ---------------------------------------------------------------- reading back


def _scheduling_failure(cp: ControlPlane, ns: str, name: str) -> str:
    events = cp.get("events", "-n", ns, "--field-selector",
                    f"involvedObject.name={name}")["items"]
    why = [get(e, "message", default="(no message)") for e in events
           if get(e, "reason") in ("FailedScheduling", "Unschedulable")]
    return why[-1] if why else "not scheduled (no event yet)"


def _pending(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not get(p, "spec", "nodeName")
            and get(p, "status", "phase") not in ("Succeeded", "Failed")]


def _seen_by_a_scheduler(pod: Mapping[str, Any]) -> bool:
    """kube-scheduler and Volcano both give a pod they could not place (or the API server
    one held back by a scheduling gate) a PodScheduled condition."""
    return any(get(c, "type") == "PodScheduled" for c in items(pod, "status", "conditions"))


def settle(cp: ControlPlane, report: TwinReport, timeout: float = 300,
           quiet: float = 15) -> list[dict[str, Any]]:
    """Wait until every pod is bound, every deleted pod gone (a finished gang's workers give
    their GPUs back) and every PodGroup running, or what is left has stayed so for `quiet`
    seconds (the schedulers keep retrying; a gang may wait for its last member) and each
    pod left has been tried by a scheduler (on a loaded machine one may not get to it for
    longer than that)."""
    end = time.monotonic() + timeout
    last_change, last = time.monotonic(), None
    while True:
        cp.check_alive()
        pods = cp.get("pods", "--all-namespaces")["items"]
        groups = cp.get("podgroups.scheduling.volcano.sh", "--all-namespaces")["items"]
        pending = _pending(pods)
        waiting = sorted([f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                          for p in pending] + [
            f"deleting {p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods
            if get(p, "metadata", "deletionTimestamp")] + [
            f"podgroup {g['metadata']['namespace']}/{g['metadata']['name']}" for g in groups
            if get(g, "status", "phase") not in ("Running", "Completed")])
        if waiting != last:
            last, last_change = waiting, time.monotonic()
        stayed = time.monotonic() - last_change > quiet and all(map(_seen_by_a_scheduler,
                                                                    pending))
        if not waiting or stayed or time.monotonic() > end:
            break
        time.sleep(1)
    report.placed.clear()
    report.unscheduled.clear()
    for p in pods:
        meta = p["metadata"]  # a namespaced object always has its name and namespace
        key = f"{meta['namespace']}/{meta['name']}"
        if node := get(p, "spec", "nodeName"):
            report.placed[key] = node
        elif get(p, "status", "phase") not in ("Succeeded", "Failed"):
            report.unscheduled[key] = _scheduling_failure(cp, meta["namespace"], meta["name"])
    return pods


def snapshot(cp: ControlPlane, pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """What the checks read and build/twin/ keeps, read once after the cluster settled."""
    return {
        "pods": pods,
        "nodes": cp.get("nodes")["items"],
        "podgroups": cp.get("podgroups.scheduling.volcano.sh", "--all-namespaces")["items"],
        "jobs": [j for kind in JOB_KINDS
                 for j in cp.get(f"{kind.lower()}s.kubeflow.org", "--all-namespaces")["items"]],
        "events": cp.get("events", "--all-namespaces")["items"],
        "daemonsets": cp.get("daemonsets", "--all-namespaces")["items"],
    }


def _write_atomically(path: Path, text: str) -> None:
    """The whole file or, if the twin stops while writing, the one that was there before."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _dump(path: Path, obj: Any) -> None:
    _write_atomically(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def write_state(out: Path, state: Mapping[str, list[dict[str, Any]]],
                report: TwinReport) -> None:
    """The objects read back and one line per Event, whatever fields the Event has: one
    without an optional field the line shows is written with "-" there, and reported."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("pods", "nodes", "podgroups", "jobs"):
        _dump(out / f"{name}.json", state[name])
    lines = []
    for e in state["events"]:
        fields, missing = describe_event(e)
        lines.append("\t".join(fields) + "\n")
        if missing:
            name = get(e, "metadata", "name", default="(no name)")
            report.incomplete.append(f"Event {fields[0]}/{name} ({fields[1]}): no "
                                     f"{', '.join(missing)}")
    _write_atomically(out / "events.txt", "".join(lines))


def write_report(out: Path, report: TwinReport) -> None:
    """report.json, written last: its presence means the twin finished."""
    out.mkdir(parents=True, exist_ok=True)
    _dump(out / "report.json", report.as_json())


def write(out: Path, state: Mapping[str, list[dict[str, Any]]], report: TwinReport) -> None:
    write_state(out, state, report)
    write_report(out, report)
