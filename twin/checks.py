"""What the twin's cluster must show once the stack is applied: each check reads the objects
back from the API server (pods, PodGroups, jobs, events) and returns what a user would see go
wrong on hardware, one line each; an empty list means the check holds. Fields the API may leave
out are read with twin/objects.py: an object without one is judged by what it has."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from .controlplane import ControlPlane, ControlPlaneError
from .objects import describe_event, get, items, mapping
from .objects import key as _key

Obj = Mapping[str, Any]
JOB_LABEL = "training.kubeflow.org/job-name"
GPU = "nvidia.com/gpu"


def _time(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def _gpus(pod: Obj) -> int:
    return sum(int(get(c, "resources", "requests", GPU, default=0))
               for c in items(pod, "spec", "containers"))


def _labels(o: Obj) -> Mapping[str, Any]:
    return mapping(o, "metadata", "labels")


def _node(pod: Obj) -> str | None:
    node = get(pod, "spec", "nodeName")
    return str(node) if node else None


def _phase(o: Obj) -> Any:
    return get(o, "status", "phase")


def podgroups_running(podgroups: Sequence[Obj]) -> Iterator[str]:
    """Every gang was admitted by its queue and started (a finished one has completed)."""
    for pg in podgroups:
        phase = get(pg, "status", "phase", default="none")
        if phase not in ("Running", "Completed"):
            why = [str(get(c, "message")) for c in items(pg, "status", "conditions")
                   if get(c, "status") == "True" and get(c, "message")]
            yield (f"PodGroup {_key(pg)} (queue {get(pg, 'spec', 'queue')}, minMember "
                   f"{get(pg, 'spec', 'minMember')}) is {phase}: "
                   f"{'; '.join(why) or 'no reason'}")


def training_on_whole_nodes_of_one_su(pods: Sequence[Obj], nodes: Sequence[Obj],
                                      su_label: str, su_size: int) -> Iterator[str]:
    """A multi-node job's GPU pods each take a whole node, and stay in one SU when it fits."""
    by_node = {n["metadata"]["name"]: n for n in nodes}
    jobs: dict[str, list[Obj]] = defaultdict(list)
    for p in pods:
        if JOB_LABEL in _labels(p) and _gpus(p) and _phase(p) == "Running":
            jobs[f"{p['metadata']['namespace']}/{_labels(p)[JOB_LABEL]}"].append(p)
    for job, members in sorted(jobs.items()):
        hosts = [_node(p) for p in members]
        if len(set(hosts)) != len(hosts):
            yield f"job {job}: two of its GPU pods share a node ({sorted(map(str, hosts))})"
        for p in members:
            node = by_node.get(_node(p) or "")
            if node and _gpus(p) != int(get(node, "status", "allocatable", GPU, default=0)):
                yield f"job {job}: pod {p['metadata']['name']} takes part of a node"
        sus = {_labels(by_node[h]).get(su_label) for h in hosts if h in by_node}
        if len(members) <= su_size and len(sus) > 1:
            yield f"job {job}: spans SUs {sorted(map(str, sus))} though it fits in one"


def replicas_on_distinct_nodes(pods: Sequence[Obj]) -> Iterator[str]:
    """Serving replicas of one Deployment never share a node (a node loss takes one)."""
    sets: dict[str, list[str]] = defaultdict(list)
    for p in pods:
        owners = [o for o in items(p, "metadata", "ownerReferences")
                  if get(o, "kind") == "ReplicaSet"]
        if owners and _gpus(p) and (node := _node(p)):
            deployment = str(owners[0]["name"]).rsplit("-", 1)[0]
            sets[f"{p['metadata']['namespace']}/{deployment}"].append(node)
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
                 if any(get(t, "key") == GPU for t in items(n, "spec", "taints"))}
    for p in sorted(pods, key=_key):
        node = _node(p)
        if p["metadata"]["namespace"] in workload_namespaces or not node:
            continue
        priority = get(p, "spec", "priority", default=0)
        if priority > workload_priority:
            continue
        what = (f"{_key(p)}: priority {priority} "
                f"({get(p, 'spec', 'priorityClassName') or 'no class'})")
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
        agent = _labels(ds).get(agent_label)
        if agent is None:
            continue
        on = {_node(p) for p in pods
              if _labels(p).get(agent_label) == agent and _phase(p) == "Running"}
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
            done = [c for c in items(j, "status", "conditions")
                    if get(c, "type") in ("Succeeded", "Failed") and get(c, "status") == "True"]
            if not done:
                yield f"acceptance job {_key(j)} never finished"
                continue
            # lastTransitionTime is optional in a job condition: the job's completion
            # time stands in for it.
            at = get(done[0], "lastTransitionTime") or get(j, "status", "completionTime")
            if not at:
                yield (f"acceptance job {_key(j)} finished at no recorded time: whether it "
                       "ran alone cannot be told")
                continue
            finished[_key(j)] = _time(at)
    if not finished:
        return
    end = max(finished.values())
    for pg in podgroups:
        owner = [get(o, "name") for o in items(pg, "metadata", "ownerReferences")]
        mine = any(f"{pg['metadata']['namespace']}/{o}" in gate_jobs for o in owner)
        # The API server sets every object's creationTimestamp.
        created = _time(pg["metadata"]["creationTimestamp"])
        if not mine and created < end:
            yield (f"PodGroup {_key(pg)} was created at {created:%H:%M:%S}, before the "
                   f"acceptance test finished at {end:%H:%M:%S}")


def pod_security(events: Sequence[Obj]) -> Iterator[str]:
    """Pod Security admission refused no pod a controller tried to create."""
    for e in events:
        message = str(get(e, "message", default=""))
        if "PodSecurity" in message and get(e, "reason") in ("FailedCreate",
                                                             "FailedCreatePodReason"):
            (ns, involved, _reason, _message), _missing = describe_event(e)
            kind, name = involved.split("/", 1)
            yield f"{kind} {ns}/{name}: {message}"


def drain_honours_budget(cp: ControlPlane, pods: Sequence[Obj], budgets: Sequence[Obj],
                         seen: list[str]) -> Iterator[str]:
    """`kubectl drain` of one serving node goes through; of a second one, while the first
    replica has nowhere to go (every GPU node cordoned for a maintenance wave), is refused by
    the PodDisruptionBudget, and the replica keeps running."""
    for pdb in budgets:
        ns = pdb["metadata"]["namespace"]
        selector = mapping(pdb, "spec", "selector", "matchLabels")
        hosts = sorted({node for p in pods
                        if p["metadata"]["namespace"] == ns and (node := _node(p))
                        and selector.items() <= _labels(p).items()})
        if len(hosts) < 2:
            yield f"PodDisruptionBudget {_key(pdb)}: fewer than two replicas run ({hosts})"
            continue
        gpu_nodes = [n["metadata"]["name"] for n in cp.get("nodes")["items"]
                     if GPU in mapping(n, "status", "allocatable")]
        drain = ("drain", "--ignore-daemonsets", "--delete-emptydir-data", "--force")
        try:
            for n in gpu_nodes:
                cp.kubectl("cordon", n)
            # The first drain waits for KWOK to finish deleting the evicted pods (seconds on
            # an idle machine); the second is refused at its first eviction, then retried
            # every 5 s until its timeout.
            first = cp.kubectl(*drain, "--timeout=150s", hosts[0], check=False, timeout=180)
            if first.returncode != 0:
                yield f"drain {hosts[0]} failed: {first.stderr.strip()[-300:]}"
                continue
            seen.append(f"drain {hosts[0]}: {_last_line(first.stdout)}")
            second = cp.kubectl(*drain, "--timeout=20s", hosts[1], check=False)
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


CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
Service = tuple[str, str]  # (namespace, name)


def _service(endpoint_slice: Obj) -> Service:
    return (str(get(endpoint_slice, "metadata", "namespace")),
            str(_labels(endpoint_slice).get("kubernetes.io/service-name")))


class EndpointWatch:
    """The ready endpoints of some Services, from every version of their EndpointSlices that
    `kubectl get --watch` streams (a dip shorter than any polling period is still seen): now,
    and the fewest each had since `reset`."""

    def __init__(self, cp: ControlPlane, services: Sequence[Service]) -> None:
        self.cp, self.services = cp, list(services)
        self._slices: dict[str, Obj] = {}  # namespace/name -> its latest version
        self._fewest: dict[Service, int] = {}
        self._lock = threading.Lock()
        self.primed = threading.Event()  # set once every Service's slices were listed
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> EndpointWatch:
        names = ",".join(sorted({name for _, name in self.services}))
        self._proc = subprocess.Popen(
            [str(self.cp.bin / "kubectl"), f"--kubeconfig={self.cp.kubeconfig}", "get",
             "endpointslices", "--all-namespaces", "--watch", "--output-watch-events",
             "-o", "json", "-l", f"kubernetes.io/service-name in ({names})"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, args=(self._proc,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        """One JSON object per watch event: on a line of its own (kubectl 1.35), or indented
        over several."""
        assert proc.stdout is not None
        text = ""
        for line in proc.stdout:
            text += line
            try:
                event, text = json.loads(text), ""
            except ValueError:  # not whole yet
                continue
            obj = mapping(event, "object")
            with self._lock:
                if get(event, "type") == "DELETED":
                    self._slices.pop(_key(obj), None)
                elif get(event, "type") in ("ADDED", "MODIFIED"):
                    self._slices[_key(obj)] = obj
                ready = self._ready()
                for s in self.services:
                    self._fewest[s] = min(self._fewest.get(s, 1 << 30), len(ready[s]))
                if not set(self.services) - self.listed():
                    self.primed.set()

    def listed(self) -> set[Service]:
        """The Services with a slice (the controller makes one even with no endpoint)."""
        return {_service(o) for o in list(self._slices.values())}

    def _ready(self) -> dict[Service, list[str]]:
        """Service -> the nodes of its ready endpoints (the API: a missing `ready` is true)."""
        out: dict[Service, list[str]] = {s: [] for s in self.services}
        for o in self._slices.values():
            out.setdefault(_service(o), []).extend(
                str(get(e, "nodeName", default="?")) for e in items(o, "endpoints")
                if get(e, "conditions", "ready", default=True))
        return out

    def ready(self) -> dict[Service, list[str]]:
        with self._lock:
            return {s: sorted(hosts) for s, hosts in self._ready().items()}

    def reset(self) -> None:
        with self._lock:
            self._fewest = {s: len(h) for s, h in self._ready().items()}

    def fewest(self) -> dict[Service, int]:
        """Since `reset`; a watch that stopped has not seen them all: no verdict."""
        if self._proc is None or self._proc.poll() is not None:
            raise ControlPlaneError("the twin's watch of EndpointSlices stopped")
        with self._lock:
            return dict(self._fewest)

    def wait_for(self, counts: Mapping[Service, int], timeout: float) -> bool:
        """Until each Service has at least its count of ready endpoints again."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.cp.check_alive()
            if all(len(self.ready()[s]) >= n for s, n in counts.items()):
                return True
            time.sleep(0.3)
        return False


def control_plane_drains(cp: ControlPlane, services: Sequence[Service],
                         seen: list[str]) -> Iterator[str]:
    """Each control plane drained in turn (a kubelet upgrade, a planned reboot): cluster DNS
    and the ingress keep a ready endpoint throughout, since each keeps replicas on two hosts
    and a budget lets a drain evict one at a time. With one control plane nothing can: the
    outage is noted (the preview's impact says so), not failed."""
    nodes = sorted(n["metadata"]["name"] for n in cp.get("nodes")["items"]
                   if CONTROL_PLANE in _labels(n))
    with EndpointWatch(cp, services) as watch:
        if not watch.primed.wait(30):
            missing = sorted(f"{ns}/{name}" for ns, name in set(services) - watch.listed())
            yield f"no EndpointSlice of {', '.join(missing)} in 30 s: no drain was tried"
            return
        for node in nodes:
            yield from _drain_control_plane(cp, watch, node, len(nodes) == 1, seen)


def _drain_control_plane(cp: ControlPlane, watch: EndpointWatch, node: str, alone: bool,
                         seen: list[str]) -> Iterator[str]:
    before = watch.ready()
    watch.reset()
    # --force: the twin's probes are bare pods (a chart's are owned by a controller).
    drain = cp.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
                       "--force", "--timeout=90s", check=False, timeout=120)
    fewest = watch.fewest()
    cp.kubectl("uncordon", node, check=False)
    # Settled: every Service has as many ready endpoints as before the drain.
    settled = watch.wait_for({s: len(h) for s, h in before.items()}, 60)
    after = watch.ready()
    what = " (the only control plane)" if alone else ""
    seen.append(f"control-plane drain {node}{what}: " + "; ".join(
        _endpoints_seen(s[1], fewest[s], before[s], after[s]) for s in watch.services))
    if drain.returncode != 0:
        yield f"drain {node} failed: {drain.stderr.strip()[-300:]}"
    for s in watch.services:
        if not fewest[s] and not alone:
            yield (f"drain {node}: {s[0]}/{s[1]} had no ready endpoint during the drain "
                   f"({len(before[s])} before)")
        if not settled and len(after[s]) < len(before[s]):
            yield (f"drain {node}: {s[0]}/{s[1]} had {len(after[s])} of {len(before[s])} "
                   "ready endpoints 60 s after the uncordon")


def _endpoints_seen(name: str, fewest: int, before: Sequence[str], after: Sequence[str]
                    ) -> str:
    low = f">= {fewest} throughout" if fewest else "fell to 0"
    return (f"{name} ready endpoints {low} ({len(before)} before, on "
            f"{', '.join(after) or 'no node'} after)")


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _probe_pod(namespace: str, name: str, security: Mapping[str, Any],
               volumes: Sequence[Mapping[str, Any]] = (),
               container: Mapping[str, Any] | None = None) -> dict[str, Any]:
    mounts = [{"name": v["name"], "mountPath": f"/mnt/{v['name']}"} for v in volumes]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10",
                                 "securityContext": dict(security), "volumeMounts": mounts,
                                 **(container or {})}],
                 "volumes": list(volumes)}}


# `kubectl debug --profile=sysadmin`'s container: privileged (k8s.io/kubectl pkg/cmd/debug
# profiles.go, sysadminProfile), added through the pods/ephemeralcontainers subresource.
SYSADMIN_DEBUGGER = {"name": "debugger", "image": "registry.k8s.io/e2e-test-images/busybox:1.36",
                     "targetContainerName": "probe", "securityContext": {"privileged": True}}


def pod_admission(cp: ControlPlane, cluster: Any, seen: list[str]) -> Iterator[str]:
    """What the API server admits, asked with server-side dry runs: in a training namespace
    Pod Security baseline plus IPC_LOCK and the scratch hostPath (the ValidatingAdmissionPolicy)
    and nothing more, on every way into a pod (its containers, a debugger added later); in any
    namespace without labels, the cluster default (baseline)."""
    training = sorted({j.namespace for j in cluster.workloads.training} | {"training"})[0]
    scratch = cluster.storage.scratch.mount_point
    cp.kubectl("create", "namespace", "twin-unlabeled", check=False)
    rdma = {"capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
            "allowPrivilegeEscalation": False}
    probe_host = {"livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 10250,
                                                "path": "/pods"}}}
    cases: list[tuple[str, str, Mapping[str, Any], list[dict[str, Any]], bool,
                      Mapping[str, Any] | None]] = [
        (training, "rdma-worker", rdma,
         [{"name": "scratch", "hostPath": {"path": scratch, "type": "Directory"}}], True, None),
        (training, "privileged", {"privileged": True}, [], False, None),
        (training, "host-root", rdma, [{"name": "root", "hostPath": {"path": "/"}}], False,
         None),
        (training, "sys-admin", {"capabilities": {"add": ["SYS_ADMIN"]}}, [], False, None),
        (training, "apparmor-unconfined", {"appArmorProfile": {"type": "Unconfined"}}, [],
         False, None),
        (training, "selinux-spc", {"seLinuxOptions": {"type": "spc_t"}}, [], False, None),
        (training, "probe-host", rdma, [], False, probe_host),
        ("twin-unlabeled", "privileged", {"privileged": True}, [], False, None),
        (cluster.platform.gpu_operator.namespace, "driver", {"privileged": True}, [], True,
         None),
    ]
    for ns, name, security, volumes, admitted, container in cases:
        proc = cp.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(
            _probe_pod(ns, f"twin-{name}", security, volumes, container)), check=False)
        verdict = "admitted" if proc.returncode == 0 else \
            f"refused: {_last_line(proc.stderr)[:240]}"
        seen.append(f"admission {ns}/{name}: {verdict}")
        if (proc.returncode == 0) != admitted:
            yield (f"a {name} pod in {ns} was {verdict}, expected "
                   f"{'admitted' if admitted else 'refused'}")
    yield from _debugger_admission(cp, training, rdma, seen)


def _debugger_admission(cp: ControlPlane, ns: str, security: Mapping[str, Any],
                        seen: list[str]) -> Iterator[str]:
    """A privileged debugger added to an admitted pod (what `kubectl debug --profile=sysadmin`
    sends): an UPDATE of pods/ephemeralcontainers, refused like a privileged pod. The target
    pod selects no node, so it never runs; it is deleted after."""
    target = _probe_pod(ns, "twin-debug-target", security)
    target["spec"]["nodeSelector"] = {"twin.gpucluster.io/nowhere": "true"}
    made = cp.kubectl("create", "-f", "-", stdin=json.dumps(target), check=False)
    if made.returncode != 0:
        yield f"the debugger's target pod in {ns} was refused: {_last_line(made.stderr)}"
        return
    try:
        patch = {"spec": {"ephemeralContainers": [SYSADMIN_DEBUGGER]}}
        proc = cp.kubectl("patch", "pod", "twin-debug-target", "-n", ns,
                          "--subresource=ephemeralcontainers", "--type=strategic",
                          "--dry-run=server", "-p", json.dumps(patch), check=False)
        verdict = "admitted" if proc.returncode == 0 else \
            f"refused: {_last_line(proc.stderr)[:240]}"
        seen.append(f"admission {ns}/sysadmin-debugger: {verdict}")
        if proc.returncode == 0:
            yield f"a privileged debugger added to a pod in {ns} was admitted, expected refused"
    finally:
        cp.kubectl("delete", "pod", "twin-debug-target", "-n", ns, "--wait=false",
                   check=False)


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


def _anonymous_status(url: str, tries: int = 3, timeout: float = 30) -> int:
    """The HTTP status of a request without credentials. No answer at all is the twin's
    problem, not a verdict on the stack: after `tries` it stops the twin."""
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # loopback, the twin's self-signed serving cert
    last: OSError | None = None
    for _ in range(tries):
        try:
            with urllib.request.urlopen(url, context=insecure, timeout=timeout) as r:
                return int(r.status)
        except urllib.error.HTTPError as err:
            return err.code
        except OSError as err:  # refused, reset, timed out (URLError is an OSError)
            last = err
    raise ControlPlaneError(f"no answer from {url} in {tries} tries: {last}")


def anonymous_access(cp: ControlPlane, seen: list[str]) -> Iterator[str]:
    """Requests without credentials against the real API server with the stack's
    AuthenticationConfiguration (and kubeadm's cluster-info RBAC): answered on the health
    checks and cluster-info only, 401 everywhere else."""
    cp.kubectl("create", "namespace", "kube-public", check=False)
    cp.kubectl("apply", "-f", "-", stdin=_CLUSTER_INFO_RBAC)
    for path, want in ANONYMOUS_EXPECTED.items():
        got = _anonymous_status(cp.server + path)
        seen.append(f"anonymous {path}: {got}")
        if got != want:
            yield f"an anonymous request for {path} got {got}, expected {want}"
