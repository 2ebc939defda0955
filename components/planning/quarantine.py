#!/usr/bin/python3
"""Takes sick GPU nodes out of service — installed by gpu-cluster; do not edit. Run by
gpu-cluster-quarantine.timer on every control-plane host; each run is one idempotent pass.

node-problem-detector sets a node condition for each fault it finds (docs/health.md). A
condition the policy names makes the node unfit:

- `taint`: the node gets the quarantine taint (NoSchedule) at once, so no new pod lands on it;
  what runs there keeps running (a degraded rail slows a job, it does not stop it);
- `drain`: tainted, then emptied without splitting a gang. Each Kubeflow job with a pod there is
  suspended whole (`runPolicy.suspend`: the Training Operator stops every rank, on every node,
  and the job restarts from its last checkpoint when resumed); every other pod is evicted
  through the Eviction API, which honours PodDisruptionBudgets, within a bounded time; a pod of
  another kind of gang (a Volcano Job) is left and named, since evicting one rank of it
  restarts the whole gang. A job this program suspended is resumed once none of its pods is
  left: the gang is scheduled again, away from the tainted node.

Never more than `maxQuarantined` nodes carry the taint at once: past that, a sick node is
named and left as it is until one is released. A protected host (a control plane, a
subnet-manager host) is never tainted, cordoned or drained: it is named with its role. Nothing
is released automatically: after the repair the technician removes the taint
(`kubectl taint node <node> gpucluster.io/quarantine-`), which is the repair runbook's last step.

Every control plane runs it, one at a time: a pass first takes the Lease `LEASE` in
kube-system (held for `LEASE_S` seconds and renewed by each pass of its holder; taken over
only once it ran out, and only by an update the API server orders, so two hosts never both
win). A host that does not hold it does nothing: passes never race on `maxQuarantined`.

Standard library and kubectl only, no project imports: the control planes run this file as it
is (tests run it against a real API server).

Usage: gpu-cluster-quarantine POLICY_JSON [KUBECONFIG [HOLDER]]
"""

# The control planes' python3 is Ubuntu 22.04's (DGX OS 6), 3.10: no datetime.UTC yet.
# ruff: noqa: UP017
from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

TAINT = "gpucluster.io/quarantine"  # value: the condition that put it there
REASON = "gpucluster.io/quarantine-reason"  # node annotation: condition, reason and message
SUSPENDED = "gpucluster.io/quarantine-suspended"  # job annotation: the node it was suspended for
JOB_NAME = "training.kubeflow.org/job-name"
OPERATOR = "training.kubeflow.org/operator-name"
GROUP = "scheduling.k8s.io/group-name"  # Volcano's gang annotation on every member pod
VOLCANO_JOB = "volcano.sh/job-name"
KINDS = {"pytorchjob-controller": "pytorchjobs.kubeflow.org",
         "mpijob-controller": "mpijobs.kubeflow.org"}
LEASE = "gpu-cluster-quarantine"
LEASE_S = 90  # three missed passes of the holder's 30 s timer before another host takes over


class Kubectl:
    def __init__(self, kubeconfig: str | None) -> None:
        self.base = ["kubectl", *([f"--kubeconfig={kubeconfig}"] if kubeconfig else [])]

    def run(self, *args: str, check: bool = True, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([*self.base, *args], capture_output=True, text=True, input=stdin)
        if check and out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
        return out

    def items(self, *args: str) -> list[dict[str, Any]]:
        out = self.run("get", *args, "-o", "json", check=False)
        if out.returncode != 0 and "doesn't have a resource type" in out.stderr:
            return []  # a kind of job this cluster does not run
        if out.returncode != 0:
            raise RuntimeError(f"kubectl get {' '.join(args)}: {out.stderr.strip()}")
        return list(json.loads(out.stdout)["items"])


def unfit(node: Mapping[str, Any], conditions: Mapping[str, str]) -> list[dict[str, Any]]:
    """The node's conditions the policy names that are True, in the policy's order."""
    found = {c["type"]: c for c in node.get("status", {}).get("conditions", [])
             if c.get("status") == "True" and c.get("type") in conditions}
    return [found[t] for t in conditions if t in found]


def tainted(node: Mapping[str, Any]) -> bool:
    return any(t.get("key") == TAINT for t in node.get("spec", {}).get("taints") or [])


def action(found: Sequence[Mapping[str, Any]], conditions: Mapping[str, str]) -> str:
    return "drain" if any(conditions[c["type"]] == "drain" for c in found) else "taint"


def quarantine(k: Kubectl, name: str, first: Mapping[str, Any]) -> None:
    why = f"{first['type']}: {first.get('reason', '')}: {first.get('message', '')}"
    k.run("taint", "node", name, f"{TAINT}={first['type']}:NoSchedule", "--overwrite")
    k.run("annotate", "node", name, f"{REASON}={why}", "--overwrite")
    print(f"{name}: quarantined (NoSchedule): {why}")


def job_of(pod: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(resource, namespace, name) of the Kubeflow job a pod is a rank of."""
    labels = pod["metadata"].get("labels") or {}
    resource = KINDS.get(labels.get(OPERATOR, ""))
    if resource is None or JOB_NAME not in labels:
        return None
    return resource, pod["metadata"]["namespace"], labels[JOB_NAME]


def other_gang(pod: Mapping[str, Any]) -> bool:
    """A gang member no Kubeflow job owns (a Volcano Job): evicting it restarts the gang."""
    meta = pod["metadata"]
    return job_of(pod) is None and (VOLCANO_JOB in (meta.get("labels") or {})
                                    or GROUP in (meta.get("annotations") or {}))


def suspend(k: Kubectl, job: tuple[str, str, str], node: str) -> None:
    resource, namespace, name = job
    state = json.loads(k.run("-n", namespace, "get", resource, name, "-o", "json").stdout)
    if (state["spec"].get("runPolicy") or {}).get("suspend"):
        return
    k.run("-n", namespace, "annotate", resource, name, f"{SUSPENDED}={node}", "--overwrite")
    k.run("-n", namespace, "patch", resource, name, "--type=merge",
          "-p", json.dumps({"spec": {"runPolicy": {"suspend": True}}}))
    print(f"{node}: suspended {namespace}/{name} whole (every rank stops; it resumes from its "
          "last checkpoint away from this node)")


def drain(k: Kubectl, node: str, timeout_s: int) -> bool:
    """Suspend the Kubeflow gangs with a rank on the node, evict the rest; False when
    something is left on it."""
    pods = [p for p in k.items("pods", "-A", f"--field-selector=spec.nodeName={node}")
            if p.get("status", {}).get("phase") in ("Pending", "Running")]
    for job in sorted({j for p in pods if (j := job_of(p)) is not None}):
        suspend(k, job, node)
    kept = sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                  for p in pods if other_gang(p))
    for pod in kept:
        print(f"{node}: left {pod}, a rank of a gang no Kubeflow job owns (evicting it "
              "restarts the whole gang); fix: suspend that job (vcctl job suspend), then "
              "this drain finishes", file=sys.stderr)
    out = k.run("drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
                f"--pod-selector=!{JOB_NAME},!{VOLCANO_JOB}", f"--timeout={timeout_s}s",
                check=False)
    if out.returncode != 0:
        print(f"{node}: drain did not finish: {out.stderr.strip()}", file=sys.stderr)
    return out.returncode == 0 and not kept


def resume(k: Kubectl) -> None:
    """Resume each job suspended here once none of its pods is left."""
    for resource in sorted(KINDS.values()):
        for job in k.items(resource, "-A"):
            meta = job["metadata"]
            node = (meta.get("annotations") or {}).get(SUSPENDED)
            if node is None:
                continue
            ns, name = meta["namespace"], meta["name"]
            if k.items("pods", "-n", ns, "-l", f"{JOB_NAME}={name}"):
                continue
            k.run("-n", ns, "patch", resource, name, "--type=merge",
                  "-p", json.dumps({"spec": {"runPolicy": {"suspend": False}}}))
            k.run("-n", ns, "annotate", resource, name, f"{SUSPENDED}-")
            print(f"{node}: resumed {ns}/{name} (its gang is scheduled again, off {node})")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease(holder: str) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": "kube-system"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": LEASE_S,
                     "renewTime": _now()}}


def leads(k: Kubectl, holder: str) -> bool:
    """Whether this host holds the Lease now: created, renewed, or taken over once it ran
    out. Both writes fail on a conflict (a create of an existing name, a replace of a stale
    resourceVersion), so of two hosts at once one wins."""
    got = k.run("-n", "kube-system", "get", "lease", LEASE, "-o", "json", check=False)
    if got.returncode != 0 and "NotFound" not in got.stderr:
        raise RuntimeError(f"kubectl get lease {LEASE}: {got.stderr.strip()}")
    if got.returncode != 0:
        return k.run("create", "-f", "-", check=False,
                     stdin=json.dumps(_lease(holder))).returncode == 0
    lease = json.loads(got.stdout)
    spec = lease.get("spec") or {}
    renewed = datetime.strptime(spec.get("renewTime", "1970-01-01T00:00:00.000000Z"),
                                "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    expired = datetime.now(timezone.utc) - renewed > timedelta(
        seconds=spec.get("leaseDurationSeconds", LEASE_S))
    if spec.get("holderIdentity") != holder and not expired:
        return False
    lease["spec"] = _lease(holder)["spec"]
    return k.run("replace", "-f", "-", check=False, stdin=json.dumps(lease)).returncode == 0


def run(policy: Mapping[str, Any], k: Kubectl) -> int:
    """One pass; the exit status is 1 when a sick node is left in service or undrained."""
    conditions: dict[str, str] = policy["conditions"]
    protected: dict[str, str] = policy.get("protected", {})
    nodes = sorted(k.items("nodes"), key=lambda n: n["metadata"]["name"])
    held = sum(1 for n in nodes if tainted(n))
    status = 0
    for node in nodes:
        name = node["metadata"]["name"]
        found = unfit(node, conditions)
        if not found:
            continue
        if name in protected:
            print(f"{name}: {found[0]['type']} ({found[0].get('reason', '')}); not "
                  f"quarantined: it is the {protected[name]} (move its role, then quarantine "
                  "it by hand)", file=sys.stderr)
            status = 1
            continue
        if not tainted(node):
            if held >= policy["maxQuarantined"]:
                print(f"{name}: {found[0]['type']}; left in service: {held} nodes are "
                      f"quarantined already (maxQuarantined {policy['maxQuarantined']})",
                      file=sys.stderr)
                status = 1
                continue
            quarantine(k, name, found[0])
            held += 1
        if action(found, conditions) == "drain" and not drain(
                k, name, policy["drainTimeoutSeconds"]):
            status = 1
    resume(k)
    return status


def main(argv: Sequence[str]) -> int:
    if len(argv) not in (2, 3, 4):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        policy = json.load(f)
    k = Kubectl(argv[2] if len(argv) >= 3 else None)
    holder = argv[3] if len(argv) == 4 else socket.gethostname()
    try:
        if not leads(k, holder):
            return 0  # another control plane's pass holds the Lease
        return run(policy, k)
    except RuntimeError as err:  # the API server refused or could not be reached
        print(f"quarantine: {err}; nothing more was changed this pass", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
