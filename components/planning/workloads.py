"""Workload objects rendered from the model (pure): training jobs, the NCCL acceptance test and
inference services.

NCCL's environment is derived from the inventory (the compute HCAs of the nodes) and from the
platform layer (the RDMA resource, and the interface the RDMA network attachment creates in the
pod), so a job cannot name an interface or HCA that is not there. Gang scheduling and the
network-topology constraint are derived from the replica count and the fabric's HyperNodes.

Pod security: inference pods meet the Pod Security Standards' restricted profile. Pods on the
RDMA fabric need one exception each, written on the pod as `gpucluster.io/pod-security-exceptions`
(IPC_LOCK, and running as UID 0 so that capability is effective); nothing else is relaxed — no
privileged containers, no host network/PID/IPC, no hostPath, no privilege escalation.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from textwrap import dedent
from typing import Any

from components.config import Cluster, InferenceService, NcclTest, TrainingJob
from components.planning import kubeadm, nccl, platform
from components.planning.storage import claim_name

EXCEPTIONS_ANNOTATION = "gpucluster.io/pod-security-exceptions"
# A policy rule set aside for one object, with the reason, on the object itself: every stack
# gets it, and the preview lists it as suppressed (the pack's SUPPRESS_ANNOTATION).
POLICY_SUPPRESS_ANNOTATION = "gpucluster.io/policy-suppress"
NCCL_TEST_SUPPRESSIONS = (
    "nccl-no-debug-knobs: the NCCL acceptance test parses NCCL_DEBUG=INFO output for "
    "NET/IB/GDRDMA to prove RDMA is used, and pins NCCL_ALGO=Ring so NVLS/tree cannot mask a "
    "slow rail. It is a bring-up check, not a training job")
RDMA_EXCEPTIONS = {
    "capabilities.add=IPC_LOCK": "RDMA registers (pins) GPU and host memory for the HCAs' DMA; "
                                 "without IPC_LOCK ibv_reg_mr fails and NCCL falls back to "
                                 "sockets",
    "runAsNonRoot=unset": "Kubernetes adds capabilities to the bounding and permitted sets only; "
                          "IPC_LOCK is effective for UID 0 alone",
}
LAUNCHER_EXCEPTIONS = {
    "runAsNonRoot=unset": "mpirun runs as the image's root user (OMPI_ALLOW_RUN_AS_ROOT) and "
                          "execs into root workers; the launcher holds no capabilities at all",
}
VOLCANO = "volcano"
TRAINING_QUEUE = "training"
INFERENCE_QUEUE = "inference"
ACCEPTANCE_QUEUE = "acceptance"  # the NCCL test: every GPU node, before anything else runs
VLLM_PORT = 8000
VLLM_UID = 1000
NCCL_TESTS_BIN = "/opt/nccl_tests/build/all_reduce_perf"
# The Training Operator (v1 MPIJob) copies kubectl here in the launcher and names the workers
# <job>-worker-<i> (pkg/controller.v1/mpi: kubectlMountPath, workerSuffix); the launcher's Role
# may get pods and exec into the workers.
LAUNCHER_KUBECTL = "/opt/kube/kubectl"
IB_WRITE_BW_SECONDS = 10  # per rail and node pair (-D)
IB_WRITE_BW_BASE_PORT = 18515  # perftest's default port; rail r uses base + r
GATE_TIMEOUT_GRACE = 5  # minutes on top of the test's own timeout for pods to start


# ---------------------------------------------------------------- NCCL


def compute_hcas(cluster: Cluster) -> list[str]:
    """Compute HCAs in rail order, the union over nodes (names may differ between nodes)."""
    by_rail: dict[int, list[str]] = {}
    for node in cluster.nodes:
        for rail in node.rails:
            names = by_rail.setdefault(rail.index, [])
            if rail.hca not in names:
                names.append(rail.hca)
    return [h for _, names in sorted(by_rail.items()) for h in sorted(names)]


def nccl_env(cluster: Cluster, debug: str | None = None) -> list[dict[str, str]]:
    """NCCL's environment for native InfiniBand (no RoCE knobs such as NCCL_IB_GID_INDEX)."""
    # '=' makes NCCL match names exactly: plain 'mlx5_1' would also select mlx5_10, mlx5_11,
    # and plain 'net1' any interface starting with net1.
    hcas = "=" + ",".join(f"{h}:1" for h in compute_hcas(cluster))
    env = {
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": hcas,
        "NCCL_SOCKET_IFNAME": "=" + platform.POD_RDMA_INTERFACE,
        # GPU and HCA of a rail share a PCIe switch on DGX-class servers.
        "NCCL_NET_GDR_LEVEL": "PXB",
        "NCCL_DEBUG": debug or ("WARN" if cluster.environment == "production" else "INFO"),
    }
    return [{"name": k, "value": v} for k, v in env.items()]


# ---------------------------------------------------------------- pod building blocks


def _rdma_security() -> dict:
    return {"allowPrivilegeEscalation": False, "privileged": False,
            "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}}


def _restricted_security() -> dict:
    return {"allowPrivilegeEscalation": False, "privileged": False,
            "runAsNonRoot": True, "runAsUser": VLLM_UID, "runAsGroup": VLLM_UID,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}


def _shm(size: str) -> dict:
    # /dev/shm defaults to 64 MiB in a container; NCCL and data loaders need far more.
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def _claims(claims: dict[str, str]) -> list[dict]:
    return [{"name": name, "persistentVolumeClaim": {"claimName": claim}}
            for name, claim in claims.items()]


def mount_root(path: str) -> str:
    return "/" + path.strip("/").split("/")[0]


def _whole_node_resources(cluster: Cluster, gpus: int, cpu: int | str, memory: str) -> dict:
    res = {"nvidia.com/gpu": str(gpus), platform.rdma_resource(cluster): "1",
           "cpu": str(cpu), "memory": memory}
    return {"requests": res, "limits": dict(res)}


def su_label_key(cluster: Cluster) -> str:
    """The node label whose value names a node's tier-1 HyperNode (its SU).

    Bootstrap labels every GPU node with its SU, and the platform names the SU's tier-1
    HyperNode the same way (tests check the two agree node by node).
    """
    return kubeadm.SU_LABEL


def largest_su(cluster: Cluster) -> int:
    counts: dict[int, int] = {}
    for n in cluster.nodes:
        counts[n.su] = counts.get(n.su, 0) + 1
    return max(counts.values())


def topology_affinity(cluster: Cluster, group: dict[str, str], nodes: int,
                      mode: str = "hard") -> dict | None:
    """Keep a gang inside one tier-1 HyperNode (an SU: one hop through its leaves).

    Volcano's own constraint is PodGroup `spec.networkTopology`, but Training Operator v1.9
    creates the PodGroup of a PyTorchJob/MPIJob itself and rewrites its spec on every sync
    (minMember, queue, priorityClassName, minResources only), and Volcano reads the
    `volcano.sh/network-topology-*` annotations only from pods it makes PodGroups for. So the
    same tier-1 constraint is expressed as pod affinity on the label the tier-1 HyperNodes
    select (Volcano's predicates plugin evaluates it for every pod of the gang). A job larger
    than an SU crosses the spine (tier 2, the whole fabric): nothing to constrain.
    """
    if nodes <= 1 or nodes > largest_su(cluster):
        return None
    term = {"labelSelector": {"matchLabels": group}, "topologyKey": su_label_key(cluster)}
    if mode == "hard":
        return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": term}]}}


def _gpu_pod_spec(cluster: Cluster, containers: list[dict], volumes: list[dict],
                  affinity: dict | None) -> dict:
    spec: dict[str, Any] = {
        "schedulerName": VOLCANO,
        "priorityClassName": platform.TRAINING_PRIORITY,
        "nodeSelector": {"nvidia.com/gpu.product": cluster.gpu_nodes.template.gpu.product_label},
        "tolerations": [platform.gpu_toleration()],
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": containers,
        "volumes": volumes,
    }
    if affinity:
        spec["affinity"] = affinity
    return spec


def _rdma_metadata(labels: dict[str, str]) -> dict:
    return {
        "labels": labels,
        "annotations": {
            "k8s.v1.cni.cncf.io/networks": platform.RDMA_NETWORK,
            EXCEPTIONS_ANNOTATION: json.dumps(RDMA_EXCEPTIONS, sort_keys=True),
        },
    }


def _run_policy(job_backoff: int, min_available: int, queue: str = TRAINING_QUEUE) -> dict:
    return {
        "backoffLimit": job_backoff,
        # When the job ends, pods still running (MPI workers idling in `sleep`) are deleted and
        # give their GPUs back; finished pods stay, with the logs the NCCL gate reads.
        "cleanPodPolicy": "Running",
        # Gang scheduling: Volcano starts all pods or none.
        "schedulingPolicy": {"minAvailable": min_available, "queue": queue},
    }


# ---------------------------------------------------------------- training


def _job_labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "training"}


def _training_args(job: TrainingJob) -> list[str]:
    return [
        job.script,
        f"--model={job.model}",
        f"--tensor-parallel-size={job.tensor_parallel}",
        f"--pipeline-parallel-size={job.pipeline_parallel}",
        f"--data-parallel-size={job.data_parallel}",
        f"--batch-size-per-gpu={job.micro_batch_per_gpu}",
        f"--sequence-length={job.sequence_length}",
        f"--{job.precision}",
        f"--dataset={job.dataset_path}",
        f"--output={job.checkpoint_path}",
    ]


def _training_mounts(job: TrainingJob) -> list[dict]:
    return [
        {"name": "dataset", "mountPath": mount_root(job.dataset_path), "readOnly": True},
        {"name": "checkpoints", "mountPath": mount_root(job.checkpoint_path)},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]


def _training_volumes(job: TrainingJob) -> list[dict]:
    return _claims({"dataset": claim_name(job.dataset),
                    "checkpoints": claim_name(job.checkpoints)}) + [_shm(job.shm_size)]


def _training_template(cluster: Cluster, job: TrainingJob, container: dict) -> dict:
    labels = _job_labels(job.name)
    return {
        "metadata": _rdma_metadata(labels),
        "spec": _gpu_pod_spec(cluster, [container], _training_volumes(job),
                              topology_affinity(cluster, labels, job.nodes, job.topology)),
    }


def pytorchjob(cluster: Cluster, job: TrainingJob) -> dict:
    container = {
        "name": "pytorch",  # the Training Operator looks for this container name
        "image": job.image,
        # torchrun takes nnodes, nproc-per-node, node rank and the rendezvous (master address
        # and port, or c10d endpoint when elastic) from the operator's PET_* variables.
        "command": ["torchrun"],
        "args": _training_args(job),
        "env": nccl_env(cluster),
        "resources": _whole_node_resources(cluster, job.gpus_per_node, job.cpu, job.memory),
        "securityContext": _rdma_security(),
        "volumeMounts": _training_mounts(job),
    }
    template = _training_template(cluster, job, container)
    # torchrun's elastic agent with a c10d rendezvous restarts the whole worker group when any
    # worker fails or a node leaves or rejoins, so the gang restarts as a unit; with a static
    # rendezvous (MASTER_ADDR/RANK) a pod restarted alone leaves its peers hung in NCCL. A
    # fixed-size job is the elastic case with minReplicas = maxReplicas.
    min_nodes = job.elastic_min_nodes or job.nodes
    spec: dict[str, Any] = {
        "nprocPerNode": str(job.gpus_per_node),
        "runPolicy": _run_policy(job.backoff_limit, min_nodes),
        "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": min_nodes,
                          "maxReplicas": job.nodes, "maxRestarts": job.backoff_limit},
        "pytorchReplicaSpecs": {"Worker": {"replicas": job.nodes, "restartPolicy": "OnFailure",
                                           "template": template}},
    }
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": job.name, "namespace": job.namespace}, "spec": spec}


def _launcher(image: str, command: str, env: list[dict]) -> dict:
    """The mpirun pod: CPU only, may run on a GPU node (it tolerates the taint, asks no GPU)."""
    res = {"cpu": "2", "memory": "4Gi"}
    return {
        "metadata": {"annotations": {EXCEPTIONS_ANNOTATION: json.dumps(LAUNCHER_EXCEPTIONS)}},
        "spec": {
            "schedulerName": VOLCANO,
            "priorityClassName": platform.TRAINING_PRIORITY,  # a member of the job's gang
            "tolerations": [platform.gpu_toleration()],
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "launcher",
                "image": image,
                "command": ["/bin/bash", "-c"],
                "args": [command],
                "env": env + [{"name": "OMPI_ALLOW_RUN_AS_ROOT", "value": "1"},
                              {"name": "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "value": "1"}],
                "resources": {"requests": res, "limits": dict(res)},
                "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }


def _mpirun(env: list[dict], np: int, per_node: int, program: list[str]) -> str:
    """mpirun over the workers (the operator's kubectl-exec agent), forwarding NCCL's env."""
    forward = " ".join(f"-x {e['name']}" for e in env)
    return (f"mpirun --allow-run-as-root -np {np} -npernode {per_node} --bind-to none "
            f"-x LD_LIBRARY_PATH -x PATH {forward} " + shlex.join(program))


def mpijob(cluster: Cluster, job: TrainingJob) -> dict:
    """A DeepSpeed-style launcher job: one mpirun launcher plus one whole-node pod per node."""
    env = nccl_env(cluster)
    ranks = job.nodes * job.gpus_per_node
    worker = {
        "name": "worker",
        "image": job.image,
        "command": ["sleep", "infinity"],  # ranks are started by mpirun through kubectl exec
        "env": env,
        "resources": _whole_node_resources(cluster, job.gpus_per_node, job.cpu, job.memory),
        "securityContext": _rdma_security(),
        "volumeMounts": _training_mounts(job),
    }
    program = ["python3", *_training_args(job)]
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "MPIJob",
        "metadata": {"name": job.name, "namespace": job.namespace},
        "spec": {
            "slotsPerWorker": job.gpus_per_node,
            # Gang: the launcher and every worker, or nothing.
            "runPolicy": _run_policy(job.backoff_limit, job.nodes + 1),
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "OnFailure",
                             "template": _launcher(job.image,
                                                   _mpirun(env, ranks, job.gpus_per_node,
                                                           program), env)},
                "Worker": {"replicas": job.nodes, "restartPolicy": "OnFailure",
                           "template": _training_template(cluster, job, worker)},
            },
        },
    }


def training_objects(cluster: Cluster, job: TrainingJob) -> list[dict]:
    return [mpijob(cluster, job) if job.launcher == "mpijob" else pytorchjob(cluster, job)]


# ---------------------------------------------------------------- NCCL acceptance test


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


# Runs in each worker (kubectl exec ... sh -c): every rail in turn, an ib_write_bw server for
# the previous worker and a client to the next, pinned to the HCA's local CPUs where the pod's
# cpuset allows. Arguments: seconds, this node, next node, next pod's IP, this node's HCAs in
# rail order, the next node's. Prints one '# rail-check:' block per rail for nccl.py: the
# client's result lines, or all it said when it failed (the launcher log stays small, so
# kubelet log rotation cannot drop the rail check before the gate reads it).
_RAIL_WORKER = r"""secs=$1 me=$2 peer=$3 peer_ip=$4 my_hcas=$5 peer_hcas=$6
if ! command -v ib_write_bw >/dev/null 2>&1; then
  echo "# rail-check: error on $me: ib_write_bw (perftest) is not in the image"
  exit 0
fi
if [ -z "$peer_ip" ]; then
  echo "# rail-check: error on $me: no pod IP for the next worker ($peer)"
  exit 0
fi
tmp=$(mktemp -d)
bw() {
  cpus=$(cat "/sys/class/infiniband/$1/device/local_cpulist" 2>/dev/null)
  pin=
  if [ -n "$cpus" ] && taskset -c "$cpus" true 2>/dev/null; then pin="taskset -c $cpus"; fi
  timeout "$3" $pin ib_write_bw -d "$1" -p "$2" -D "$secs" -s 65536 -q 4 -F --report_gbits $4
}
r=0
set -- $peer_hcas
for hca in $my_hcas; do
  peer_hca=${1:-unknown}
  if [ $# -gt 0 ]; then shift; fi
  port=$((@PORT@ + r))
  bw "$hca" "$port" $((secs + 60)) >"$tmp/server" 2>&1 &
  server=$!
  sleep "${RAIL_CHECK_SETTLE_S:-2}"
  echo "# rail-check: rail $r client $me $hca server $peer $peer_hca"
  tries=15
  while :; do
    bw "$hca" "$port" $((secs + 60)) "$peer_ip" >"$tmp/client" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] || [ "$tries" -le 1 ]; then break; fi
    tries=$((tries - 1))
    sleep "${RAIL_CHECK_SETTLE_S:-2}"
  done
  if [ "$rc" -eq 0 ] && grep -q "BW average" "$tmp/client"; then
    grep -A 1 "BW average" "$tmp/client"
  else
    cat "$tmp/client"
  fi
  echo "# rail-check: end rail $r client $me exit $rc"
  wait "$server"
  src=$?
  if [ "$src" -ne 0 ]; then
    said=$(tail -n 1 "$tmp/server")
    echo "# rail-check: error on $me: ib_write_bw server on rail $r ($hca) exited $src: $said"
  fi
  r=$((r + 1))
done
rm -rf "$tmp"
"""

# Runs in the launcher before all_reduce_perf: resolves the workers' pod IPs and nodes, starts
# the rail check in every worker at once and prints their outputs one worker after another.
_RAIL_LAUNCHER = r"""# Step 1 of 2: ib_write_bw (perftest) on every rail, each worker writing to the
# next one in a ring; the gate (nccl.py) reads the '# rail-check:' blocks.
# Step 2: all_reduce_perf (the last command: its status is the launcher's).
kubectl=${KUBECTL:-@KUBECTL@}
workers=(@WORKERS@)
rail_hcas=@HCAS@
hcas_of() {
  case "$1" in
@CASES@    *) echo "$rail_hcas" ;;
  esac
}
rail_worker=@WORKER@
rail_out=$(mktemp -d)
n=${#workers[@]}
echo "# rail-check: start: ib_write_bw on @RAILS@ rails x $n nodes in a ring," \
  "@SECS@ s per pair, floor @FLOOR@ Gb/s"
ips=()
nodes=()
for i in "${!workers[@]}"; do
  ip=
  node=
  if info=$("$kubectl" get pod "${workers[i]}" \
      -o 'jsonpath={.status.podIP} {.spec.nodeName}' 2>&1); then
    read -r ip node <<<"$info"
  else
    echo "# rail-check: error on ${workers[i]}: kubectl get pod failed: $info"
  fi
  ips[i]=$ip
  nodes[i]=${node:-${workers[i]}}
done
pids=()
for i in "${!workers[@]}"; do
  j=$(((i + 1) % n))
  "$kubectl" exec "${workers[i]}" -- sh -c "$rail_worker" rail-check @SECS@ "${nodes[i]}" \
    "${nodes[j]}" "${ips[j]}" "$(hcas_of "${nodes[i]}")" "$(hcas_of "${nodes[j]}")" \
    >"$rail_out/$i" 2>&1 &
  pids[i]=$!
done
for i in "${!workers[@]}"; do
  rc=0
  wait "${pids[i]}" || rc=$?
  cat "$rail_out/$i"
  if [ "$rc" -ne 0 ]; then
    echo "# rail-check: error on ${nodes[i]}: kubectl exec exited $rc: $(tail -n 1 "$rail_out/$i")"
  fi
done
rm -rf "$rail_out"
echo "# rail-check: done"
"""


def rail_worker_script() -> str:
    """The POSIX sh each worker runs for the rail check (see _RAIL_WORKER)."""
    return _RAIL_WORKER.replace("@PORT@", str(IB_WRITE_BW_BASE_PORT))


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
    worker = rail_worker_script()
    assert "'" not in worker  # travels single-quoted
    workers = " ".join(f"{test.name}-worker-{i}" for i in range(nccl_test_nodes(cluster, test)))
    return (_RAIL_LAUNCHER
            .replace("@KUBECTL@", LAUNCHER_KUBECTL)
            .replace("@WORKERS@", workers)
            .replace("@HCAS@", shlex.quote(hcas))
            .replace("@CASES@", cases)
            .replace("@WORKER@", f"'{worker}'")
            .replace("@RAILS@", str(len(t.hcas)))
            .replace("@SECS@", str(IB_WRITE_BW_SECONDS))
            .replace("@FLOOR@", f"{rail_floor_gbps(cluster):g}"))


def nccl_test_mpijob(cluster: Cluster, test: NcclTest) -> dict:
    """Per-rail ib_write_bw between the workers (more than one node), then all_reduce_perf
    across the GPU nodes: one rank per GPU, Ring, NCCL_DEBUG=INFO for the checker."""
    nodes = nccl_test_nodes(cluster, test)
    gpus = cluster.gpu_nodes.template.gpu.count
    env = nccl_test_env(cluster)
    program = [NCCL_TESTS_BIN, "-b", test.min_bytes, "-e", test.max_bytes, "-f", "2", "-g", "1"]
    command = _mpirun(env, nodes * gpus, gpus, program)
    if nodes > 1:
        command = rail_check_script(cluster, test) + command
    labels = {"app.kubernetes.io/name": test.name, "app.kubernetes.io/component": "nccl-test"}
    worker = {
        "name": "worker",
        "image": test.image,
        "command": ["sleep", "infinity"],
        "env": env,
        "resources": _whole_node_resources(cluster, gpus, 16, "64Gi"),
        "securityContext": _rdma_security(),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "MPIJob",
        "metadata": {"name": test.name, "namespace": test.namespace,
                     "labels": {"app.kubernetes.io/component": "nccl-test"},
                     "annotations": {POLICY_SUPPRESS_ANNOTATION: NCCL_TEST_SUPPRESSIONS}},
        "spec": {
            "slotsPerWorker": gpus,
            "runPolicy": {**_run_policy(0, nodes + 1, ACCEPTANCE_QUEUE),
                          "activeDeadlineSeconds": test.timeout_minutes * 60},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never",
                             "template": _launcher(test.image, command, env)},
                "Worker": {"replicas": nodes, "restartPolicy": "Never",
                           "template": {
                               "metadata": _rdma_metadata(labels),
                               "spec": _gpu_pod_spec(cluster, [worker], [_shm("32Gi")],
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
    return f"""#!/usr/bin/env bash
# NCCL acceptance gate for MPIJob {test.namespace}/{test.name}: {nodes} nodes, {ranks} ranks.
{plan}set -euo pipefail
export KUBECONFIG=/etc/kubernetes/admin.conf
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/nccl_check.py" <<'NCCL_CHECK_EOF'
{checker}NCCL_CHECK_EOF
state=""
for _ in $(seq 1 {deadline // 10}); do
  state=$(kubectl -n {ns} get mpijob {name} -o \\
    jsonpath='{{range .status.conditions[?(@.status=="True")]}}{{.type}} {{end}}' || true)
  case "$state" in *Succeeded*|*Failed*) break ;; esac
  sleep 10
done
launcher=$(kubectl -n {ns} get pods -o name \\
  -l training.kubeflow.org/job-name={name},training.kubeflow.org/replica-type=launcher \\
  | head -n 1)
if [ -z "$launcher" ]; then
  echo "FAIL: MPIJob {test.name} has no launcher pod (state: ${{state:-pending}})" >&2
  exit 1
fi
kubectl -n {ns} logs "$launcher" >"$work/launcher.log" || true
case "$state" in
  *Succeeded*) ;;
  *) echo "FAIL: MPIJob {test.name} did not succeed (state: ${{state:-timed out}})" >&2
     tail -n 50 "$work/launcher.log" >&2 || true
     {check} >&2 || true
     exit 1 ;;
esac
{check}
"""


# ---------------------------------------------------------------- inference

API_KEY_FIELD = "api-key"


def api_key_secret(svc: InferenceService) -> str:
    return f"{svc.name}-api-key"


def _from_namespace(name: str) -> dict:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def api_key_script(svc: InferenceService) -> str:
    """On the control plane, before the service: its API key Secret, minted there once and
    kept only in the cluster (never in Pulumi state, a log or a command line)."""
    ns, name = svc.namespace, api_key_secret(svc)
    return dedent(f"""\
        #!/usr/bin/env bash
        # API key of the inference service {svc.name} — rendered by gpu-cluster; do not edit.
        set -euo pipefail
        export KUBECONFIG=/etc/kubernetes/admin.conf
        NS={ns}
        SECRET={name}
        FIELD={API_KEY_FIELD}
        """) + dedent(r"""
        if kubectl -n "$NS" get secret "$SECRET" >/dev/null 2>&1; then
          echo "$NS/$SECRET exists"
          exit 0
        fi
        openssl rand -hex 32 \
          | kubectl -n "$NS" create secret generic "$SECRET" --from-file="$FIELD=/dev/stdin" \
            >/dev/null
        echo "created $NS/$SECRET; clients read it with:" \
          "kubectl -n $NS get secret $SECRET -o jsonpath='{.data.$FIELD}' | base64 -d"
        """)


def api_key_delete_command(svc: InferenceService) -> str:
    return (f"sudo kubectl --kubeconfig /etc/kubernetes/admin.conf -n {svc.namespace} "
            f"delete secret {api_key_secret(svc)} --ignore-not-found")


def inference_objects(cluster: Cluster, svc: InferenceService) -> list[dict]:
    labels = {"app.kubernetes.io/name": svc.name, "app.kubernetes.io/component": "inference"}
    ns = svc.namespace
    res = {"nvidia.com/gpu": str(svc.gpus_per_pod), "cpu": str(svc.cpu), "memory": svc.memory}
    container = {
        "name": "vllm",
        "image": svc.image,
        "args": [
            f"--model={svc.model_path}",
            f"--served-model-name={svc.served_model_name}",
            f"--tensor-parallel-size={svc.tensor_parallel}",
            f"--max-model-len={svc.max_model_len}",
            f"--gpu-memory-utilization={svc.gpu_memory_utilization}",
            "--dtype=bfloat16",
            f"--port={VLLM_PORT}",
        ],
        # Non-root: caches (torch.compile, Triton, Hugging Face) go to a writable emptyDir.
        "env": [{"name": "HOME", "value": "/cache"},
                {"name": "XDG_CACHE_HOME", "value": "/cache"},
                {"name": "HF_HOME", "value": "/cache/huggingface"},
                {"name": "VLLM_CACHE_ROOT", "value": "/cache/vllm"},
                {"name": "HF_HUB_OFFLINE", "value": "1"},
                # vLLM requires it as a bearer token on every /v1 route (its auth middleware
                # leaves /health and /metrics open for the probes and Prometheus).
                {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {
                    "name": api_key_secret(svc), "key": API_KEY_FIELD}}}],
        "ports": [{"name": "http", "containerPort": VLLM_PORT}],
        "resources": {"requests": res, "limits": dict(res)},
        # vLLM serves HTTP only once the weights are loaded: /health answers 200 from then on
        # while the engine is alive (the /v1 routes need the API key, which a probe has not).
        # A 70B model (~140 GB bf16 from Lustre, plus CUDA-graph capture) takes several
        # minutes: the startup probe allows 30 min before the liveness probe may restart
        # anything.
        "startupProbe": {"httpGet": {"path": "/health", "port": "http"},
                         "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 180},
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"},
                           "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"},
                          "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 4},
        "securityContext": _restricted_security(),
        "volumeMounts": [
            {"name": "weights", "mountPath": mount_root(svc.model_path), "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "cache", "mountPath": "/cache"},
        ],
    }
    a = svc.autoscaling
    pod_spec = {
        "schedulerName": VOLCANO,  # one scheduler for every GPU pod; the inference queue
        "priorityClassName": platform.INFERENCE_PRIORITY,
        "nodeSelector": {"nvidia.com/gpu.product": cluster.gpu_nodes.template.gpu.product_label},
        "tolerations": [platform.gpu_toleration()],
        "securityContext": {"runAsNonRoot": True, "runAsUser": VLLM_UID,
                            "runAsGroup": VLLM_UID, "fsGroup": VLLM_UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 120,
        # One replica per node: a node lost or drained takes one replica, never the service
        # (Volcano's binpack would otherwise stack replicas on the fullest node).
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]}},
        "containers": [container],
        "volumes": _claims({"weights": claim_name(svc.weights)}) + [
            _shm(svc.shm_size), {"name": "cache", "emptyDir": {"sizeLimit": "64Gi"}}],
    }
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
         "spec": {
             "replicas": a.min_replicas,
             "selector": {"matchLabels": labels},
             # Replace in place: with one replica per node, a surge pod would need a spare
             # GPU node, and a rollout at maxReplicas would wait for one forever.
             "strategy": {"type": "RollingUpdate",
                          "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
             "template": {
                 "metadata": {"labels": labels,
                              "annotations": {"scheduling.volcano.sh/queue-name":
                                              INFERENCE_QUEUE}},
                 "spec": pod_spec,
             },
         }},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
         "spec": {"type": "ClusterIP", "selector": labels,
                  "ports": [{"name": "http", "port": VLLM_PORT, "targetPort": "http"}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
         "metadata": {"name": svc.name, "namespace": ns, "labels": labels,
                      "annotations": {
                          "cert-manager.io/cluster-issuer": "cluster-ca",
                          # Long generations stream for minutes.
                          "nginx.ingress.kubernetes.io/proxy-read-timeout": "300",
                          "nginx.ingress.kubernetes.io/proxy-send-timeout": "300"}},
         "spec": {"ingressClassName": "nginx",
                  "tls": [{"hosts": [svc.host], "secretName": f"{svc.name}-tls"}],
                  # The OpenAI API only: /metrics, /health, /docs and /tokenize stay inside.
                  "rules": [{"host": svc.host, "http": {"paths": [{
                      "path": "/v1", "pathType": "Prefix",
                      "backend": {"service": {"name": svc.name,
                                              "port": {"number": VLLM_PORT}}}}]}}]}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}},
        # Past the namespace's default deny: the ingress controller (the API) and Prometheus
        # (/metrics) reach the server's port, nothing else does.
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": f"{svc.name}-clients", "namespace": ns, "labels": labels},
         "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"],
                  "ingress": [{"from": [_from_namespace(cluster.platform.ingress_nginx.namespace),
                                        _from_namespace(cluster.platform.prometheus.namespace)],
                               "ports": [{"protocol": "TCP", "port": "http"}]}]}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
         "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
         # vLLM exposes Prometheus metrics (vllm:num_requests_waiting, ...) on /metrics.
         "spec": {"selector": {"matchLabels": labels},
                  "podMetricsEndpoints": [{"port": "http", "path": "/metrics",
                                           "interval": "15s"}]}},
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
         "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
         "spec": {
             "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                "name": svc.name},
             "minReplicas": a.min_replicas,
             "maxReplicas": a.max_replicas,
             # vllm:num_requests_waiting, per pod through the Prometheus adapter's rule.
             "metrics": [{"type": "Pods", "pods": {
                 "metric": {"name": a.metric},
                 "target": {"type": "AverageValue", "averageValue": str(a.target_average)}}}],
             "behavior": {
                 "scaleUp": {"stabilizationWindowSeconds": a.scale_up_window_seconds,
                             "policies": [{"type": "Pods", "value": a.scale_up_pods,
                                           "periodSeconds": a.scale_up_period_seconds}]},
                 "scaleDown": {"stabilizationWindowSeconds": a.scale_down_window_seconds,
                               "policies": [{"type": "Pods", "value": a.scale_down_pods,
                                             "periodSeconds": a.scale_down_period_seconds}]},
             },
         }},
    ]
