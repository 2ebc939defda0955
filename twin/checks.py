"""What the twin's cluster must show once the stack is applied: each check reads the objects
back from the API server (pods, PodGroups, jobs, events) and returns what a user would see go
wrong on hardware, one line each; an empty list means the check holds."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from .controlplane import ControlPlane

Obj = Mapping[str, Any]
JOB_LABEL = "training.kubeflow.org/job-name"
GPU = "nvidia.com/gpu"


def _key(o: Obj) -> str:
    return f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}"


def _time(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def _gpus(pod: Obj) -> int:
    return sum(int(c.get("resources", {}).get("requests", {}).get(GPU, 0))
               for c in pod["spec"]["containers"])


def podgroups_running(podgroups: Sequence[Obj]) -> Iterator[str]:
    """Every gang was admitted by its queue and started (a finished one has completed)."""
    for pg in podgroups:
        phase = pg.get("status", {}).get("phase", "none")
        if phase not in ("Running", "Completed"):
            why = [c.get("message", "") for c in pg.get("status", {}).get("conditions", [])
                   if c.get("status") == "True" and c.get("message")]
            yield (f"PodGroup {_key(pg)} (queue {pg['spec'].get('queue')}, minMember "
                   f"{pg['spec'].get('minMember')}) is {phase}: {'; '.join(why) or 'no reason'}")


def training_on_whole_nodes_of_one_su(pods: Sequence[Obj], nodes: Sequence[Obj],
                                      su_label: str, su_size: int) -> Iterator[str]:
    """A multi-node job's GPU pods each take a whole node, and stay in one SU when it fits."""
    by_node = {n["metadata"]["name"]: n for n in nodes}
    jobs: dict[str, list[Obj]] = defaultdict(list)
    for p in pods:
        if JOB_LABEL in p["metadata"].get("labels", {}) and _gpus(p) and \
                p.get("status", {}).get("phase") == "Running":
            jobs[f"{p['metadata']['namespace']}/{p['metadata']['labels'][JOB_LABEL]}"].append(p)
    for job, members in sorted(jobs.items()):
        hosts = [p["spec"].get("nodeName") for p in members]
        if len(set(hosts)) != len(hosts):
            yield f"job {job}: two of its GPU pods share a node ({sorted(hosts)})"
        for p in members:
            node = by_node.get(p["spec"].get("nodeName", ""))
            if node and _gpus(p) != int(node["status"]["allocatable"].get(GPU, 0)):
                yield f"job {job}: pod {p['metadata']['name']} takes part of a node"
        sus = {by_node[h]["metadata"]["labels"].get(su_label) for h in hosts if h in by_node}
        if len(members) <= su_size and len(sus) > 1:
            yield f"job {job}: spans SUs {sorted(map(str, sus))} though it fits in one"


def replicas_on_distinct_nodes(pods: Sequence[Obj]) -> Iterator[str]:
    """Serving replicas of one Deployment never share a node (a node loss takes one)."""
    sets: dict[str, list[str]] = defaultdict(list)
    for p in pods:
        owners = [o for o in p["metadata"].get("ownerReferences", [])
                  if o["kind"] == "ReplicaSet"]
        if owners and _gpus(p) and p["spec"].get("nodeName"):
            deployment = owners[0]["name"].rsplit("-", 1)[0]
            sets[f"{p['metadata']['namespace']}/{deployment}"].append(p["spec"]["nodeName"])
    for name, hosts in sorted(sets.items()):
        if len(set(hosts)) != len(hosts):
            yield f"Deployment {name}: replicas share a node ({sorted(hosts)})"


def system_pods_outrank_workloads(pods: Sequence[Obj], nodes: Sequence[Obj],
                                  workload_namespaces: Sequence[str], workload_priority: int,
                                  notes: list[str]) -> Iterator[str]:
    """A node agent on a GPU node outranks every workload pod: otherwise a serving pod, whose
    class preempts lower priorities, could evict it from a full node (its metrics, its L2
    announcements, its network or storage plugin gone). Controllers on the control-plane
    hosts, where no workload runs, are noted when they keep a workload-level priority."""
    gpu_nodes = {n["metadata"]["name"] for n in nodes
                 if any(t["key"] == GPU for t in n["spec"].get("taints", []))}
    for p in sorted(pods, key=_key):
        node = p["spec"].get("nodeName")
        if p["metadata"]["namespace"] in workload_namespaces or not node:
            continue
        priority = p["spec"].get("priority", 0)
        if priority > workload_priority:
            continue
        what = (f"{_key(p)}: priority {priority} "
                f"({p['spec'].get('priorityClassName') or 'no class'})")
        if node in gpu_nodes:
            yield f"{what} on GPU node {node} is not above the workloads' {workload_priority}"
        else:
            notes.append(f"{what} on {node}, where no workload runs")


def node_agents_on_every_node(daemonsets: Sequence[Obj], pods: Sequence[Obj],
                              nodes: Sequence[Obj], agent_label: str) -> Iterator[str]:
    """A node agent (metrics exporter, L2 speaker) covers every node: the DaemonSet controller
    makes no pod for a node whose taints the agent does not tolerate, so a missing toleration
    shows as a node without its agent, not as a pending pod."""
    everywhere = {n["metadata"]["name"] for n in nodes}
    for ds in sorted(daemonsets, key=_key):
        agent = ds["metadata"].get("labels", {}).get(agent_label)
        if agent is None:
            continue
        on = {p["spec"].get("nodeName") for p in pods
              if p["metadata"].get("labels", {}).get(agent_label) == agent
              and p.get("status", {}).get("phase") == "Running"}
        missing = sorted(everywhere - on)
        if missing:
            yield (f"node agent {_key(ds)} runs on {len(everywhere) - len(missing)} of "
                   f"{len(everywhere)} nodes; none on {', '.join(missing)}")


def gate_ran_alone(jobs: Sequence[Obj], podgroups: Sequence[Obj],
                   gate_jobs: Sequence[str]) -> Iterator[str]:
    """The acceptance job finished before any other gang was created."""
    finished = {}
    for j in jobs:
        if _key(j) in gate_jobs:
            done = [c for c in j.get("status", {}).get("conditions", [])
                    if c["type"] in ("Succeeded", "Failed") and c["status"] == "True"]
            if not done:
                yield f"acceptance job {_key(j)} never finished"
                continue
            finished[_key(j)] = _time(done[0]["lastTransitionTime"])
    if not finished:
        return
    end = max(finished.values())
    for pg in podgroups:
        owner = [o["name"] for o in pg["metadata"].get("ownerReferences", [])]
        mine = any(f"{pg['metadata']['namespace']}/{o}" in gate_jobs for o in owner)
        created = _time(pg["metadata"]["creationTimestamp"])
        if not mine and created < end:
            yield (f"PodGroup {_key(pg)} was created at {created:%H:%M:%S}, before the "
                   f"acceptance test finished at {end:%H:%M:%S}")


def pod_security(events: Sequence[Obj]) -> Iterator[str]:
    """Pod Security admission refused no pod a controller tried to create."""
    for e in events:
        if "PodSecurity" in e.get("message", "") and e["reason"] in ("FailedCreate",
                                                                      "FailedCreatePodReason"):
            yield f"{e['involvedObject']['kind']} {e['metadata']['namespace']}/" \
                  f"{e['involvedObject']['name']}: {e['message']}"


def drain_honours_budget(cp: ControlPlane, pods: Sequence[Obj], budgets: Sequence[Obj],
                         seen: list[str]) -> Iterator[str]:
    """`kubectl drain` of one serving node goes through; of a second one, while the first
    replica has nowhere to go (every GPU node cordoned for a maintenance wave), is refused by
    the PodDisruptionBudget, and the replica keeps running."""
    for pdb in budgets:
        ns = pdb["metadata"]["namespace"]
        selector = pdb["spec"]["selector"]["matchLabels"]
        hosts = sorted({p["spec"]["nodeName"] for p in pods
                        if p["metadata"]["namespace"] == ns and p["spec"].get("nodeName")
                        and selector.items() <= p["metadata"].get("labels", {}).items()})
        if len(hosts) < 2:
            yield f"PodDisruptionBudget {_key(pdb)}: fewer than two replicas run ({hosts})"
            continue
        gpu_nodes = [n["metadata"]["name"] for n in cp.get("nodes")["items"]
                     if GPU in n["status"].get("allocatable", {})]
        drain = ("drain", "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                 "--timeout=20s")
        try:
            for n in gpu_nodes:
                cp.kubectl("cordon", n)
            first = cp.kubectl(*drain, hosts[0], check=False)
            if first.returncode != 0:
                yield f"drain {hosts[0]} failed: {first.stderr.strip()[-300:]}"
                continue
            seen.append(f"drain {hosts[0]}: {_last_line(first.stdout)}")
            second = cp.kubectl(*drain, hosts[1], check=False)
            refusal = [ln for ln in second.stderr.splitlines() if "disruption budget" in ln]
            seen.append(f"drain {hosts[1]} (every GPU node cordoned): "
                        f"{(refusal or [_last_line(second.stderr)])[0][:300]}")
            if second.returncode == 0:
                yield (f"drain {hosts[1]} evicted the last running replica of {_key(pdb)}: "
                       "the PodDisruptionBudget did not hold")
            elif "disruption budget" not in second.stderr:
                yield f"drain {hosts[1]} failed for another reason: {second.stderr[-300:]}"
        finally:
            for n in gpu_nodes:
                cp.kubectl("uncordon", n, check=False)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _probe_pod(namespace: str, name: str, security: Mapping[str, Any],
               volumes: Sequence[Mapping[str, Any]] = ()) -> str:
    mounts = [{"name": v["name"], "mountPath": f"/mnt/{v['name']}"} for v in volumes]
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10",
                                 "securityContext": dict(security), "volumeMounts": mounts}],
                 "volumes": list(volumes)}})


def pod_admission(cp: ControlPlane, cluster: Any, seen: list[str]) -> Iterator[str]:
    """What the API server admits, asked with server-side dry runs: in a training namespace
    Pod Security baseline plus IPC_LOCK and the scratch hostPath (the ValidatingAdmissionPolicy)
    and nothing more; in any namespace without labels, the cluster default (baseline)."""
    training = sorted({j.namespace for j in cluster.workloads.training} | {"training"})[0]
    scratch = cluster.storage.scratch.mount_point
    cp.kubectl("create", "namespace", "twin-unlabeled", check=False)
    rdma = {"capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
            "allowPrivilegeEscalation": False}
    cases: list[tuple[str, str, Mapping[str, Any], list[dict[str, Any]], bool]] = [
        (training, "rdma-worker", rdma,
         [{"name": "scratch", "hostPath": {"path": scratch, "type": "Directory"}}], True),
        (training, "privileged", {"privileged": True}, [], False),
        (training, "host-root", rdma, [{"name": "root", "hostPath": {"path": "/"}}], False),
        (training, "sys-admin", {"capabilities": {"add": ["SYS_ADMIN"]}}, [], False),
        ("twin-unlabeled", "privileged", {"privileged": True}, [], False),
        (cluster.platform.gpu_operator.namespace, "driver", {"privileged": True}, [], True),
    ]
    for ns, name, security, volumes, admitted in cases:
        proc = cp.kubectl("create", "--dry-run=server", "-f", "-",
                          stdin=_probe_pod(ns, f"twin-{name}", security, volumes), check=False)
        verdict = "admitted" if proc.returncode == 0 else \
            f"refused: {proc.stderr.strip().splitlines()[-1][:240]}"
        seen.append(f"admission {ns}/{name}: {verdict}")
        if (proc.returncode == 0) != admitted:
            yield (f"a {name} pod in {ns} was {verdict}, expected "
                   f"{'admitted' if admitted else 'refused'}")


# kubeadm's RBAC for token discovery (phases/bootstraptoken/clusterinfo): anonymous may read
# the cluster-info ConfigMap, nothing else.
_CLUSTER_INFO_RBAC = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: cluster-info, namespace: kube-public}
data: {kubeconfig: ""}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: "kubeadm:bootstrap-signer-clusterinfo", namespace: kube-public}
rules:
- {apiGroups: [""], resources: [configmaps], resourceNames: [cluster-info], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: "kubeadm:bootstrap-signer-clusterinfo", namespace: kube-public}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role,
          name: "kubeadm:bootstrap-signer-clusterinfo"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:anonymous"}]
"""
# path → the status an unauthenticated request must get from the stack's API server
ANONYMOUS_EXPECTED = {"/livez": 200, "/readyz": 200, "/healthz": 200,
                      "/api/v1/namespaces/kube-public/configmaps/cluster-info": 200,
                      "/version": 401, "/metrics": 401, "/api/v1/namespaces": 401,
                      "/api/v1/namespaces/kube-system/secrets": 401}


def anonymous_access(cp: ControlPlane, seen: list[str]) -> Iterator[str]:
    """Requests without credentials against the real API server with the stack's
    AuthenticationConfiguration (and kubeadm's cluster-info RBAC): answered on the health
    checks and cluster-info only, 401 everywhere else."""
    cp.kubectl("create", "namespace", "kube-public", check=False)
    cp.kubectl("apply", "-f", "-", stdin=_CLUSTER_INFO_RBAC)
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # loopback, the twin's self-signed serving cert
    for path, want in ANONYMOUS_EXPECTED.items():
        try:
            with urllib.request.urlopen(cp.server + path, context=insecure, timeout=10) as r:
                got = r.status
        except urllib.error.HTTPError as err:
            got = err.code
        seen.append(f"anonymous {path}: {got}")
        if got != want:
            yield f"an anonymous request for {path} got {got}, expected {want}"
