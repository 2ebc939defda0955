"""The acceptance gate as `pulumi up` runs it on the control plane: the rendered script, run by
bash against a kubectl stand-in that answers as the API server would (the stack's suspended
MPIJob, the nodes as their kubelets registered them, the pods holding GPUs) and, for the run's
launcher, a healthy nccl-tests log of the run's size (support/nccl_run.py).

What a user sees on hardware: a node added to a busy cluster is tested with one node that
passed before (a free one), not with every GPU of the cluster; only a passed node is opened to
work; a cluster's first run covers every node; a changed test runs where a busy cluster
has room."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.nccl_run import DATA
from support.sandbox import prod_cluster
from support.stack_edits import prod_with_rows

from components.planning import acceptance, acceptance_run
from components.planning.labels import UNTESTED_LABEL
from components.planning.nodes import planned_nodes
from offline import acceptance as offline_acceptance

GPU_NODES = [f"gpu-node-{i:02d}" for i in range(8)]
NS, TEST = "training", "nccl-allreduce"
RUN = TEST + acceptance_run.RUN_SUFFIX

# The kubectl the gate calls: answers from world.json, records every call (and its stdin).
KUBECTL = r'''#!PYTHON
import json, os, sys
world_dir = os.environ["FAKE_WORLD"]
world = json.load(open(os.path.join(world_dir, "world.json")))
args = sys.argv[1:]
ns = args[args.index("-n") + 1] if "-n" in args else ""
words = [a for i, a in enumerate(args) if a != "-n" and (i == 0 or args[i - 1] != "-n")]
stdin = sys.stdin.read() if "-" in words and "-f" in words else ""
with open(os.path.join(world_dir, "calls.jsonl"), "a") as log:
    log.write(json.dumps({"args": words, "ns": ns, "stdin": stdin}) + "\n")
verb, what = words[0], words[1] if len(words) > 1 else ""
run = os.path.join(world_dir, "run.json")
if verb == "get" and what == "mpijob" and words[2] == world["template"]["metadata"]["name"]:
    print(json.dumps(world["template"]))
elif verb == "get" and what == "mpijob":
    print(world["state"])
elif verb == "get" and what == "nodes":
    print(json.dumps({"items": world["nodes"]}))
elif verb == "get" and what == "pods" and "--all-namespaces" in words:
    print(json.dumps({"items": world["pods"]}))
elif verb == "get" and what == "pods":
    print(f"pod/{words[-1].split(',')[0].split('=')[1]}-launcher" if os.path.exists(run) else "")
elif verb == "get" and what == "configmap":
    print(world["passed"], end="")
elif verb == "create":
    open(run, "w").write(stdin)
elif verb == "logs":
    job = json.load(open(run))
    hosts = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"][
        "nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    if world["log"] is None:  # a healthy run of this size on the run's nodes
        sys.path[:0] = world["paths"]
        from support.nccl_run import healthy_run
        print(healthy_run(job["metadata"]["name"], hosts), end="")
    else:
        print(world["log"], end="")
elif verb in ("delete", "label", "apply"):
    pass
else:
    sys.exit(f"kubectl stand-in: unsupported: {args}")
'''


def _node(name: str, untested: bool, cordoned: bool = False) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name} | ({UNTESTED_LABEL: "true"} if untested else {})
    return {"metadata": {"name": name, "labels": labels}} | (
        {"spec": {"unschedulable": True}} if cordoned else {})


def _gpu_pod(name: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": "Running"},
            "spec": {"nodeName": node, "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}


# Training holds four nodes, the model server two: gpu-node-06 is free.
BUSY = [*(_gpu_pod(f"llama-worker-{i}", f"gpu-node-0{i}") for i in range(4)),
        _gpu_pod("vllm-a", "gpu-node-04"), _gpu_pod("vllm-b", "gpu-node-05")]


def gate(tmp_path: Path, untested: list[str], pods: list[dict[str, Any]], passed: str,
         log: str | None = None, state: str = "Created Running Succeeded ",
         cordoned: tuple[str, ...] = ()
         ) -> tuple[subprocess.CompletedProcess, list[dict[str, Any]]]:
    c = prod_cluster()
    test = c.workloads.nccl_test
    world = tmp_path / "world"
    world.mkdir(parents=True)
    (world / "world.json").write_text(json.dumps({
        "template": acceptance.nccl_test_mpijob(c, test),
        "nodes": [_node(n.name, n.name in untested, n.name in cordoned)
                  for n in planned_nodes(c)],
        "pods": pods, "passed": passed, "state": state, "log": log,
        "paths": [str(Path(__file__).parent), str(Path(__file__).parents[1])]}))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "kubectl").write_text(KUBECTL.replace("PYTHON", sys.executable))
    (bindir / "kubectl").chmod(0o755)
    script = acceptance.nccl_gate_script(c, test)
    env = {"PATH": os.pathsep.join([str(bindir), str(Path(sys.executable).parent),
                                    "/usr/bin", "/bin"]), "FAKE_WORLD": str(world)}
    proc = subprocess.run(["bash", "-s"], input=script, env=env, capture_output=True,
                          text=True, timeout=300)
    calls = [json.loads(x) for x in (world / "calls.jsonl").read_text().splitlines()]
    return proc, calls


def _created(calls: list[dict[str, Any]]) -> dict[str, Any] | None:
    made = [c for c in calls if c["args"][0] == "create"]
    return json.loads(made[0]["stdin"]) if made else None


def _workers(job: dict[str, Any]) -> list[str]:
    spec = job["spec"]["mpiReplicaSpecs"]["Worker"]
    terms = spec["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert spec["replicas"] == len(terms[0]["matchExpressions"][0]["values"])
    return terms[0]["matchExpressions"][0]["values"]


def _labelled(calls: list[dict[str, Any]]) -> list[list[str]]:
    return [c["args"][2:] for c in calls if c["args"][0] == "label"]


def _definition() -> str:
    c = prod_cluster()
    return acceptance.definition(c, c.workloads.nccl_test)


def test_a_clusters_first_run_covers_every_gpu_node_and_opens_them_to_work(tmp_path):
    proc, calls = gate(tmp_path, GPU_NODES, [], passed="")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _created(calls)
    assert job is not None and job["metadata"]["name"] == RUN
    assert _workers(job) == GPU_NODES
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 9  # and launcher
    assert "suspend" not in job["spec"]["runPolicy"]
    assert "PASS: every rail >= 360 Gb/s" in proc.stdout  # 8 nodes: the fabric floor
    assert _labelled(calls) == [[*GPU_NODES, f"{UNTESTED_LABEL}-"]]
    (record,) = [json.loads(c["stdin"]) for c in calls if c["args"][0] == "apply"]
    assert record["data"] == {"definition": _definition()}


def test_an_added_node_is_tested_with_one_free_node_that_passed(tmp_path):
    """A busy cluster: training holds four nodes, serving two; gpu-node-07 just joined. The
    run needs the new node and one free neighbour, not the cluster."""
    proc, calls = gate(tmp_path, ["gpu-node-07"], BUSY, passed=_definition())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _created(calls)
    assert job is not None and _workers(job) == ["gpu-node-06", "gpu-node-07"]
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 3
    assert "acceptance test: the untested node(s) gpu-node-07 with gpu-node-06, which passed " \
           "before" in proc.stdout
    # Two nodes: 16 ranks, every rail between them at the fabric's floor.
    assert "PASS: every rail >= 360 Gb/s (ib_write_bw), all-reduce (Ring) over 16 ranks" \
        in proc.stdout
    assert _labelled(calls) == [["gpu-node-07", f"{UNTESTED_LABEL}-"]]


def test_with_no_free_node_the_run_waits_for_the_first_neighbour(tmp_path):
    busy = [*BUSY, _gpu_pod("vllm-c", "gpu-node-06")]
    proc, calls = gate(tmp_path, ["gpu-node-07"], busy, passed=_definition())
    job = _created(calls)
    assert job is not None and _workers(job) == ["gpu-node-00", "gpu-node-07"]


def test_a_cordoned_node_is_never_the_neighbour(tmp_path):
    """gpu-node-06 is free but cordoned (drained for maintenance): a worker pinned there would
    never start, so the run takes the first node that passed and can take work."""
    proc, calls = gate(tmp_path, ["gpu-node-07"], BUSY, passed=_definition(),
                       cordoned=("gpu-node-06",))
    job = _created(calls)
    assert job is not None and _workers(job) == ["gpu-node-00", "gpu-node-07"]


def test_a_re_cabled_node_still_cordoned_waits_for_its_uncordon(tmp_path):
    """gpu-node-03 was drained and marked untested before its cables moved; the gate re-runs in
    the same `pulumi up` (another node joined) while it is still cordoned. It is left out of
    the run and stays closed to work; the gate names it and passes for the rest."""
    proc, calls = gate(tmp_path, ["gpu-node-03", "gpu-node-07"], BUSY, passed=_definition(),
                       cordoned=("gpu-node-03",))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _created(calls)
    assert job is not None and _workers(job) == ["gpu-node-06", "gpu-node-07"]
    assert "gpu-node-03 untested but cordoned: tested once uncordoned and the gate re-run" \
        in proc.stdout
    assert _labelled(calls) == [["gpu-node-07", f"{UNTESTED_LABEL}-"]]
    # Alone, it is nothing to run yet, and not reported as passed.
    proc, calls = gate(tmp_path / "alone", ["gpu-node-03"], BUSY, passed=_definition(),
                       cordoned=("gpu-node-03",))
    assert proc.returncode == 0, proc.stderr
    assert "nothing to run now; gpu-node-03 untested but cordoned" in proc.stdout
    assert "every GPU node has passed" not in proc.stdout
    assert _created(calls) is None and _labelled(calls) == []


def test_a_failed_run_leaves_the_node_closed_to_work_and_fails_the_up(tmp_path):
    slow = (DATA / "rails-slow-rail.log").read_text() + (DATA / "good-8node.log").read_text()
    proc, calls = gate(tmp_path, ["gpu-node-07"], BUSY, passed=_definition(), log=slow)
    assert proc.returncode == 1
    assert "FAIL: " in proc.stdout + proc.stderr
    assert _labelled(calls) == []


def test_a_job_that_never_starts_names_its_nodes(tmp_path):
    proc, calls = gate(tmp_path, ["gpu-node-07"], BUSY, passed=_definition(), state="Failed ")
    assert proc.returncode == 1
    assert "FAIL: MPIJob nccl-allreduce-run did not succeed (state: Failed )" in proc.stderr
    assert _labelled(calls) == []


def test_nothing_to_test_when_every_node_passed_this_test(tmp_path):
    """A node removed (the stack's MPIJob shrinks, the gate re-runs): no run, no GPU asked."""
    proc, calls = gate(tmp_path, [], BUSY, passed=_definition())
    assert proc.returncode == 0, proc.stderr
    assert "every GPU node has passed this test: nothing to run" in proc.stdout
    assert _created(calls) is None and _labelled(calls) == []


def test_a_changed_test_runs_on_two_free_nodes_not_the_busy_cluster(tmp_path):
    """The test's image or floor changed, no node is new: the new test crosses the fabric
    between two nodes a busy cluster has free; every node again is a maintenance window."""
    proc, calls = gate(tmp_path, [], BUSY, passed="sha256:0000000000000000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _created(calls)
    assert job is not None and _workers(job) == ["gpu-node-06", "gpu-node-07"]
    assert "every node again is a maintenance window" in proc.stdout
    assert _labelled(calls) == []
    assert [json.loads(c["stdin"])["data"] for c in calls if c["args"][0] == "apply"] == [
        {"definition": _definition()}]


def test_the_definition_ignores_the_node_count_and_follows_the_test():
    c = prod_cluster()
    test = c.workloads.nccl_test
    assert acceptance.definition(c, test.model_copy(update={"nodes": 4})) == _definition()
    for change in ({"max_bytes": "8G"}, {"min_efficiency": 0.9}, {"image": test.image + "x"}):
        assert acceptance.definition(c, test.model_copy(update=change)) != _definition()


def test_the_chooser_is_shipped_without_the_project():
    src = Path(acceptance_run.__file__).read_text()
    assert "import components" not in src and "from components" not in src
    assert acceptance_run.UNTESTED == UNTESTED_LABEL
    # The offline preview's runbook tells people to set the stack's own.
    assert offline_acceptance.untested() == UNTESTED_LABEL


@pytest.mark.parametrize("kind", ["training", "inference"])
def test_work_never_lands_on_an_untested_node(kind):
    from components.planning import inference, training
    c = prod_cluster()
    objs = (training.training_objects(c, c.workloads.training[0]) if kind == "training"
            else inference.inference_objects(c, c.workloads.inference[0]))
    specs = [t["spec"] for o in objs for t in _pod_templates(o)]
    assert specs
    for spec in specs:
        terms = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert all({"key": UNTESTED_LABEL, "operator": "DoesNotExist"} in t["matchExpressions"]
                   for t in terms)


def _pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {})
    if "template" in spec:
        return [spec["template"]]
    return [r["template"] for r in (spec.get("pytorchReplicaSpecs") or
                                    spec.get("mpiReplicaSpecs") or {}).values()]


def _with_rows(directory: Path, column: str, value: str, rail: str | None = None) -> Any:
    """Prod with gpu-node-03's inventory rows (or one rail's) given `value` in `column`."""
    def edit(rows: list[dict[str, str]]) -> None:
        for row in rows:
            if row["hostname"] == "gpu-node-03" and rail in (None, row["rail"]):
                row[column] = value
    directory.mkdir()
    return prod_with_rows(directory, edit)


def test_a_new_board_re_runs_the_gate_and_a_new_hca_alone_does_not(tmp_path):
    """A new board re-joins untested, so its gate must run (it changes with the host key or the
    MAC); an HCA swap changes a port GUID only: the node keeps its place in the cluster and is
    re-tested only when the runbook marks it untested and re-runs the gate."""
    c = prod_cluster()
    test = c.workloads.nccl_test
    script = acceptance.nccl_gate_script(c, test)
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBoardSwap" + "z" * 34
    for column, value, rail, reruns in (("sshHostKey", key, None, True),
                                        ("managementMac", "5c:25:73:31:03:99", None, True),
                                        ("portGuid", "0xb83fd20300a4ffee", "2", False)):
        other = _with_rows(tmp_path / column, column, value, rail)
        assert (acceptance.nccl_gate_script(other, test) != script) is reruns, column


def test_a_gpu_node_missing_from_the_cluster_fails_the_gate(tmp_path):
    """The gate runs after every join: a planned GPU node without a Node cannot be vouched
    for, and no run covers the others as if it were not there."""
    c = prod_cluster()
    nodes = [{"metadata": {"name": h, "labels": {}}} for h in GPU_NODES[:-1]]
    chosen = acceptance_run.select(acceptance.gpu_node_sus(c), nodes, [], changed=False)
    assert chosen.hosts == () and chosen.missing == ("gpu-node-07",)


def test_without_a_gate_nodes_join_open_to_work():
    """No acceptance test (or its gate off): nothing would ever clear the label, so no node
    registers it and no work waits for it."""
    from components.planning import inference, kubeadm, training
    c = prod_cluster()
    for test in (None, c.workloads.nccl_test.model_copy(update={"gate": False})):
        off = c.model_copy(update={"workloads": c.workloads.model_copy(
            update={"nccl_test": test})})
        assert not off.acceptance_gated
        join = kubeadm.join_configuration(off, off.nodes[0])["nodeRegistration"]
        assert "node-labels" not in {a["name"] for a in join["kubeletExtraArgs"]}
        objs = [*training.training_objects(off, off.workloads.training[0]),
                *inference.inference_objects(off, off.workloads.inference[0])]
        assert UNTESTED_LABEL not in json.dumps(objs)
    join = kubeadm.join_configuration(c, c.nodes[0])["nodeRegistration"]
    assert {"name": "node-labels", "value": f"{UNTESTED_LABEL}=true"} in join["kubeletExtraArgs"]
