"""The NCCL acceptance test (pure): ib_write_bw on every rail, then nccl-tests all_reduce,
as an MPIJob the stack applies suspended (the reviewed definition), and the gate script that
runs a copy of it on the nodes that need it (acceptance_run.py), reads its verdict on the
control plane and fails `pulumi up` below the floor (docs/acceptance.md)."""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

from components.model.cluster import Cluster, NcclTest
from components.planning import acceptance_run, nccl
from components.planning.labels import UNTESTED_LABEL
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
ACCEPTANCE_QUEUE = "acceptance"  # the NCCL test: on the nodes that need it, before work
NCCL_TESTS_BIN = "/opt/nccl_tests/build/all_reduce_perf"
# The Training Operator (v1 MPIJob) copies kubectl here in the launcher and names the workers
# <job>-worker-<i> (pkg/controller.v1/mpi: kubectlMountPath, workerSuffix); the launcher's Role
# may get pods and exec into the workers.
LAUNCHER_KUBECTL = "/opt/kube/kubectl"
# ... and lists the workers for mpirun in the launcher's hostfile (configMountPath, hostfileName;
# OMPI_MCA_orte_default_hostfile names it).
LAUNCHER_HOSTFILE = "/etc/mpi/hostfile"
IB_WRITE_BW_SECONDS = 10  # per rail and node pair (-D)
GATE_TIMEOUT_GRACE = 5  # minutes on top of the test's own timeout for pods to start


def nccl_test_nodes(cluster: Cluster, test: NcclTest) -> int:
    return test.nodes or len(cluster.in_service_nodes)


def nccl_floor_gbs(cluster: Cluster, test: NcclTest) -> float:
    """Rails per node x what one NDR rail delivers to a Ring all-reduce (nccl.py), x the
    stack's minEfficiency: 8 x 46 GB/s x 0.97 = 357 GB/s in prod."""
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

def rail_worker_script() -> str:
    """The POSIX sh each worker runs for the rail check (scripts/acceptance/rail-worker.sh)."""
    return body("acceptance/rail-worker.sh")


def rail_check_script(cluster: Cluster) -> str:
    """Bash for the launcher: the per-rail ib_write_bw check over the run's workers (its
    hostfile), in rail order with the template's HCA names (a node whose inventory names
    differ gets its own); it sets `np`, the run's ranks."""
    t = cluster.gpu_nodes.template
    hcas = " ".join(t.hcas)
    cases = ""
    for node in cluster.nodes:
        own = " ".join(r.hca for r in sorted(node.rails, key=lambda r: r.index))
        if own != hcas:
            cases += f"    {shlex.quote(node.hostname)}) echo {shlex.quote(own)} ;;\n"
    return template("acceptance/rail-launcher.sh", kubectl=LAUNCHER_KUBECTL,
                    hostfile=LAUNCHER_HOSTFILE, gpus=t.gpu.count,
                    hcas=shlex.quote(hcas), cases=cases,
                    worker=single_quoted(rail_worker_script(), "the rail worker"),
                    rails=len(t.hcas), secs=IB_WRITE_BW_SECONDS,
                    floor=f"{rail_floor_gbps(cluster):g}")


def nccl_test_mpijob(cluster: Cluster, test: NcclTest) -> dict:
    """Per-rail ib_write_bw between the workers (more than one node), then all_reduce_perf
    across them: one rank per GPU, Ring, NCCL_DEBUG=INFO for the checker. Suspended, sized to
    every GPU node: the definition each run copies (acceptance_run.instance)."""
    nodes = nccl_test_nodes(cluster, test)
    gpus = cluster.gpu_nodes.template.gpu.count
    env = nccl_test_env(cluster)
    program = [NCCL_TESTS_BIN, "-b", test.min_bytes, "-e", test.max_bytes, "-f", "2", "-g", "1"]
    command = rail_check_script(cluster) + mpirun_command(env, '"$np"', gpus, program)
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
                          "activeDeadlineSeconds": test.timeout_minutes * 60,
                          # Never run as applied: the gate runs copies of it.
                          "suspend": True},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never",
                             "template": mpi_launcher(test.image, command, env)},
                "Worker": {"replicas": nodes, "restartPolicy": "Never",
                           "template": {
                               "metadata": rdma_metadata(labels),
                               "spec": gpu_pod_spec(cluster, [worker], [shm_volume("32Gi")],
                                                    None, untested=True)}},
            },
        },
    }


def definition(cluster: Cluster, test: NcclTest) -> str:
    """What a passed run vouches for: the test as it runs on any set of nodes (its MPIJob
    less its size) and the checker with its floors. A node added or removed keeps it."""
    job = nccl_test_mpijob(cluster, test)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 0
    job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = 0
    h = hashlib.sha256(json.dumps(job, sort_keys=True).encode())
    h.update(Path(nccl.__file__).read_bytes())
    h.update(json.dumps([rail_floor_gbps(cluster), nccl_floor_gbs(cluster, test)]).encode())
    return "sha256:" + h.hexdigest()[:16]


def boards(cluster: Cluster) -> str:
    """What identifies each GPU node's board (host key, MAC): a new board re-joins, registers
    the untested label and re-runs the gate, which tests it."""
    facts = [(n.hostname, n.ssh_host_key, n.management_mac) for n in cluster.in_service_nodes]
    return "sha256:" + hashlib.sha256(json.dumps(facts, sort_keys=True, default=str)
                                      .encode()).hexdigest()[:16]


def gpu_node_sus(cluster: Cluster) -> dict[str, str]:
    """The GPU nodes a run may cover, each with its SU (a run's neighbour shares its leaves)."""
    return {n.hostname: f"su{n.su}" for n in cluster.in_service_nodes}


def gate_wait_minutes(test: NcclTest) -> int:
    """How long the gate waits for its run's GPUs before it fails `pulumi up`."""
    return test.timeout_minutes + GATE_TIMEOUT_GRACE


def nccl_gate_script(cluster: Cluster, test: NcclTest) -> str:
    """Run on the control plane after the (suspended) MPIJob is applied: choose the nodes, run
    a copy of it there, wait for it, check its log, then mark the nodes tested.

    The checker (components/planning/nccl.py) and the chooser (acceptance_run.py), standard
    library only, travel inside the script, so the control plane needs nothing but kubectl,
    the admin kubeconfig and python3. The checker reads the launcher's log in the order the
    launcher ran: the per-rail ib_write_bw check, then all_reduce_perf (Ring). A run that did
    not succeed still gets the checker's diagnosis.
    """
    t = cluster.gpu_nodes.template
    rails, floor, rail_floor = len(t.hcas), nccl_floor_gbs(cluster, test), rail_floor_gbps(cluster)
    one = nccl.busbw_floor_gbs(1, rails, t.link_gbps, test.min_efficiency)
    deadline = gate_wait_minutes(test) * 60
    steps = [f"ib_write_bw on each of {rails} rails, node to next node in a ring: "
             f">= {rail_floor:g} Gb/s each (more than one node)",
             f"all_reduce_perf with NCCL_ALGO={nccl.ALGO}: bus bandwidth floor {floor} GB/s "
             f"({one} GB/s on one node)"]
    plan = "".join(f"# {i}. {step}.\n" for i, step in enumerate(steps, 1))
    sus = ",".join(f"{h}={su}" for h, su in sorted(gpu_node_sus(cluster).items()))
    return template(
        "acceptance/gate.sh", namespace=test.namespace, test=test.name, plan=plan,
        untested=UNTESTED_LABEL, checker=Path(nccl.__file__).read_text(),
        chooser=Path(acceptance_run.__file__).read_text(), ns=shlex.quote(test.namespace),
        name=shlex.quote(test.name), record=shlex.quote(test.name + acceptance_run.RECORD_SUFFIX),
        run=shlex.quote(test.name + acceptance_run.RUN_SUFFIX), gpu_nodes=shlex.quote(sus),
        definition=definition(cluster, test), boards=boards(cluster), gpus=t.gpu.count,
        rails=rails, floor=floor, floor_one=one, polls=deadline // 10,
        minutes=gate_wait_minutes(test), min_bytes=nccl.GIB, algo=nccl.ALGO,
        rail_floor=rail_floor)

