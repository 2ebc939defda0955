"""Apply a rendered stack to the twin and read back what a real cluster would do with it.

Every planned node becomes a KWOK node with the labels, taints and allocatable resources the
stack and the device plugins give it; every rendered Kubernetes object is applied to the real
API server (admission, CRD validation and Pod Security included); each Helm release, whose
chart cannot be fetched here, is stood in for by one probe pod per component, carrying the
placement the release's values give that component; the real scheduler places what it can.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from components.planning.nodes import PlannedNode
from components.planning.release_placement import probes

from .controlplane import ControlPlane

# Pods no scheduler here can place: Volcano's scheduler cannot be built from its Go modules
# (volcano.sh/apis is not served by the module proxy), so its gangs are listed, not judged.
VOLCANO = "volcano"
KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
PAUSE = "registry.k8s.io/pause:3.10"


@dataclass
class TwinReport:
    rejected: dict[str, str] = field(default_factory=dict)  # object -> API server's reason
    unscheduled: dict[str, str] = field(default_factory=dict)  # pod -> scheduler's reason
    not_judged: list[str] = field(default_factory=list)  # pods waiting for Volcano
    placed: dict[str, str] = field(default_factory=dict)  # pod -> node
    stand_ins: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.rejected and not self.unscheduled

    def lines(self) -> list[str]:
        out = [f"twin: {len(self.placed)} pods placed, {len(self.unscheduled)} unschedulable, "
               f"{len(self.rejected)} objects rejected, {len(self.not_judged)} pods left to "
               "Volcano (not judged)"]
        out += [f"  rejected   {k}: {v}" for k, v in sorted(self.rejected.items())]
        out += [f"  no node    {k}: {v}" for k, v in sorted(self.unscheduled.items())]
        out += [f"  stand-in   {s}" for s in self.stand_ins]
        return out


def node_object(n: PlannedNode) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n.name, "labels": dict(n.labels),
                         "annotations": dict(KWOK_ANNOTATION)},
            "spec": {"taints": [dict(t) for t in n.taints]},
            "status": {"allocatable": dict(n.allocatable), "capacity": dict(n.allocatable)}}


def crd_files(shared: Path, kinds: Iterable[tuple[str, str]]) -> list[Path]:
    """The upstream CRD of every custom kind the stack renders (the validator's own table)."""
    sys.path.insert(0, str(shared / "tools"))
    try:
        import validate_manifests  # noqa: PLC0415
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


def probe_pod(release: str, component: str, namespace: str,
              placement: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"probe-{release}-{component}"[:63].rstrip("-"),
                         "namespace": namespace,
                         "labels": {"gpucluster.io/twin-probe": release}},
            "spec": {**placement,
                     "containers": [{"name": "probe", "image": PAUSE,
                                     "securityContext": {
                                         "allowPrivilegeEscalation": False,
                                         "runAsNonRoot": True, "runAsUser": 65532,
                                         "capabilities": {"drop": ["ALL"]},
                                         "seccompProfile": {"type": "RuntimeDefault"}}}]}}


def apply_stack(cp: ControlPlane, build: Path, shared: Path, nodes: list[PlannedNode],
                report: TwinReport) -> None:
    manifests = [yaml.safe_load(p.read_text())
                 for p in sorted((build / "manifests").rglob("*.yaml"))]
    kinds = {(m["apiVersion"], m["kind"]) for m in manifests}
    for crd in crd_files(shared, kinds):
        cp.kubectl("apply", "--server-side", "-f", str(crd))
    cp.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    for n in nodes:
        cp.kubectl("create", "-f", "-", stdin=yaml.safe_dump(node_object(n)))
    releases = [yaml.safe_load(p.read_text()) for p in sorted((build / "helm").glob("*.yaml"))]
    # Each release creates its namespace (createNamespace), and the objects registered with a
    # release come after it.
    for ns in sorted({r["namespace"] for r in releases}):
        cp.kubectl("create", "namespace", ns, check=False)
    # Namespaces first, as a chart or `pulumi up` would order them.
    for m in sorted(manifests, key=lambda m: m["kind"] != "Namespace"):
        _submit(cp, m, report)
    for doc in releases:
        cp.wait_for_service_account(doc["namespace"])
        for component, placement in probes(doc["name"], doc["values"]).items():
            _submit(cp, probe_pod(doc["name"], component, doc["namespace"], placement), report)
        report.stand_ins.append(f"Helm release {doc['name']} ({doc['chart']} "
                                f"{doc['version']}): probe pods with its placement values")


def training_operator(cp: ControlPlane, kustomization: str, version: str, work: Path,
                      report: TwinReport) -> None:
    """The stack's kustomization of the Training Operator built by the real `kubectl
    kustomize` and applied: its upstream overlay comes from the operator's Go module (the
    same files as the release tag the kustomization names), since GitHub cannot be reached."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    module = json.loads(subprocess.run(
        [go, "mod", "download", "-json", f"github.com/kubeflow/training-operator@{version}"],
        capture_output=True, text=True, cwd=work, check=True).stdout)["Dir"]
    root = work / "training-operator"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(Path(module) / "manifests", root / "manifests")
    remote = re.search(r"^\s*- (github\.com/kubeflow/training-operator\.git/(\S+)\?ref=\S+)$",
                       kustomization, re.M)
    assert remote is not None, "the kustomization names no upstream overlay"
    (root / "kustomization.yaml").write_text(kustomization.replace(
        remote.group(1), remote.group(2)))
    for obj in yaml.safe_load_all(cp.kubectl("kustomize", str(root)).stdout):
        if obj is not None:
            _submit(cp, obj, report)
    report.stand_ins.append(f"Training Operator {version}: its manifests from the Go module "
                            "(the controller itself does not run)")


def _scheduling_failure(cp: ControlPlane, ns: str, name: str) -> str:
    events = cp.get("events", "-n", ns, "--field-selector",
                    f"involvedObject.name={name},reason=FailedScheduling")["items"]
    return events[-1]["message"] if events else "not scheduled (no event yet)"


def settle(cp: ControlPlane, report: TwinReport, timeout: float = 90) -> list[dict[str, Any]]:
    """Wait until every pod the default scheduler owns is placed or reported unschedulable."""
    end = time.monotonic() + timeout
    while True:
        pods = cp.get("pods", "--all-namespaces")["items"]
        waiting = [p for p in pods if not p["spec"].get("nodeName")
                   and p["spec"].get("schedulerName", "default-scheduler") != VOLCANO]
        failed = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in waiting
                  if any(c.get("reason") == "Unschedulable"
                         for c in p.get("status", {}).get("conditions", []))}
        if len(failed) == len(waiting) or time.monotonic() > end:
            break
        time.sleep(1)
    for p in pods:
        meta, spec = p["metadata"], p["spec"]
        key = f"{meta['namespace']}/{meta['name']}"
        if spec.get("nodeName"):
            report.placed[key] = spec["nodeName"]
        elif spec.get("schedulerName") == VOLCANO:
            report.not_judged.append(key)
        else:
            report.unscheduled[key] = _scheduling_failure(cp, meta["namespace"], meta["name"])
    return pods


def write(out: Path, cp: ControlPlane, pods: list[dict[str, Any]], report: TwinReport) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "pods.json").write_text(json.dumps(pods, indent=1, sort_keys=True) + "\n")
    nodes = cp.get("nodes")["items"]
    (out / "nodes.json").write_text(json.dumps(nodes, indent=1, sort_keys=True) + "\n")
    events = cp.get("events", "--all-namespaces")["items"]
    (out / "events.txt").write_text("".join(
        f"{e['metadata']['namespace']}\t{e['involvedObject']['kind']}/"
        f"{e['involvedObject']['name']}\t{e['reason']}\t{e.get('message', '')}\n"
        for e in events))
    (out / "report.json").write_text(json.dumps({
        "rejected": report.rejected, "unscheduled": report.unscheduled,
        "notJudged": sorted(report.not_judged), "placed": report.placed,
        "standIns": report.stand_ins}, indent=1, sort_keys=True) + "\n")
