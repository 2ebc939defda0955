"""Every pod the stack makes or installs has a planned node it can be scheduled on.

Every Kubernetes node is tainted (kubeadm's control-plane taint, the stack's GPU taint), so a
chart controller without tolerations has no node at all. The nodes are the ones the stack plans
(`components/planning/nodes.py`); the filters are the scheduler's taint/toleration, nodeSelector
and required-affinity rules; the charts' defaults are their values.yaml at the pinned versions.
The cluster twin (`tests/test_twin.py`) runs the same question through the real kube-scheduler.
"""

from __future__ import annotations

import functools

import pytest
from support.project import REPO, prod_raw

from components.model.cluster import Cluster
from components.planning import (
    acceptance,
    inference,
    kubeadm,
    namespaces,
    nodes,
    platform,
    release_placement,
    storage,
    training,
    workloads,
)
from components.planning.labels import GPU_NODE_TERM
from components.planning.scheduling import fits, homes, tolerates
from components.wiring.loading import validate_cluster


@functools.cache
def prod() -> Cluster:
    return validate_cluster(prod_raw(), REPO)


def planned() -> list[nodes.PlannedNode]:
    return nodes.planned_nodes(prod())


def by_role(role: str) -> set[str]:
    return {n.name for n in planned() if n.role == role}


RELEASES = {r.name: r for r in platform.helm_releases(prod())}
CASES = [(r, c) for r, comps in release_placement.COMPONENTS.items() for c in comps]


def test_every_release_has_its_components_listed() -> None:
    assert set(RELEASES) == set(release_placement.COMPONENTS)


@pytest.mark.parametrize("release,component", CASES, ids=[f"{r}-{c.name}" for r, c in CASES])
def test_every_chart_component_has_a_home(release: str, component) -> None:
    spec = release_placement.probes(release, RELEASES[release].values)[component.name]
    where = set(homes(spec, planned()))
    if component.runs_on == "system":
        assert where and where <= by_role("control-plane"), (release, component.name, where)
    else:
        assert where == {n.name for n in planned()}, (release, component.name, where)


def test_with_the_charts_own_defaults_the_controllers_have_no_node() -> None:
    """The defect the placement fixes: with only the chart defaults, these have no node."""
    homeless = sorted(f"{r}/{c.name}" for r, c in CASES
                      if not homes(release_placement.probes(r, {})[c.name], planned()))
    assert {"cert-manager/controller", "cert-manager/webhook", "ingress-nginx/controller",
            "metallb/controller", "prometheus/prometheus", "prometheus-adapter/adapter",
            "volcano/scheduler-controllers-admission"} <= set(homeless)
    assert "calico/tigera-operator" not in homeless  # tolerates every taint by default


def test_the_planned_nodes_are_tainted_as_kubeadm_and_the_stack_taint_them() -> None:
    cp, gpu = by_role("control-plane"), by_role("gpu-worker")
    assert cp == {"mgmt-01", "mgmt-02", "mgmt-03"} and len(gpu) == 8
    for n in planned():
        assert len(n.taints) == 1
        assert n.taints[0]["key"] == ("node-role.kubernetes.io/control-plane"
                                      if n.role == "control-plane" else "nvidia.com/gpu")
    gpu0 = next(n for n in planned() if n.name == "gpu-node-00")
    assert gpu0.allocatable["nvidia.com/gpu"] == "8" and gpu0.allocatable["rdma/ib"] == "63"
    assert gpu0.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    # DGX H100: two Xeon Platinum 8480C, 56 cores each with two threads (224 logical CPUs the
    # kubelet reports), less the kubelet's system and kube reservations (4 + 4).
    assert gpu0.allocatable["cpu"] == str(2 * 56 * 2 - 4 - 4)


def _pod_specs(obj: dict) -> list[dict]:
    spec = obj.get("spec", {})
    if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
        return [spec["template"]["spec"]]
    if obj["kind"] in ("PyTorchJob", "MPIJob"):
        replicas = spec.get("pytorchReplicaSpecs") or spec.get("mpiReplicaSpecs") or {}
        return [r["template"]["spec"] for r in replicas.values()]
    return []


def test_every_rendered_pod_template_has_a_home() -> None:
    c = prod()
    objs = storage.csi_driver_objects(c) + [o for j in c.workloads.training
                                            for o in training.training_objects(c, j)]
    objs += [o for s in c.workloads.inference for o in inference.inference_objects(c, s)]
    if c.workloads.nccl_test is not None:
        objs.append(acceptance.nccl_test_mpijob(c, c.workloads.nccl_test))
    specs = [(o["metadata"]["name"], s) for o in objs for s in _pod_specs(o)]
    assert len(specs) == 5  # CSI node plugin, torchrun worker, vLLM, NCCL launcher and worker
    for name, spec in specs:
        where = set(homes(spec, planned()))
        assert where, name
        if spec.get("schedulerName") == "volcano" or "nvidia.com/gpu" in str(spec):
            assert where <= by_role("gpu-worker"), name


def test_the_filters_follow_kubernetes_matching_rules() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert tolerates([{"operator": "Exists"}], taint)
    assert tolerates([{"key": "nvidia.com/gpu", "operator": "Exists"}], taint)
    assert tolerates([{"key": "nvidia.com/gpu", "value": "present"}], taint)  # Equal default
    assert not tolerates([{"key": "nvidia.com/gpu", "value": "absent"}], taint)
    assert not tolerates([{"key": "nvidia.com/gpu", "operator": "Exists",
                           "effect": "NoExecute"}], taint)
    assert not tolerates([{"key": "", "operator": "Equal"}], taint)
    gpu0 = next(n for n in planned() if n.name == "gpu-node-00")
    ok = {"tolerations": [{"operator": "Exists"}],
          "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
              "nodeSelectorTerms": [{"matchExpressions": [
                  {"key": "node-restriction.kubernetes.io/gpucluster-su", "operator": "In",
                 "values": ["su1"]}]}]}}}}
    assert fits(ok, gpu0)
    ok["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ["su2"]
    assert not fits(ok, gpu0)


def test_every_gpu_pod_names_a_priority_class_the_stack_creates() -> None:
    """Serving outranks training; training never preempts (a preempted rank stalls its gang).
    A pod naming a class that does not exist is refused at admission (the twin checks that
    with the real API server)."""
    c = prod()
    classes = {pc["metadata"]["name"]: pc for pc in namespaces.priority_classes()}
    trainers = [o for j in c.workloads.training for o in training.training_objects(c, j)]
    trainers.append(acceptance.nccl_test_mpijob(c, c.workloads.nccl_test))
    servers = [o for s in c.workloads.inference for o in inference.inference_objects(c, s)]
    for objs, name in ((trainers, namespaces.TRAINING_PRIORITY),
                       (servers, namespaces.INFERENCE_PRIORITY)):
        specs = [s for o in objs for s in _pod_specs(o)]  # MPI launchers are gang members too
        assert specs and all(s["priorityClassName"] == name for s in specs)
    assert classes[namespaces.INFERENCE_PRIORITY]["value"] > classes[namespaces.TRAINING_PRIORITY][
        "value"]
    assert classes[namespaces.TRAINING_PRIORITY]["preemptionPolicy"] == "Never"


# Components whose chart has no priority key at the pinned version (Network Operator 26.4.1's
# operator Deployment and its bundled Node Feature Discovery chart): they run on the
# control-plane hosts, where no workload pod competes with them.
NO_PRIORITY_KEY = {"network-operator/operator", "network-operator/nfd-master",
                   "network-operator/nfd-gc"}


@pytest.mark.parametrize("release,component", CASES, ids=[f"{r}-{c.name}" for r, c in CASES])
def test_every_chart_component_outranks_the_workloads(release: str, component) -> None:
    """Node agents share GPU nodes with serving pods whose class preempts lower priorities:
    they get Kubernetes' system-node-critical; controllers system-cluster-critical."""
    spec = release_placement.probes(release, RELEASES[release].values)[component.name]
    if f"{release}/{component.name}" in NO_PRIORITY_KEY:
        assert "priorityClassName" not in spec
        return
    wanted = {"every-node": {"system-node-critical"},
              "system": {"system-cluster-critical", "system-node-critical"}}[component.runs_on]
    assert spec["priorityClassName"] in wanted, (release, component.name, spec)


def test_priorities_are_set_at_the_charts_own_keys() -> None:
    """The keys each chart reads (its values.yaml and templates): one global key for all of
    cert-manager's pods, per component elsewhere; nothing where the chart sets it itself."""
    v = {name: r.values for name, r in RELEASES.items()}
    assert v["cert-manager"]["global"]["priorityClassName"] == "system-cluster-critical"
    assert v["metallb"]["speaker"]["priorityClassName"] == "system-node-critical"
    assert v["metallb"]["controller"]["priorityClassName"] == "system-cluster-critical"
    assert v["prometheus"]["prometheus-node-exporter"]["priorityClassName"] == \
        "system-node-critical"
    assert v["prometheus"]["prometheus"]["prometheusSpec"]["priorityClassName"] == \
        "system-cluster-critical"
    assert v["ingress-nginx"]["controller"]["admissionWebhooks"]["patch"][
        "priorityClassName"] == "system-cluster-critical"
    assert v["prometheus-adapter"]["priorityClassName"] == "system-cluster-critical"
    # The GPU Operator defaults its operator to system-node-critical; Volcano hard-codes
    # system-cluster-critical: the stack leaves both alone.
    assert "priorityClassName" not in v["gpu-operator"]["operator"]
    assert "priorityClassName" not in str(v["volcano"])
    # The Network Operator's bundled Node Feature Discovery: its worker (templates/worker.yaml
    # reads worker.priorityClassName) runs beside workloads on every GPU node; the chart-wide
    # key is not set, as that template writes it into the worker's pod spec too.
    nfd = v["network-operator"]["node-feature-discovery"]
    assert nfd["worker"]["priorityClassName"] == "system-node-critical"
    assert "priorityClassName" not in nfd
    assert "priorityClassName" not in str(v["network-operator"]["operator"])


def test_placement_labels_are_ones_no_kubelet_can_set() -> None:
    """Every label that steers work to a GPU node (its role, SU, rack, rails' leaves) is under
    node-restriction.kubernetes.io/, which the NodeRestriction admission plugin (on by kubeadm's
    default) refuses to any kubelet: a node cannot promote itself into a gang or a role. The
    product label is the GPU Feature Discovery's own, which labels the node anyway."""
    for node in prod().nodes:
        labels = kubeadm.node_labels(prod(), node, {0: "leaf-su1-r0-1"})
        steering = {k for k in labels if k != "nvidia.com/gpu.product"}
        assert steering and all(k.startswith("node-restriction.kubernetes.io/") for k in steering)
    selectors = [t["key"] for t in GPU_NODE_TERM["matchExpressions"]]
    assert selectors == ["node-restriction.kubernetes.io/gpucluster-role"]
    assert workloads.su_label_key(prod()) == "node-restriction.kubernetes.io/gpucluster-su"
