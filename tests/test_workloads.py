"""Workloads agree with the platform and fabric layers, for prod and for a cluster whose HCA
names are non-contiguous in another way than the DGX H100's.

Expected values come from the hardware (DGX H100 HCA names, 8 GPUs, GFD's product label), the
stack file (shm 128Gi, HPA 2->6) and the upstream schemas, not from the code under test.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import pytest
import yaml
from support.stack_edits import prod_with_rows

from components.model.cluster import Cluster
from components.model.fields import CLUSTER_KEY
from components.planning import (
    acceptance,
    inference,
    kubeadm,
    network_policies,
    placement,
    rdma,
    training,
    volcano,
    workloads,
)
from components.wiring.loading import validate_cluster

PROJECT_DIR = Path(__file__).resolve().parents[1]
REF = PROJECT_DIR.parent / "shared" / "ref"
DGX_H100_HCAS = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
# A server whose compute HCAs include mlx5_1 and mlx5_12..15: a plain "mlx5_1" prefix would
# also select mlx5_12..15.
OTHER_HCAS = ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8", "mlx5_12", "mlx5_13", "mlx5_14", "mlx5_15"]
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                 "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


@functools.cache
def _raw() -> dict:
    return yaml.safe_load((PROJECT_DIR / "Pulumi.prod.yaml").read_text())["config"][CLUSTER_KEY]


@functools.cache
def prod() -> Cluster:
    return validate_cluster(copy.deepcopy(_raw()), PROJECT_DIR)


@pytest.fixture(scope="module")
def other_hcas(tmp_path_factory) -> Cluster:
    def edit(rows: list[dict[str, str]]) -> None:
        for row in rows:
            row["hca"] = OTHER_HCAS[int(row["rail"])]
    return prod_with_rows(tmp_path_factory.mktemp("inv"), edit)


def clusters(other):
    return [(prod(), DGX_H100_HCAS), (other, OTHER_HCAS)]


def pod_specs(obj: dict) -> list[tuple[str, dict]]:
    spec = obj["spec"]
    for field in ("pytorchReplicaSpecs", "mpiReplicaSpecs"):
        if field in spec:
            return [(role, r["template"]) for role, r in spec[field].items()]
    return [("pod", spec["template"])]


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def gpu_templates(obj: dict) -> list[dict]:
    return [t for _, t in pod_specs(obj)
            if any("nvidia.com/gpu" in c["resources"]["limits"] for c in t["spec"]["containers"])]


def rdma_objects(cluster: Cluster) -> list[dict]:
    objs = [o for j in cluster.workloads.training for o in training.training_objects(cluster, j)]
    return objs + [acceptance.nccl_test_mpijob(cluster, cluster.workloads.nccl_test)]


# ---------------------------------------------------------------- NCCL, RDMA, shm


def test_nccl_env_for_prod_and_for_other_hca_names(other_hcas):
    for cluster, hcas in clusters(other_hcas):
        for obj in rdma_objects(cluster):
            for t in gpu_templates(obj):
                env = env_of(t["spec"]["containers"][0])
                assert env["NCCL_IB_HCA"] == "=" + ",".join(f"{h}:1" for h in hcas)
                # The bootstrap interface is the one the RDMA attachment creates in the pod.
                assert env["NCCL_SOCKET_IFNAME"] == "=net1" == "=" + rdma.POD_RDMA_INTERFACE
                assert env["NCCL_IB_DISABLE"] == "0"
                assert not any(k.startswith(("NCCL_IB_GID", "NCCL_IB_TC", "NCCL_IB_SL"))
                               for k in env), "RoCE-only knobs on native InfiniBand"


def test_nccl_debug_warn_in_production_info_for_the_acceptance_test():
    c = prod()
    job = training.pytorchjob(c, c.workloads.training[0])
    assert env_of(gpu_templates(job)[0]["spec"]["containers"][0])["NCCL_DEBUG"] == "WARN"
    test = acceptance.nccl_test_mpijob(c, c.workloads.nccl_test)
    for _, t in pod_specs(test):
        assert env_of(t["spec"]["containers"][0])["NCCL_DEBUG"] == "INFO"


def test_rdma_resource_and_attachment_match_the_platform(other_hcas):
    for cluster, _ in clusters(other_hcas):
        for obj in rdma_objects(cluster):
            ns = obj["metadata"]["namespace"]
            (nad,) = rdma.network_attachments(cluster, [ns])
            for t in gpu_templates(obj):
                assert t["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] \
                    == nad["metadata"]["name"] == "ib-rail0"
                res = t["spec"]["containers"][0]["resources"]
                assert res["limits"]["rdma/ib"] == res["requests"]["rdma/ib"] == "1"
                assert nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] \
                    == "rdma/ib" == rdma.rdma_resource(cluster)


def test_whole_node_pods_on_tainted_gpu_nodes():
    c = prod()
    for obj in rdma_objects(c):
        for t in gpu_templates(obj):
            spec = t["spec"]
            limits = spec["containers"][0]["resources"]["limits"]
            assert limits["nvidia.com/gpu"] == "8"
            assert spec["containers"][0]["resources"]["requests"] == limits
            assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} \
                in spec["tolerations"]
            assert spec["schedulerName"] == "volcano"


def test_shm_is_a_memory_emptydir_sized_from_the_config():
    c = prod()
    job = training.pytorchjob(c, c.workloads.training[0])
    for t in gpu_templates(job):
        vols = {v["name"]: v for v in t["spec"]["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in t["spec"]["containers"][0]["volumeMounts"]}
        assert vols[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "128Gi"}


def test_checkpoints_read_write_dataset_read_only():
    c = prod()
    job = training.pytorchjob(c, c.workloads.training[0])
    for t in gpu_templates(job):
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
                  for v in t["spec"]["volumes"] if "persistentVolumeClaim" in v}
        for m in t["spec"]["containers"][0]["volumeMounts"]:
            if m["name"] in claims:
                assert m.get("readOnly", False) == (m["mountPath"] == "/data"), m
        assert set(claims) == {"dataset", "checkpoints"}


# ---------------------------------------------------------------- gang and topology


def test_gang_min_members_equal_replicas_in_their_queues():
    c = prod()
    queues = {q["metadata"]["name"] for q in volcano.queues(c)}
    for obj in rdma_objects(c):
        replicas = obj["spec"].get("pytorchReplicaSpecs") or obj["spec"]["mpiReplicaSpecs"]
        total = sum(r["replicas"] for r in replicas.values())
        policy = obj["spec"]["runPolicy"]["schedulingPolicy"]
        assert policy["minAvailable"] == total
        assert policy["queue"] in queues
        want = "acceptance" if obj["kind"] == "MPIJob" else "training"
        assert policy["queue"] == want, obj["metadata"]["name"]
    job = training.pytorchjob(c, c.workloads.training[0])
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 4  # 4 nodes


def test_a_failed_rank_restarts_the_whole_torchrun_gang():
    """torchrun's elastic agent (c10d rendezvous) restarts every worker when one fails or a
    node rejoins; a static MASTER_ADDR/RANK launch would leave the peers hung in NCCL."""
    c = prod()
    job = training.pytorchjob(c, c.workloads.training[0])
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Worker"}
    assert job["spec"]["elasticPolicy"] == {"rdzvBackend": "c10d", "minReplicas": 4,
                                            "maxReplicas": 4, "maxRestarts": 3}
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4


def test_the_restart_budget_counts_gang_restarts_not_container_restarts():
    """The Training Operator fails a job once the restart counts of its running pods'
    containers add up to runPolicy.backoffLimit (PastBackoffLimit in training-operator
    v1.8/v1.9 pkg/controller.v1/common); when worker 0, which hosts the c10d store, restarts,
    every other worker's torchrun agent loses the store and exits too. backoffLimit 3 must
    survive three such restarts of the 4-node job: 12 container restarts, not 3 (which would
    fail the job on worker 0's first restart)."""
    c = prod()
    job = c.workloads.training[0]
    assert (job.nodes, job.backoff_limit) == (4, 3)
    run = training.pytorchjob(c, job)["spec"]["runPolicy"]
    assert run["backoffLimit"] == 12
    # torchrun's own restarts of the rank processes (inside the containers) stay at 3.
    assert training.pytorchjob(c, job)["spec"]["elasticPolicy"]["maxRestarts"] == 3


def test_topology_constraint_is_the_tier1_hypernode():
    """The SU label the pods are packed by is, node by node, the tier-1 HyperNode the fabric
    plan puts the node in."""
    c = prod()
    plan = placement.plan(c)
    tier1 = {}
    for hn in volcano.hypernodes(plan):
        if hn["spec"]["tier"] == 1:
            for m in hn["spec"]["members"]:
                tier1[m["selector"]["exactMatch"]["name"]] = hn["metadata"]["name"]
    key = workloads.su_label_key(c)
    for node in c.nodes:
        assert kubeadm.node_labels(c, node)[key] == tier1[node.hostname]
    job = training.pytorchjob(c, c.workloads.training[0])
    for t in gpu_templates(job):
        (term,) = t["spec"]["affinity"]["podAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == key == "node-restriction.kubernetes.io/gpucluster-su"
        assert term["labelSelector"]["matchLabels"].items() <= t["metadata"]["labels"].items()


def test_no_constraint_when_the_job_is_larger_than_an_su():
    c = prod()
    assert workloads.topology_affinity(c, {"a": "b"}, workloads.largest_su(c) + 1) is None
    soft = workloads.topology_affinity(c, {"a": "b"}, 2, "soft")
    assert "preferredDuringSchedulingIgnoredDuringExecution" in soft["podAffinity"]


# ---------------------------------------------------------------- NCCL acceptance test


def test_nccl_test_spans_every_gpu_node():
    c = prod()
    test = acceptance.nccl_test_mpijob(c, c.workloads.nccl_test)
    spec = test["spec"]["mpiReplicaSpecs"]
    assert spec["Worker"]["replicas"] == 8 and test["spec"]["slotsPerWorker"] == 8
    launcher = spec["Launcher"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in launcher["resources"]["limits"]
    cmd = launcher["args"][0]
    # Ranks: 8 per worker of the run (its hostfile; the gate sizes each run).
    assert '-np "$np" -npernode 8' in cmd and "all_reduce_perf" in cmd and "-e 4G" in cmd
    for name in ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG"):
        assert f"-x {name}" in cmd
    # Applied suspended: the definition the gate's runs copy, never run itself.
    assert test["spec"]["runPolicy"]["suspend"] is True
    script = acceptance.nccl_gate_script(c, c.workloads.nccl_test)
    # 8 rails x 46 GB/s per NDR rail (Ring all-reduce busbw, docs/acceptance.md) x 1.0.
    assert "rails=8 floor=357.0" in script
    # Every GPU node the stack plans, with its SU (prod's eight are one SU).
    assert "--gpu-nodes " + ",".join(f"gpu-node-{i:02d}=su1" for i in range(8)) + " \\\n" \
        in script


# ---------------------------------------------------------------- security


def _containers(t: dict) -> list[dict]:
    return t["spec"].get("initContainers", []) + t["spec"]["containers"]


def baseline_violations(t: dict) -> set[str]:
    spec, found = t["spec"], set()
    for k in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(k):
            found.add(k)
    if any("hostPath" in v for v in spec.get("volumes", [])):
        found.add("hostPath")
    for c in _containers(t):
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            found.add("privileged")
        extra = set(sc.get("capabilities", {}).get("add", [])) - BASELINE_CAPS
        found |= {f"capabilities.add={x}" for x in extra}
        if any("hostPort" in p for p in c.get("ports", [])):
            found.add("hostPort")
    return found


def restricted_violations(t: dict) -> set[str]:
    found = baseline_violations(t)
    pod_sc = t["spec"].get("securityContext", {})
    for c in _containers(t):
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            found.add("allowPrivilegeEscalation")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            found.add("capabilities.drop")
        if set(sc.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            found.add("capabilities.add")
        if not (sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))):
            found.add("runAsNonRoot=unset")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            found.add("runAsUser=0")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.add("seccompProfile")
    return found


def test_rdma_pods_break_baseline_only_by_ipc_lock_and_say_why():
    c = prod()
    for obj in rdma_objects(c):
        for _, t in pod_specs(obj):
            reasons = json.loads(t.get("metadata", {}).get("annotations", {}).get(
                workloads.EXCEPTIONS_ANNOTATION, "{}"))
            assert baseline_violations(t) <= {"capabilities.add=IPC_LOCK"}
            for c_ in _containers(t):
                sc = c_["securityContext"]
                assert sc.get("privileged") is False and sc["allowPrivilegeEscalation"] is False
                assert sc["capabilities"]["drop"] == ["ALL"]
                assert set(sc["capabilities"].get("add", [])) <= {"IPC_LOCK"}
            # Every way it is not restricted is explained on the pod.
            missing = restricted_violations(t) - {"capabilities.add"} - set(reasons)
            assert not missing, (obj["metadata"]["name"], missing)


def test_inference_pods_meet_restricted():
    c = prod()
    (svc,) = c.workloads.inference
    deploy = next(o for o in inference.inference_objects(c, svc) if o["kind"] == "Deployment")
    assert restricted_violations(deploy["spec"]["template"]) == set()


def test_no_latest_and_pinned_images():
    c = prod()
    objs = rdma_objects(c) + inference.inference_objects(c, c.workloads.inference[0])
    for obj in objs:
        if obj["kind"] not in ("PyTorchJob", "MPIJob", "Deployment"):
            continue
        for _, t in pod_specs(obj):
            for c_ in _containers(t):
                tag = c_["image"].rsplit("/", 1)[-1]
                assert ":" in tag and not tag.endswith(":latest"), c_["image"]


# ---------------------------------------------------------------- inference


def _inference() -> dict[str, dict]:
    c = prod()
    return {o["kind"]: o for o in inference.inference_objects(c, c.workloads.inference[0])}


def test_vllm_deployment():
    d = _inference()["Deployment"]
    pod = d["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    # A whole DGX node per replica (one replica per node): two engines of 4 GPUs each
    # (vLLM's data parallel deployment), none of the node's 8 GPUs idle.
    assert "--tensor-parallel-size=4" in ctr["args"]
    assert "--data-parallel-size=2" in ctr["args"]
    assert ctr["resources"]["requests"] == ctr["resources"]["limits"]
    assert ctr["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # vLLM's auth middleware guards the /v1 routes; a probe has no key, so every probe asks
    # /health (open, and 200 only once the engine is up).
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert ctr[probe]["httpGet"]["path"] == "/health"
    startup = ctr["startupProbe"]
    # A 70B model loads for minutes: at least 20 minutes before liveness may act.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 20 * 60
    weights = next(m for m in ctr["volumeMounts"] if m["name"] == "weights")
    assert weights["readOnly"] is True
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["dshm"]["emptyDir"]["medium"] == "Memory"


def test_the_api_needs_a_key_and_exposes_only_v1():
    """vLLM reads VLLM_API_KEY (its --api-key) and then answers 401 on every /v1 route without
    `Authorization: Bearer <key>`; the key comes from a Secret the control plane mints, never
    from Pulumi; the Ingress routes /v1 only (not /metrics, /health, /docs, /tokenize)."""
    c = prod()
    svc = c.workloads.inference[0]
    objs = _inference()
    (ctr,) = objs["Deployment"]["spec"]["template"]["spec"]["containers"]
    key = next(e for e in ctr["env"] if e["name"] == "VLLM_API_KEY")
    assert key["valueFrom"]["secretKeyRef"] == {"name": "llama-70b-api-key", "key": "api-key"}
    assert not any("api-key" in a for a in ctr["args"])  # not on the command line
    (rule,) = objs["Ingress"]["spec"]["rules"]
    assert [(p["path"], p["pathType"]) for p in rule["http"]["paths"]] == [("/v1", "Prefix")]
    script = inference.api_key_script(svc)
    assert "--from-file=\"$FIELD=/dev/stdin\"" in script and "--from-literal" not in script


def test_only_the_ingress_controller_and_prometheus_reach_the_server():
    c = prod()
    policy = _inference()["NetworkPolicy"]
    deploy = _inference()["Deployment"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= \
        deploy["spec"]["template"]["metadata"]["labels"].items()
    (rule,) = policy["spec"]["ingress"]
    sources = {f["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
               for f in rule["from"]}
    assert sources == {c.platform.ingress_nginx.namespace, c.platform.prometheus.namespace}
    assert rule["ports"] == [{"protocol": "TCP", "port": "http"}]
    # Behind it, each workload namespace denies by default; training pods reach each other.
    policies = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["spec"]
                for p in network_policies.network_policies(c)}
    for ns in ("training", "inference"):
        assert policies[ns, "default-deny-ingress"] == {"podSelector": {},
                                                        "policyTypes": ["Ingress"]}
    assert policies["training", "same-namespace"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    assert ("inference", "same-namespace") not in policies


def test_hpa_scales_2_to_3_on_a_metric_prometheus_scrapes():
    objs = _inference()
    hpa, pm, deploy = objs["HorizontalPodAutoscaler"], objs["PodMonitor"], objs["Deployment"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 3)
    (metric,) = hpa["spec"]["metrics"]
    name = metric["pods"]["metric"]["name"]
    assert name == "vllm_num_requests_waiting"
    # The adapter exposes it under that name from vLLM's series vllm:num_requests_waiting.
    rules = rdma.adapter_rules(prod())
    rule = next(r for r in rules if r["name"]["as"] == name)
    assert "vllm:num_requests_waiting" in rule["seriesQuery"]
    # The PodMonitor selects the Deployment's pods on a port the container declares.
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"] for p in deploy["spec"]["template"]["spec"]["containers"][0]["ports"]}
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert ep["port"] in ports and ep["path"] == "/metrics"
    assert hpa["spec"]["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 120
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300


def test_podmonitor_shape():
    pm = _inference()["PodMonitor"]
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(pm) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(pm["spec"]) <= {"selector", "podMetricsEndpoints", "namespaceSelector",
                               "jobLabel", "podTargetLabels"}
    for ep in pm["spec"]["podMetricsEndpoints"]:
        assert set(ep) <= {"port", "path", "interval", "scheme", "scrapeTimeout"}


def test_ingress_tls_pdb_and_service():
    objs = _inference()
    ing = objs["Ingress"]
    assert ing["metadata"]["annotations"]["cert-manager.io/cluster-issuer"]
    assert ing["spec"]["tls"][0]["hosts"] == ["llm-api.cluster.internal"]
    pdb = objs["PodDisruptionBudget"]
    assert pdb["spec"]["selector"]["matchLabels"] == objs["Deployment"]["spec"]["selector"][
        "matchLabels"]
    assert objs["Service"]["spec"]["selector"] == objs["Deployment"]["spec"]["selector"][
        "matchLabels"]


# ---------------------------------------------------------------- upstream schemas


def _crd_schema(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.slow
@pytest.mark.skipif(not REF.exists(), reason="shared/ref (upstream CRDs) not present")
def test_training_objects_validate_against_training_operator_v1_9_4():
    import jsonschema

    base = REF / "kubeflow" / "v1-training-operator-v1.9.4"
    schemas = {"PyTorchJob": _crd_schema(base / "kubeflow.org_pytorchjobs.yaml"),
               "MPIJob": _crd_schema(base / "kubeflow.org_mpijobs.yaml")}
    c = prod()
    mpi_job = c.workloads.training[0].model_copy(update={"launcher": "mpijob"})
    for obj in rdma_objects(c) + [training.mpijob(c, mpi_job)]:
        jsonschema.validate(obj, schemas[obj["kind"]])


@pytest.mark.slow
def test_the_api_key_is_minted_once_and_never_on_a_command_line(tmp_path):
    """Run for real in a sandbox against the stub kubectl: the first run creates the Secret
    from `openssl rand` on stdin, a second run keeps it (clients hold the key)."""
    from support.sandbox import Sandbox, unavailable

    if (why := unavailable()) is not None:
        pytest.skip(why)
    svc = prod().workloads.inference[0]
    sb = Sandbox(tmp_path / "mgmt-01", "mgmt-01")
    (sb.root / "etc/kubernetes").mkdir(parents=True)
    (sb.root / "etc/kubernetes/admin.conf").write_text("# admin\n")
    first = sb.run(inference.api_key_script(svc))
    assert first.returncode == 0, first.explain()
    key = (sb.state / "cluster/secrets/inference/llama-70b-api-key/api-key").read_text()
    assert len(key.strip()) == 64 and int(key, 16)  # 32 random bytes, hex
    assert not any(key.strip() in "\t".join(c) for c in first.calls)
    assert key.strip() not in first.output
    again = sb.run(inference.api_key_script(svc))
    assert again.returncode == 0 and not again.changes, again.explain()
    assert (sb.state / "cluster/secrets/inference/llama-70b-api-key/api-key").read_text() == key
