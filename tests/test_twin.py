"""The cluster twin: the prod rendering applied to a real control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler built from their Go modules by tools/k8s/build.sh) with
KWOK nodes for the planned hosts. What a real cluster would refuse or leave unscheduled fails
here. Runs when the binaries are built (`make k8s-tools`; `make twin` builds and runs it).
A twin that exits without a verdict (exit 2: it could not run or broke) fails the test with its
stderr (support/twin.py)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from support.twin import BINS, SHARED, run_twin

AGENT = "gpucluster.io/twin-node-agent"  # the label the twin puts on node-agent probes
CONTROL_PLANES = ("mgmt-01", "mgmt-02", "mgmt-03")  # Pulumi.prod.yaml's, behind kube-vip
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not BINS, reason="twin binaries not built: run `make k8s-tools` "
                       "(kube-apiserver, scheduler, controller-manager, kubectl, etcd, kwok)"),
    pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (upstream CRDs) is absent"),
]


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("twin")
    res = run_twin(out)
    read = lambda name: json.loads((out / name).read_text())  # noqa: E731
    return {"code": res.code, "out": res.out, "report": res.report,
            "pods": read("pods.json"), "nodes": read("nodes.json"),
            "podgroups": read("podgroups.json"), "jobs": read("jobs.json")}


def mutated(tmp_path: Path, build: Path, edit: Callable[[Path], None],
            *args: str) -> dict:
    """The prod rendering (the session's `build`) with one defect put back, applied to a
    fresh twin."""
    rendering = tmp_path / "prod"
    shutil.copytree(build, rendering)
    edit(rendering)
    res = run_twin(tmp_path / "twin", "--rendering", str(rendering), *args)
    return {"code": res.code, "out": res.out, "report": res.report}


def edit_yaml(path: Path, fn) -> None:
    doc = yaml.safe_load(path.read_text())
    fn(doc)
    path.write_text(yaml.safe_dump(doc))


def _on(pods: list, namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods
            if p["metadata"]["namespace"] == namespace and p["status"].get("phase") == "Running"}


def test_the_api_server_accepts_every_rendered_object(twin) -> None:
    assert twin["report"]["rejected"] == {}, twin["out"]


def test_every_planned_node_registers_with_its_taints_and_resources(twin) -> None:
    nodes = {n["metadata"]["name"]: n for n in twin["nodes"]}
    assert set(nodes) == set(CONTROL_PLANES) | {f"gpu-node-{i:02d}" for i in range(8)}
    gpu = nodes["gpu-node-03"]
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert gpu["spec"]["taints"][0]["key"] == "nvidia.com/gpu"
    ready = [c for c in gpu["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"  # KWOK keeps the stand-in kubelet ready


def test_every_pod_is_bound_and_every_check_holds(twin) -> None:
    report = twin["report"]
    assert report["unscheduled"] == {} and report["failures"] == [], twin["out"]
    assert twin["code"] == 0, twin["out"]


def test_every_system_pod_and_node_agent_gets_a_node_from_the_real_scheduler(twin) -> None:
    pods, placed = twin["pods"], twin["report"]["placed"]
    probes = [p for p in pods if "gpucluster.io/twin-probe" in p["metadata"].get("labels", {})]
    assert len(probes) >= 20
    for p in probes:
        assert f"{p['metadata']['namespace']}/{p['metadata']['name']}" in placed
    # The Training Operator (its real manifests, the stack's kustomization) on the control plane.
    operator = [node for key, node in placed.items() if key.startswith("kubeflow/training-op")]
    assert len(operator) == 1 and operator[0] in CONTROL_PLANES, placed
    # The Lustre CSI node plugin runs on every GPU node and nowhere else.
    csi = sorted(node for key, node in placed.items() if "lustre-csi" in key)
    assert csi == [f"gpu-node-{i:02d}" for i in range(8)]


def test_every_gang_is_admitted_by_its_queue_and_runs(twin) -> None:
    """Volcano (built from its module, with the stack's scheduler configuration) admitted the
    PodGroups the Training Operator and Volcano's controller created: the training job's
    group of 4 whole nodes and the serving replicas'. The NCCL test's run (launcher and 8
    workers) ran and its group was deleted by the operator when the test succeeded."""
    groups = {(g["metadata"]["namespace"], g["spec"]["queue"]): g for g in twin["podgroups"]}
    assert set(groups) == {("training", "training"), ("inference", "inference")}
    assert groups[("training", "training")]["spec"]["minMember"] == 4
    assert groups[("training", "training")]["status"]["phase"] == "Running"
    assert groups[("inference", "inference")]["status"]["phase"] == "Running"
    launcher = next(p for p in twin["pods"]
                    if p["metadata"]["name"] == "nccl-allreduce-run-launcher")
    assert launcher["status"]["phase"] == "Succeeded"
    assert launcher["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == \
        "nccl-allreduce-run"


def test_the_operator_starts_torchrun_with_the_elastic_c10d_rendezvous(twin) -> None:
    """What the real Training Operator gave each worker: torchrun's elastic agent, whose c10d
    rendezvous restarts every rank when one fails, over exactly 4 nodes."""
    for p in twin["pods"]:
        if p["metadata"]["name"].startswith("llama-70b-pretrain-worker-"):
            env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
            assert env["PET_RDZV_BACKEND"] == "c10d"
            assert env["PET_NNODES"] == "4:4" and env["PET_MAX_RESTARTS"] == "3"
            assert "MASTER_ADDR" not in env and "RANK" not in env


def test_training_takes_whole_nodes_of_one_su(twin) -> None:
    nodes = {n["metadata"]["name"]: n for n in twin["nodes"]}
    workers = {k: v for k, v in _on(twin["pods"], "training").items() if "pretrain" in k}
    assert len(workers) == 4 and len(set(workers.values())) == 4, workers
    su = "node-restriction.kubernetes.io/gpucluster-su"
    assert {nodes[n]["metadata"]["labels"][su] for n in workers.values()} == {"su1"}
    # Nothing else holds a GPU on those nodes: each pod takes all 8.
    for pod in twin["pods"]:
        if pod["spec"].get("nodeName") in workers.values() and \
                pod["status"].get("phase") == "Running" and "pretrain" not in \
                pod["metadata"]["name"]:
            assert not any(c["resources"].get("requests", {}).get("nvidia.com/gpu")
                           for c in pod["spec"]["containers"]), pod["metadata"]["name"]


def test_serving_replicas_land_on_distinct_nodes_away_from_training(twin) -> None:
    serving = _on(twin["pods"], "inference")
    training = set(_on(twin["pods"], "training").values())
    assert len(serving) == 2 and len(set(serving.values())) == 2, serving
    assert not set(serving.values()) & training
    assert {p["spec"]["priority"] for p in twin["pods"]
            if p["metadata"]["namespace"] == "inference"} == {100000}


def test_the_nccl_test_runs_alone_and_finishes_before_training_exists(twin) -> None:
    """The gate's run of the stack's (suspended) MPIJob, on every GPU node of a new cluster,
    finished before the training job was created; the nodes are open to work only after."""
    jobs = {j["metadata"]["name"]: j for j in twin["jobs"]}
    assert jobs["nccl-allreduce"]["spec"]["runPolicy"]["suspend"] is True
    done = [c for c in jobs["nccl-allreduce-run"]["status"]["conditions"]
            if c["type"] == "Succeeded" and c["status"] == "True"]
    assert done, jobs["nccl-allreduce-run"]["status"]
    finished = done[0]["lastTransitionTime"]
    for name in ("llama-70b-pretrain",):
        assert jobs[name]["metadata"]["creationTimestamp"] >= finished
    # Its workers gave their GPUs back (cleanPodPolicy: Running); the launcher's log stays.
    left = [p["metadata"]["name"] for p in twin["pods"]
            if p["metadata"]["name"].startswith("nccl-allreduce")]
    assert left == ["nccl-allreduce-run-launcher"], left
    assert not [n["metadata"]["name"] for n in twin["nodes"]
                if "gpucluster.io/untested" in n["metadata"]["labels"]]
    assert twin["report"]["gates"] == {"nccl-allreduce-acceptance": "Created, Succeeded"}


def test_a_drain_is_refused_when_it_would_take_the_last_serving_replica(twin) -> None:
    seen = [s for s in twin["report"]["seen"] if s.startswith("drain ")]
    assert len(seen) == 2 and seen[0].endswith("drained"), seen
    assert "Cannot evict pod as it would violate the pod's disruption budget" in seen[1], seen


def _control_plane_drains(report: dict) -> dict[str, str]:
    """node -> what the twin saw while draining it (the check's seen lines)."""
    return {s.split(":", 1)[0].removeprefix("control-plane drain "): s.split(": ", 1)[1]
            for s in report["seen"] if s.startswith("control-plane drain ")}


DNS_THROUGH = re.compile(r"kube-dns ready endpoints >= [12] throughout \(2 before, "
                         r"on (mgmt-0\d), (mgmt-0\d) after\)")
INGRESS_THROUGH = re.compile(r"ingress-nginx-controller ready endpoints >= [12] throughout "
                             r"\(2 before, on (mgmt-0\d), (mgmt-0\d) after\)")


def test_dns_and_the_ingress_answer_through_each_control_plane_drain(twin) -> None:
    """kubeadm's CoreDNS starts with both replicas on mgmt-01 (`kubeadm init` creates it before
    the other control planes join) and the ingress controller with two on two hosts. Each
    control plane drained in turn: the budgets let a drain evict one replica at a time, so
    kube-dns and the ingress keep a ready endpoint throughout (every version of their
    EndpointSlices watched), and each drain leaves the two replicas on two other hosts."""
    on = lambda labels: sorted(  # noqa: E731
        p["spec"]["nodeName"] for p in twin["pods"]
        if labels.items() <= p["metadata"].get("labels", {}).items())
    assert on({"k8s-app": "kube-dns"}) == ["mgmt-01", "mgmt-01"], twin["out"]
    ingress = on({"app.kubernetes.io/instance": "ingress-nginx",
                  "app.kubernetes.io/component": "controller"})
    assert len(set(ingress)) == 2 and set(ingress) <= set(CONTROL_PLANES), ingress
    drains = _control_plane_drains(twin["report"])
    assert sorted(drains) == list(CONTROL_PLANES), twin["out"]
    for node, seen in drains.items():
        for through in (DNS_THROUGH, INGRESS_THROUGH):
            hosts = through.search(seen)
            assert hosts, seen
            assert hosts[1] != hosts[2] and node not in hosts.groups(), seen


def test_without_the_coredns_budget_draining_the_first_control_plane_takes_dns_down(
        tmp_path: Path, build: Path) -> None:
    """The stack's budget for kubeadm's CoreDNS taken out: both replicas still run on mgmt-01,
    where `kubeadm init` started them, and its drain evicts them at once. The outage lasts
    only until KWOK readies their replacements (milliseconds), which the watch still sees."""
    def edit(rendering: Path) -> None:
        (rendering / "manifests/kube-system/poddisruptionbudget-coredns.yaml").unlink()
    res = mutated(tmp_path, build, edit)
    assert res["code"] == 1, res["out"]
    assert res["report"]["failures"] == [
        "drain mgmt-01: kube-system/kube-dns had no ready endpoint during the drain "
        "(2 before)"], res["out"]
    assert "kube-dns ready endpoints fell to 0" in \
        _control_plane_drains(res["report"])["mgmt-01"]


def test_node_health_from_a_fault_in_a_nodes_files_to_its_repair(twin) -> None:
    """node-problem-detector runs on every GPU node (twin/quarantine.py): each reports its node
    healthy; an Xid 79 on a node of the training gang becomes GPUFallenOffBus, set by the
    detector, the gang is suspended whole and runs again off that node; a rail at 1X on
    another node of the gang becomes InfinibandRailDegraded and a taint only; the repair of
    each names its fix."""
    seen = [s for s in twin["report"]["seen"]
            if s.startswith(("node health", "quarantine", "repair"))]
    assert "node-problem-detector on 8 GPU nodes" in seen[0] and "all 9 conditions False" \
        in seen[0], seen
    xid = re.match(r"node health (\S+): Xid 79 in its kernel log -> GPUFallenOffBus "
                   r"\(GPUFellOffBus\) set by node-problem-detector", seen[1])
    assert xid, seen
    sick = xid[1]
    assert seen[2].startswith(f"quarantine {sick} (GPUFallenOffBus): {sick}: quarantined")
    assert "suspended training/llama-70b-pretrain whole" in seen[2], seen
    assert seen[3] == ("quarantine: all 4 ranks of training/llama-70b-pretrain stopped, none "
                       "running beside a rank created again"), seen
    again = next(s for s in seen if s.startswith("quarantine: training/llama-70b-pretrain runs "
                                                 "again on "))
    assert sick not in again, seen
    rail = next(re.match(r"node health (\S+): rail 5 \(mlx5_9\) at 100 Gb/sec \(1X NDR\) -> "
                         r"InfinibandRailDegraded \(RailBelowPlannedRate\)", s) for s in seen
                if "InfinibandRailDegraded (RailBelowPlannedRate) set by" in s)
    assert rail and rail[1] in again and rail[1] != sick, seen
    assert any(s.startswith(f"quarantine {rail[1]}: tainted gpucluster.io/quarantine="
                            "InfinibandRailDegraded:NoSchedule, not drained") for s in seen), seen
    repairs = {s.split()[1]: s for s in seen if s.startswith("repair ")}
    assert "RESTART_BM" in repairs[sick] and "GPU baseboard" in repairs[sick], seen
    assert re.search(r"rail 5 \(mlx5_9\): leaf-su1-r4-5 port \d+, cable leaf-su1-r4-5:\d+, "
                     r"node port OSFP2P2: re-seat", repairs[rail[1]]), seen


def test_admission_refuses_what_a_training_pod_must_not_do(twin) -> None:
    """The real API server, with the stack's AdmissionConfiguration and its
    ValidatingAdmissionPolicy: in `training`, Pod Security baseline plus IPC_LOCK and the
    scratch hostPath, nothing more (a privileged pod, hostPath `/`, SYS_ADMIN are refused);
    a namespace without labels enforces baseline by default; the operators' namespaces are
    exempt by name (the GPU driver pod is privileged). The training gang itself was admitted:
    its pods are among those placed."""
    seen = {s.split(":", 1)[0].removeprefix("admission "): s.split(": ", 1)[1]
            for s in twin["report"]["seen"] if s.startswith("admission ")}
    assert seen["training/rdma-worker"] == "admitted"
    assert "privileged containers are not allowed" in seen["training/privileged"]
    assert "hostPath volumes other than the scratch array" in seen["training/host-root"]
    assert "capabilities beyond baseline and IPC_LOCK" in seen["training/sys-admin"]
    assert 'violates PodSecurity "baseline:latest"' in seen["twin-unlabeled/privileged"]
    assert seen["gpu-operator/driver"] == "admitted"


def test_the_api_server_answers_anonymous_requests_only_where_joins_and_probes_need(
        twin) -> None:
    """The real API server with the stack's AuthenticationConfiguration: without credentials
    the health checks and the cluster-info ConfigMap (`kubeadm join`'s discovery) answer,
    everything else is 401 — not 403: the request is not even authenticated as anonymous."""
    seen = {s.split(":", 1)[0].removeprefix("anonymous "): s.rsplit(": ", 1)[1]
            for s in twin["report"]["seen"] if s.startswith("anonymous ")}
    assert seen == {"/livez": "200", "/readyz": "200", "/healthz": "200",
                    "/api/v1/namespaces/kube-public/configmaps/cluster-info": "200",
                    "/version": "401", "/metrics": "401", "/api/v1/namespaces": "401",
                    "/api/v1/namespaces/kube-system/secrets": "401"}


def test_a_queue_below_its_gang_and_stacked_serving_replicas_fail(tmp_path: Path,
                                                                  build: Path) -> None:
    """Two defects put back: the training queue capped below the job's 32-GPU gang (the 56 <
    64 defect), and the serving Deployment without its anti-affinity, its replicas on 4 GPUs
    (binpack then stacks two of them on one node)."""
    def half_node_replicas(d: dict) -> None:
        spec = d["spec"]["template"]["spec"]
        spec.pop("affinity")
        for res in spec["containers"][0]["resources"].values():
            res["nvidia.com/gpu"] = "4"

    def edit(rendering: Path) -> None:
        edit_yaml(rendering / "manifests/cluster/queue-training.yaml",
                  lambda q: q["spec"]["capability"].update({"nvidia.com/gpu": "24"}))
        edit_yaml(rendering / "manifests/inference/deployment-llama-70b.yaml",
                  half_node_replicas)
    res = mutated(tmp_path, build, edit)
    assert res["code"] == 1, res["out"]
    failures = "\n".join(res["report"]["failures"])
    assert "PodGroup training/llama-70b-pretrain (queue training, minMember 4) is " in failures
    assert "Deployment inference/llama-70b: replicas share a node" in failures


def test_training_created_beside_the_nccl_test_fails(tmp_path: Path, build: Path) -> None:
    """The plan's dependency of training and serving on the acceptance gate removed: all three
    are created at once, and the acceptance test no longer runs alone."""
    def edit(rendering: Path) -> None:
        plan = json.loads((rendering / "plan.json").read_text())
        gate = next(r["urn"] for r in plan["resources"]
                    if r["name"] == "nccl-allreduce-acceptance")
        for r in plan["resources"]:
            r["options"]["dependsOn"] = [d for d in r["options"]["dependsOn"] if d != gate]
        (rendering / "plan.json").write_text(json.dumps(plan))
    # The test may never get its nodes here: a minute shows it either way (if it finishes
    # later, training's gang was created before it finished).
    res = mutated(tmp_path, build, edit, "--gate-timeout", "60")
    assert res["code"] == 1, res["out"]
    failures = "\n".join(res["report"]["failures"])
    # Volcano either admits training first (the test then never gets its 8 nodes) or the
    # test first (training's gang then exists while the fabric is still under test).
    assert "acceptance job training/nccl-allreduce-run never finished" in failures or \
        "before the acceptance test finished" in failures, failures


# An Event as core/v1 allows it: no reason, no involvedObject.kind (both optional).
BARE_EVENT = {"apiVersion": "v1", "kind": "Event",
              "metadata": {"name": "twin-bare-event", "namespace": "training"},
              "involvedObject": {"name": "llama-70b-pretrain", "namespace": "training"},
              "message": "an event without a reason"}


def test_nccl_workers_kept_after_the_test_starve_training(tmp_path: Path, build: Path) -> None:
    """cleanPodPolicy None put back: the finished test's 8 workers keep every GPU. An Event
    without a reason or involvedObject.kind is created too: the twin writes it with "-" in
    events.txt and reports it (once it stopped there, without events.txt or report.json)."""
    def edit(rendering: Path) -> None:
        edit_yaml(rendering / "manifests/training/mpijob-nccl-allreduce.yaml",
                  lambda j: j["spec"]["runPolicy"].update({"cleanPodPolicy": "None"}))
        (rendering / "manifests/training/event-twin-bare-event.yaml").write_text(
            yaml.safe_dump(BARE_EVENT))
    res = mutated(tmp_path, build, edit)
    assert res["code"] == 1, res["out"]
    failures = "\n".join(res["report"]["failures"])
    assert "PodGroup training/llama-70b-pretrain (queue training, minMember 4) is " in failures
    assert res["report"]["rejected"] == {}, res["report"]["rejected"]
    assert "Event training/twin-bare-event (-/llama-70b-pretrain): no involvedObject.kind, " \
        "reason" in res["report"]["incomplete"], res["report"]["incomplete"]
    events = (tmp_path / "twin" / "events.txt").read_text().splitlines()
    assert "training\t-/llama-70b-pretrain\t-\tan event without a reason" in events


def test_system_pods_run_at_the_system_priorities_the_api_server_admits(twin) -> None:
    """Kubernetes' built-in classes, resolved by the API server's Priority admission:
    node agents system-node-critical (2000001000) on every node, above the serving class
    that preempts; controllers at least system-cluster-critical (2000000000). Only the
    Network Operator 26.4.1 chart, which has no key for it, leaves three controllers at 0 on
    the control plane, and the report says so."""
    pods = [p for p in twin["pods"] if p["spec"].get("nodeName")]
    agents: dict[str, set[str]] = {}
    for p in pods:
        if agent := p["metadata"].get("labels", {}).get(AGENT):
            agents.setdefault(agent, set()).add(p["spec"]["nodeName"])
            assert p["spec"]["priority"] == 2000001000, p["metadata"]["name"]
    every = set(CONTROL_PLANES) | {f"gpu-node-{i:02d}" for i in range(8)}
    # The Network Operator's Node Feature Discovery worker too: its chart's worker key.
    assert agents == {"metallb.speaker": every, "prometheus.node-exporter": every,
                      "network-operator.nfd-worker": every}
    low = sorted(p["metadata"]["name"] for p in pods if p["spec"].get("priority", 0) < 2000000000
                 and p["metadata"]["namespace"] not in ("training", "inference"))
    assert low == ["probe-network-operator-nfd-gc", "probe-network-operator-nfd-master",
                   "probe-network-operator-operator"]
    notes = [s for s in twin["report"]["seen"] if "priority" in s]
    assert len(notes) == 3 and all(re.search(r"on mgmt-0[123], where no workload runs", s)
                                   for s in notes), notes
    operator = next(p for p in pods if p["metadata"]["namespace"] == "kubeflow")
    assert operator["spec"]["priority"] == 2000000000


def test_a_release_without_its_tolerations_or_priority_fails(tmp_path: Path,
                                                              build: Path) -> None:
    """Defects the placement values fix, put back: cert-manager with the chart's own
    placement only (the real scheduler finds no node: every node is tainted), MetalLB's
    speaker at the chart's default priority 0 on GPU nodes, below the serving class that
    preempts lower priorities, and node-exporter's tolerations overridden to none."""
    def edit(rendering: Path) -> None:
        def strip(doc: dict) -> None:
            for block in (doc["values"], *(doc["values"][k] for k in
                                           ("webhook", "cainjector", "startupapicheck"))):
                block.pop("tolerations"), block.pop("nodeSelector")
        edit_yaml(rendering / "helm" / "cert-manager.yaml", strip)
        edit_yaml(rendering / "helm" / "metallb.yaml",
                  lambda doc: doc["values"]["speaker"].pop("priorityClassName"))
        edit_yaml(rendering / "helm" / "prometheus.yaml", lambda doc: doc["values"][
            "prometheus-node-exporter"].update(tolerations=[]))
    res = mutated(tmp_path, build, edit)
    assert res["code"] == 1, res["out"]
    assert set(res["report"]["unscheduled"]) == {
        f"cert-manager/probe-cert-manager-{c}" for c in (
            "controller", "webhook", "cainjector", "startupapicheck")}
    assert all("untolerated taint" in why for why in res["report"]["unscheduled"].values())
    low = [f for f in res["report"]["failures"] if "probe-metallb-speaker" in f]
    assert len(low) == 8 and all("priority 0 (no class) on GPU node" in f for f in low), \
        res["report"]["failures"]
    # A node agent whose tolerations are overridden: the DaemonSet controller covers no node.
    assert "node agent monitoring/probe-prometheus-node-exporter runs on 0 of 11 " \
        "nodes; none on gpu-node-00" in "\n".join(res["report"]["failures"])
