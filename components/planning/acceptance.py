"""The NCCL acceptance test (pure): ib_write_bw on every rail, then nccl-tests all_reduce
across every GPU node it names, as an MPIJob, and the gate script that reads its verdict on the
control plane and fails `pulumi up` below the floor (docs/acceptance.md)."""

from __future__ import annotations

import shlex
from pathlib import Path

from components.config import Cluster, NcclTest
from components.planning import nccl
from components.planning.script_files import body, single_quoted, template
from components.planning.workloads import (
    POLICY_SUPPRESS_ANNOTATION,
    gpu_pod_spec,
    mpi_launcher,
    mpirun_command,
    nccl_env,
    rdma_metadata,
    rdma_security,
    run_policy,
    shm_volume,
    whole_node_resources,
)

NCCL_TEST_SUPPRESSIONS = (
    "nccl-no-debug-knobs: the NCCL acceptance test parses NCCL_DEBUG=INFO output for "
    "NET/IB/GDRDMA to prove RDMA is used, and pins NCCL_ALGO=Ring so NVLS/tree cannot mask a "
    "slow rail. It is a bring-up check, not a training job")
ACCEPTANCE_QUEUE = "acceptance"  # the NCCL test: every GPU node, before anything else runs
NCCL_TESTS_BIN = "/opt/nccl_tests/build/all_reduce_perf"
# The Training Operator (v1 MPIJob) copies kubectl here in the launcher and names the workers
# <job>-worker-<i> (pkg/controller.v1/mpi: kubectlMountPath, workerSuffix); the launcher's Role
# may get pods and exec into the workers.
LAUNCHER_KUBECTL = "/opt/kube/kubectl"
IB_WRITE_BW_SECONDS = 10  # per rail and node pair (-D)
GATE_TIMEOUT_GRACE = 5  # minutes on top of the test's own timeout for pods to start






def nccl_test_nodes(cluster: Cluster, test: NcclTest) -> int:
    return test.nodes or len(cluster.in_service_nodes)


def nccl_floor_gbs(cluster: Cluster, test: NcclTest) -> float:
    """Rails per node x what one NDR rail delivers to a Ring all-reduce (nccl.py), x the
    stack's minEfficiency: 8 x 46 GB/s x 1.0 = 368 GB/s in prod."""
    t = cluster.gpu_nodes.template
    return nccl.busbw_floor_gbs(nccl_test_nodes(cluster, test), len(t.hcas), t.link_gbps,
                                test.min_efficiency)


def rail_floor_gbps(cluster: Cluster) -> float:
    """ib_write_bw floor per rail: 90 % of the link speed (360 Gb/s on NDR)."""
    return nccl.rail_floor_gbps(cluster.gpu_nodes.template.link_gbps)


def nccl_test_env(cluster: Cluster) -> list[dict[str, str]]:
    """The acceptance test's NCCL environment: the training one at INFO, plus NCCL_ALGO=Ring
    so NVLS/NVLSTree/Tree cannot report bus bandwidth the rails did not carry."""
    return nccl_env(cluster, debug="INFO") + [
        {"name": "NCCL_DEBUG_SUBSYS", "value": "INIT,ENV,NET,GRAPH"},  # ENV: the ALGO line
        {"name": "NCCL_ALGO", "value": nccl.ALGO}]



# Runs in the launcher before all_reduce_perf: resolves the workers' pod IPs and nodes, starts
# the rail check in every worker at once and prints their outputs one worker after another.


def rail_worker_script() -> str:
    """The POSIX sh each worker runs for the rail check (scripts/acceptance/rail-worker.sh)."""
    return body("acceptance/rail-worker.sh")


def rail_check_script(cluster: Cluster, test: NcclTest) -> str:
    """Bash for the launcher: the per-rail ib_write_bw check over the test's workers, in rail
    order with the template's HCA names (a node whose inventory names differ gets its own)."""
    t = cluster.gpu_nodes.template
    hcas = " ".join(t.hcas)
    cases = ""
    for node in cluster.nodes:
        own = " ".join(r.hca for r in sorted(node.rails, key=lambda r: r.index))
        if own != hcas:
            cases += f"    {shlex.quote(node.hostname)}) echo {shlex.quote(own)} ;;\n"
    workers = " ".join(f"{test.name}-worker-{i}" for i in range(nccl_test_nodes(cluster, test)))
    return template("acceptance/rail-launcher.sh", kubectl=LAUNCHER_KUBECTL, workers=workers,
                    hcas=shlex.quote(hcas), cases=cases,
                    worker=single_quoted(rail_worker_script(), "the rail worker"),
                    rails=len(t.hcas), secs=IB_WRITE_BW_SECONDS,
                    floor=f"{rail_floor_gbps(cluster):g}")


def nccl_test_mpijob(cluster: Cluster, test: NcclTest) -> dict:
    """Per-rail ib_write_bw between the workers (more than one node), then all_reduce_perf
    across the GPU nodes: one rank per GPU, Ring, NCCL_DEBUG=INFO for the checker."""
    nodes = nccl_test_nodes(cluster, test)
    gpus = cluster.gpu_nodes.template.gpu.count
    env = nccl_test_env(cluster)
    program = [NCCL_TESTS_BIN, "-b", test.min_bytes, "-e", test.max_bytes, "-f", "2", "-g", "1"]
    command = mpirun_command(env, nodes * gpus, gpus, program)
    if nodes > 1:
        command = rail_check_script(cluster, test) + command
    labels = {"app.kubernetes.io/name": test.name, "app.kubernetes.io/component": "nccl-test"}
    worker = {
        "name": "worker",
        "image": test.image,
        "command": ["sleep", "infinity"],
        "env": env,
        "resources": whole_node_resources(cluster, gpus, 16, "64Gi"),
        "securityContext": rdma_security(),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "MPIJob",
        "metadata": {"name": test.name, "namespace": test.namespace,
                     "labels": {"app.kubernetes.io/component": "nccl-test"},
                     "annotations": {POLICY_SUPPRESS_ANNOTATION: NCCL_TEST_SUPPRESSIONS}},
        "spec": {
            "slotsPerWorker": gpus,
            "runPolicy": {**run_policy(0, nodes + 1, ACCEPTANCE_QUEUE),
                          "activeDeadlineSeconds": test.timeout_minutes * 60},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never",
                             "template": mpi_launcher(test.image, command, env)},
                "Worker": {"replicas": nodes, "restartPolicy": "Never",
                           "template": {
                               "metadata": rdma_metadata(labels),
                               "spec": gpu_pod_spec(cluster, [worker], [shm_volume("32Gi")],
                                                     None)}},
            },
        },
    }


def nccl_gate_script(cluster: Cluster, test: NcclTest) -> str:
    """Run on the control plane after the MPIJob is applied: wait for it, check its log.

    The checker (components/planning/nccl.py, standard library only) travels inside the script,
    so the control plane needs nothing but kubectl, the admin kubeconfig and python3. It reads
    the launcher's log in the order the launcher ran: the per-rail ib_write_bw check, then
    all_reduce_perf (Ring). A job that did not succeed still gets the checker's diagnosis.
    """
    nodes = nccl_test_nodes(cluster, test)
    ranks = nodes * cluster.gpu_nodes.template.gpu.count
    rails = len(cluster.gpu_nodes.template.hcas) if nodes > 1 else 0
    floor, rail_floor = nccl_floor_gbs(cluster, test), rail_floor_gbps(cluster)
    checker = Path(nccl.__file__).read_text()
    ns, name = shlex.quote(test.namespace), shlex.quote(test.name)
    deadline = (test.timeout_minutes + GATE_TIMEOUT_GRACE) * 60
    check = (f'python3 "$work/nccl_check.py" "$work/launcher.log" --ranks {ranks} '
             f"--nodes {nodes} --min-busbw {floor} \\\n    --min-bytes {nccl.GIB} "
             f"--algo {nccl.ALGO} --rails {rails} --min-rail-gbps {rail_floor}")
    steps = [f"ib_write_bw on each of {rails} rails, node to next node in a ring: "
             f">= {rail_floor:g} Gb/s each"] if rails else []
    steps.append(f"all_reduce_perf with NCCL_ALGO={nccl.ALGO}: bus bandwidth floor {floor} GB/s")
    plan = "".join(f"# {i}. {step}.\n" for i, step in enumerate(steps, 1))
    return template("acceptance/gate.sh", namespace=test.namespace, test=test.name,
                    nodes=nodes, ranks=ranks, plan=plan, checker=checker, polls=deadline // 10,
                    ns=ns, name=name, check=check)
