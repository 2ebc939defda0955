"""The platform layer as rendered for prod: every object valid against the real upstream schemas,
every Helm value a key of the upstream chart, and the pieces that must agree with each other
(RDMA resource, attachments, IPAM, NCCL interface; ingress pool and TLS issuer; HPA metric and
the adapter; gang scheduling) agreeing.

Schemas and chart values come from ../shared/ref (validate_manifests.py, check_chart_values.py);
the tests that need them skip, saying so, when ../shared is absent.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.project import prod_raw, run_offline
from support.sandbox import DGX_H100_RAIL_NETDEVS

from components.model.cluster import Cluster
from components.model.compat import TRAINING_OPERATOR_COMMITS
from components.model.fields import ConfigError
from components.planning import platform, rdma, training_operator
from components.wiring.loading import validate_cluster

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
TOOLS = SHARED / "tools"
REF = SHARED / "ref"
needs_shared = pytest.mark.skipif(
    not SHARED.is_dir(), reason="../shared (upstream CRDs, chart values, validators) is absent")

# Release -> the upstream values.yaml in ../shared/ref it is checked against. The GPU Operator's
# file is the v26.7.0 chart (the only one published there); every key the stack sets exists in
# the v26.3.x chart too.
UPSTREAM_VALUES = {
    "gpu-operator": "nvidia-gpu-operator/chart/values.yaml",
    "network-operator": "nvidia-network-operator/v26.4.1/chart/values.yaml",
    "volcano": "volcano/v1.15.1/chart/values.yaml",
}
# Keys of subcharts the tool cannot see: Network Operator 26.4.1 ships Node Feature Discovery as
# the `node-feature-discovery` subchart, whose master and gc Deployments take nodeSelector and
# tolerations (kubernetes-sigs/node-feature-discovery, deployment/helm/node-feature-discovery).
# (node-feature-discovery's own values.yaml, in the chart archive of ../shared/upstream/charts,
# has worker.priorityClassName, which its templates/worker.yaml reads.)
SUBCHART_KEYS = {"network-operator": {f"node-feature-discovery.{c}.{k}" for c in ("master", "gc")
                                      for k in ("nodeSelector", "tolerations")}
                 | {"node-feature-discovery.worker.priorityClassName"}}
# Releases whose chart values are not in ../shared/ref (checked by the pure tests below).
NO_UPSTREAM_VALUES = {"calico", "cert-manager", "ingress-nginx", "metallb", "prometheus",
                      "prometheus-adapter"}


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def raw() -> dict:
    return prod_raw()


@functools.cache
def prod() -> Cluster:
    return validate_cluster(prod_raw(), REPO)


def objects(build: Path) -> list[tuple[Path, dict]]:
    return [(p, yaml.safe_load(p.read_text()))
            for p in sorted((build / "manifests").rglob("*.yaml"))]


def of_kind(build: Path, kind: str) -> list[dict]:
    return [o for _, o in objects(build) if o["kind"] == kind]


def helm(build: Path) -> dict[str, dict]:
    return {p.stem: yaml.safe_load(p.read_text()) for p in (build / "helm").glob("*.yaml")}


def run_tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True)


# ---------------------------------------------------------------- schemas


@pytest.mark.slow
@needs_shared
def test_every_object_is_valid_against_core_schemas_and_upstream_crds(build):
    """Every rendered object, custom kinds included, validated strictly: no kind is skipped."""
    paths = [str(p) for p, _ in objects(build)]
    out = run_tool(str(TOOLS / "validate_manifests.py"), "--k8s", "1.35", *paths)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "skipped" not in out.stdout
    assert out.stdout.strip().splitlines()[-1] == f"{len(paths)} objects checked, 0 invalid"
    kinds = {o["kind"] for _, o in objects(build)}
    # The platform's custom kinds, each checked against its upstream CRD in ../shared/ref.
    assert {"NicClusterPolicy", "NetworkAttachmentDefinition", "HyperNode", "Queue",
            "PyTorchJob", "CSIDriver", "DaemonSet", "Namespace", "Certificate",
            "ClusterIssuer", "IPAddressPool", "L2Advertisement", "PodMonitor", "IPPool"} <= kinds


def _validate(tmp_path: Path, obj: dict) -> subprocess.CompletedProcess:
    path = tmp_path / f"{obj['kind']}.yaml"
    path.write_text(yaml.safe_dump(obj))
    return run_tool(str(TOOLS / "validate_manifests.py"), "--k8s", "1.35", str(path))


@needs_shared
@pytest.mark.parametrize("kind,mistake", [
    # A misspelt field: the CRDs are structural, so the API server would prune it silently and
    # the pool would have no addresses at all.
    ("IPAddressPool", lambda o: o["spec"].__setitem__("adresses", o["spec"].pop("addresses"))),
    # cert-manager's webhook refuses an issuer of two kinds; the CRD refuses an unknown key.
    ("ClusterIssuer", lambda o: o["spec"].__setitem__("ca", {"secret": "x"})),
    ("Certificate", lambda o: o["spec"].pop("issuerRef")),
    ("PodMonitor", lambda o: o["spec"].__setitem__("podMetricsEndpoints", "metrics")),
    ("IPPool", lambda o: o["spec"].__setitem__("perNodeBlockSize", "16")),
    ("L2Advertisement", lambda o: o["spec"].__setitem__("ipAddressPools", "pool")),
])
def test_the_validator_refuses_a_broken_custom_object(build, tmp_path, kind, mistake):
    good = next(o for _, o in objects(build) if o["kind"] == kind)
    assert _validate(tmp_path, good).returncode == 0
    bad = copy.deepcopy(good)
    mistake(bad)
    out = _validate(tmp_path, bad)
    assert out.returncode != 0 and out.stdout.strip().endswith("1 invalid"), out.stdout


# ---------------------------------------------------------------- Helm releases


def test_every_release_is_pinned_and_written(build):
    files = helm(build)
    assert set(files) == {r.name for r in platform.helm_releases(prod())}
    for name, doc in files.items():
        assert set(doc) == {"name", "chart", "version", "repo", "namespace", "values"}, name
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", doc["version"]), (name, doc["version"])
        assert doc["repo"].startswith("https://"), name
    assert files["network-operator"]["version"] == "26.4.1"
    assert files["volcano"]["version"] == "1.15.1"


@needs_shared
def test_helm_values_are_keys_of_the_upstream_charts(build):
    files = helm(build)
    assert set(UPSTREAM_VALUES) | NO_UPSTREAM_VALUES == set(files)
    for name, ref in UPSTREAM_VALUES.items():
        out = run_tool(str(TOOLS / "check_chart_values.py"), str(REF / ref),
                       str(build / "helm" / f"{name}.yaml"))
        unknown = {line.removeprefix("UNKNOWN KEY: ") for line in out.stdout.splitlines()
                   if line.startswith("UNKNOWN KEY: ")}
        # A node label under a nodeSelector the chart fills by default (a free-form label map
        # the tool reads as fixed keys), and keys of subcharts whose values.yaml is not in
        # ../shared/ref: nothing else may be unknown.
        free_form = {k for k in unknown if ".nodeSelector." in k}
        assert unknown - free_form <= SUBCHART_KEYS.get(name, set()), (name, out.stdout)
    # The pinned releases are the ones whose values were checked.
    for name, chart in (("network-operator", "nvidia-network-operator/v26.4.1/chart/Chart.yaml"),
                        ("volcano", "volcano/v1.15.1/chart/Chart.yaml")):
        assert yaml.safe_load((REF / chart).read_text())["version"] == files[name]["version"]


@needs_shared
def test_a_misspelled_value_would_be_caught(tmp_path):
    rel = {r.name: r for r in platform.helm_releases(prod())}["gpu-operator"]
    values = copy.deepcopy(dict(rel.values))
    values["toolkit"]["enable"] = values["toolkit"].pop("enabled")
    path = tmp_path / "gpu-operator.yaml"
    path.write_text(yaml.safe_dump({"values": values}))
    out = run_tool(str(TOOLS / "check_chart_values.py"),
                   str(REF / UPSTREAM_VALUES["gpu-operator"]), str(path))
    assert out.returncode == 1 and "toolkit.enable" in out.stdout


def _values_with(values, key: str) -> bool:
    if isinstance(values, dict):
        return any(k == key and isinstance(v, dict) and v.get("enabled") or _values_with(v, key)
                   for k, v in values.items())
    return isinstance(values, list) and any(_values_with(v, key) for v in values)


def test_releases_install_after_what_they_need():
    rels = platform.helm_releases(prod())
    order = [r.name for r in rels]
    for i, r in enumerate(rels):
        assert all(order.index(d) < i for d in r.after), r.name

    def before(name: str) -> set[str]:
        r = next(x for x in rels if x.name == name)
        return set(r.after).union(*(before(d) for d in r.after))

    for r in rels:
        if _values_with(r.values, "serviceMonitor"):  # needs the Prometheus Operator's CRDs
            assert "prometheus" in before(r.name), r.name
        if r.name != "calico":
            assert "calico" in before(r.name), r.name  # nothing runs without the CNI
    assert {"network-operator", "prometheus"} <= before("gpu-operator")
    assert {"metallb", "cert-manager"} <= before("ingress-nginx")


def test_ingress_waits_for_the_address_pool_and_the_operator_for_volcano(build):
    plan = {r["name"]: r for r in json.loads((build / "plan.json").read_text())["resources"]}
    deps = plan["ingress-nginx"]["options"]["dependsOn"]
    # A LoadBalancer Service only gets an address once MetalLB has a pool: helm --atomic
    # would time out without it.
    assert any(":IPAddressPool::" in u for u in deps)
    assert any(":L2Advertisement::" in u for u in deps)
    assert plan["training-operator"]["options"]["dependsOn"] == [plan["volcano"]["urn"]]


# ---------------------------------------------------------------- GPU and Network Operators


def test_gpu_operator_values_follow_the_config(raw):
    values = {r.name: r.values for r in platform.helm_releases(prod())}["gpu-operator"]
    # prod: DGX OS ships the driver, so the hosts own it and the operator runs no driver
    # container ("Pre-Installed NVIDIA GPU Drivers": driver.enabled=false); nothing else under
    # `driver` (a version or upgrade policy there would describe a driver nothing runs).
    assert values["driver"] == {"enabled": False}
    assert values["dcgmExporter"] == {"enabled": True, "serviceMonitor": {"enabled": True}}
    assert values["gds"] == {"enabled": True}
    assert values["migManager"] == {"enabled": False}
    # The toolkit configures containerd's nvidia runtime whoever owns the driver.
    assert {values[k]["enabled"] for k in ("toolkit", "devicePlugin", "gfd")} == {True}
    assert values["nfd"] == {"enabled": False}  # the Network Operator's NFD serves both
    raw["platform"]["gpuOperator"]["driver"] = "operator"
    raw["platform"]["gpuOperator"]["gpudirectStorage"] = False
    operator = {r.name: r.values for r in platform.helm_releases(validate_cluster(raw, REPO))}
    gpu = operator["gpu-operator"]
    assert gpu["driver"]["enabled"] is True
    assert gpu["driver"]["kernelModuleType"] == "open"
    assert gpu["driver"]["version"] == raw["platform"]["gpuOperator"]["driverVersion"]
    # DOCA-OFED on the host (what the Lustre client's ko2iblnd is built against), and GPUDirect
    # RDMA through DMA-BUF, which NVIDIA recommends over nvidia-peermem whenever it is supported
    # (GPU Operator docs, "GPUDirect RDMA and GPUDirect Storage"): no peermem.
    assert gpu["driver"]["rdma"] == {"enabled": False, "useHostMofed": True}
    assert gpu["gds"] == {"enabled": False}


def test_rdma_resource_attachment_ipam_and_nccl_agree(build):
    c = prod()
    (ncp,) = of_kind(build, "NicClusterPolicy")
    spec = ncp["spec"]
    config = json.loads(spec["rdmaSharedDevicePlugin"]["config"])["configList"]
    assert len(config) == 1
    resource = f"{config[0]['resourcePrefix']}/{config[0]['resourceName']}"
    assert resource == "rdma/ib" == rdma.rdma_resource(c)
    # The compute HCAs of the 8 rails, by the names DGX OS gives them, and only those.
    assert config[0]["selectors"]["ifNames"] == list(DGX_H100_RAIL_NETDEVS)
    assert config[0]["selectors"]["linkTypes"] == ["infiniband"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
        spec["tolerations"])
    assert {"multus", "ipoib", "cniPlugins"} <= set(spec["secondaryNetwork"])
    # prod keeps DOCA-OFED on the host: no driver container replaces ib_core under LNet.
    assert "nvIpam" in spec and "ofedDriver" not in spec
    (pool,) = of_kind(build, "IPPool")
    assert pool["metadata"]["namespace"] == "nvidia-network-operator"
    assert pool["spec"]["subnet"] == "192.168.0.0/16"
    nads = {n["metadata"]["namespace"]: n for n in of_kind(build, "NetworkAttachmentDefinition")}
    for nad in nads.values():
        cni = json.loads(nad["spec"]["config"])
        assert cni["type"] == "ipoib" and cni["master"] == "ibp24s0"  # rail 0, mlx5_0
        assert cni["ipam"] == {"type": "nv-ipam", "poolName": pool["metadata"]["name"]}
        assert nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] == resource
    # Every pod that asks for the attachment finds it in its namespace, requests the RDMA
    # resource, and points NCCL's socket at the interface Multus creates (net1).
    jobs = of_kind(build, "PyTorchJob") + of_kind(build, "MPIJob")
    assert jobs
    for job in jobs:
        specs = job["spec"].get("pytorchReplicaSpecs") or job["spec"]["mpiReplicaSpecs"]
        for role, rs in specs.items():
            tmpl = rs["template"]
            nets = tmpl["metadata"].get("annotations", {}).get("k8s.v1.cni.cncf.io/networks")
            if nets is None:
                continue
            assert nets == rdma.RDMA_NETWORK and job["metadata"]["namespace"] in nads
            (ctr,) = [x for x in tmpl["spec"]["containers"]
                      if resource in x["resources"].get("limits", {})]
            env = {e["name"]: e.get("value") for e in ctr["env"]}
            assert env["NCCL_SOCKET_IFNAME"].lstrip("=") == "net1", (job["metadata"], role)


@needs_shared
def test_network_operator_images_are_the_releases_own(build):
    (ncp,) = of_kind(build, "NicClusterPolicy")
    upstream = yaml.safe_load((REF / UPSTREAM_VALUES["network-operator"]).read_text())
    tag = upstream["operator"]["ofedDriver"]["initContainer"]["version"]
    assert tag == "network-operator-v26.4.1"
    spec = ncp["spec"]
    assert "ofedDriver" not in spec  # prod: ofed: host
    # The driver container the operator model would run (config refuses that model beside a
    # host Lustre client, docs/hosts.md; the pin is still the release's own).
    c = prod()
    nop = c.platform.network_operator.model_copy(update={"ofed": "operator"})
    c = c.model_copy(update={"platform": c.platform.model_copy(
        update={"network_operator": nop})})
    spec = rdma.nic_cluster_policy(c)["spec"]
    parts = [spec["rdmaSharedDevicePlugin"], spec["nvIpam"], *spec["secondaryNetwork"].values()]
    assert {p["version"] for p in parts} == {tag}
    assert {p["repository"] for p in parts} == {"nvcr.io/nvidia/mellanox"}
    # The DOCA-OFED driver container NVIDIA lists for Network Operator v26.4.1 (the release's
    # container image list: nvcr.io/nvidia/mellanox/doca-driver doca3.4.1-26.04-1.1.0.0-1);
    # doca3.4.0-26.04-0.8.6.0-0 is 26.4.0's.
    assert spec["ofedDriver"]["version"] == "doca3.4.1-26.04-1.1.0.0-1"
    assert (spec["ofedDriver"]["image"], spec["ofedDriver"]["repository"]) == (
        "doca-driver", "nvcr.io/nvidia/mellanox")


def test_ip_pool_must_hold_a_block_per_node(raw):
    raw["network"]["rdmaCidr"] = "192.168.0.0/26"  # 64 addresses, 8 nodes need 9 x 64
    # A config error before anything is registered (not a traceback from the platform layer).
    with pytest.raises(ConfigError) as info:
        validate_cluster(raw, REPO)
    [problem] = info.value.problems
    assert (problem.path, problem.check) == ("network.rdmaCidr", "address-plan")
    assert "8 GPU nodes x 64 pod addresses" in problem.message and "/22" in problem.fix
    # The planner's own guard, for a model that skipped validation.
    cluster = validate_cluster(prod_raw(), REPO)
    small = cluster.model_copy(update={"network": cluster.network.model_copy(
        update={"rdma_cidr": ipaddress.ip_network("192.168.0.0/26")})})
    with pytest.raises(ValueError, match=r"network.rdmaCidr: 192.168.0.0/26 .* 8 GPU nodes"):
        rdma.ip_pool(small)


# ---------------------------------------------------------------- namespaces, ingress, metrics


def test_namespaces_carry_pod_security_levels(build):
    ns = {n["metadata"]["name"]: n["metadata"] for n in of_kind(build, "Namespace")}
    psa = "pod-security.kubernetes.io"
    training = ns["training"]["labels"]
    assert (training[f"{psa}/enforce"], training[f"{psa}/warn"], training[f"{psa}/audit"]) == (
        "privileged", "baseline", "baseline")
    assert "IPC_LOCK" in ns["training"]["annotations"]["gpucluster.io/pod-security"]
    inference = ns["inference"]["labels"]
    assert (inference[f"{psa}/enforce"], inference[f"{psa}/warn"],
            inference[f"{psa}/audit"]) == ("baseline", "restricted", "restricted")
    assert ns["lustre-csi-system"]["labels"][f"{psa}/enforce"] == "privileged"


def test_ingress_gets_an_address_and_a_certificate(build):
    (pool,) = of_kind(build, "IPAddressPool")
    assert pool["spec"]["addresses"] == ["10.12.0.240-10.12.0.250"]  # network.ingressPool
    # Only a Service that names the pool gets an address from it (the ingress controller).
    assert pool["spec"]["autoAssign"] is False
    (l2,) = of_kind(build, "L2Advertisement")
    assert l2["spec"] == {"ipAddressPools": [pool["metadata"]["name"]],
                          "interfaces": ["bond0.112"]}  # network.loadBalancerInterfaces
    svc = helm(build)["ingress-nginx"]["values"]["controller"]["service"]
    assert svc["type"] == "LoadBalancer"
    assert svc["annotations"]["metallb.io/address-pool"] == pool["metadata"]["name"]
    issuers = {i["metadata"]["name"]: i for i in of_kind(build, "ClusterIssuer")}
    ingresses = of_kind(build, "Ingress")
    assert ingresses
    for ing in ingresses:
        name = ing["metadata"]["annotations"]["cert-manager.io/cluster-issuer"]
        assert "ca" in issuers[name]["spec"]
        assert ing["spec"]["tls"]
    (ca,) = of_kind(build, "Certificate")
    assert ca["spec"]["isCA"] is True
    assert ca["spec"]["secretName"] == issuers["cluster-ca"]["spec"]["ca"]["secretName"]
    # A ClusterIssuer reads its secret from cert-manager's own namespace.
    assert ca["metadata"]["namespace"] == helm(build)["cert-manager"]["namespace"]
    assert "selfSigned" in issuers[ca["spec"]["issuerRef"]["name"]]["spec"]


def test_the_hpa_metric_is_served_by_the_adapter(build):
    files = helm(build)
    adapter = files["prometheus-adapter"]["values"]
    prom = files["prometheus"]
    # kube-prometheus-stack (release "prometheus") names its Service
    # prometheus-kube-prometheus-prometheus, port 9090.
    assert adapter["prometheus"] == {
        "url": f"http://prometheus-kube-prometheus-prometheus.{prom['namespace']}.svc",
        "port": 9090}
    served = {r["name"]["as"]: r for r in adapter["rules"]["custom"]}
    hpas = of_kind(build, "HorizontalPodAutoscaler")
    assert hpas
    for hpa in hpas:
        for m in hpa["spec"]["metrics"]:
            assert m["type"] == "Pods"
            rule = served[m["pods"]["metric"]["name"]]
            # vLLM exports vllm:num_requests_waiting; the rule must find that series.
            series = re.search(r'__name__=~"([^"]+)"', rule["seriesQuery"]).group(1)
            assert re.search(series, "vllm:num_requests_waiting")
    # Something scrapes the vLLM pods: a PodMonitor selecting them on a port they expose.
    deployments = {d["metadata"]["name"]: d for d in of_kind(build, "Deployment")}
    monitors = of_kind(build, "PodMonitor")
    for hpa in hpas:
        tmpl = deployments[hpa["spec"]["scaleTargetRef"]["name"]]["spec"]["template"]
        labels = tmpl["metadata"]["labels"]
        ports = {p["name"] for c in tmpl["spec"]["containers"] for p in c.get("ports", [])}
        assert any(
            all(labels.get(k) == v for k, v in m["spec"]["selector"].get("matchLabels",
                                                                         {}).items())
            and all(labels.get(e["key"]) in e["values"]
                    for e in m["spec"]["selector"].get("matchExpressions", []))
            and {e["port"] for e in m["spec"]["podMetricsEndpoints"]} <= ports
            for m in monitors if m["metadata"]["namespace"] == hpa["metadata"]["namespace"])
    # DCGM through the GPU Operator's ServiceMonitor, picked up from every namespace.
    assert files["gpu-operator"]["values"]["dcgmExporter"]["serviceMonitor"]["enabled"]
    assert prom["values"]["prometheus"]["prometheusSpec"][
        "serviceMonitorSelectorNilUsesHelmValues"] is False


# ---------------------------------------------------------------- Volcano and the Training Operator


def test_each_queue_holds_exactly_the_gangs_it_must_run(build):
    """Volcano's proportion plugin admits a PodGroup only within its queue's capability: the
    training queue holds the 4-node job (32 GPUs), serving its 3 whole-node replicas, and the
    acceptance queue the NCCL test over all 8 nodes (64 GPUs; it runs alone, first)."""
    queues = {q["metadata"]["name"]: q["spec"] for q in of_kind(build, "Queue")}
    assert {k: v["capability"] for k, v in queues.items()} == {
        "training": {"nvidia.com/gpu": "32"}, "inference": {"nvidia.com/gpu": "24"},
        "acceptance": {"nvidia.com/gpu": "64"}}
    for job in of_kind(build, "PyTorchJob") + of_kind(build, "MPIJob"):
        assert job["spec"]["runPolicy"]["schedulingPolicy"]["queue"] in queues


def test_volcano_schedules_by_hypernode():
    """Volcano 1.15's network-topology-aware plugin scores pods without a network topology (all
    of ours: the Training Operator's PodGroups carry none) by HyperNode fill, with the keys its
    source reads (hypernode.binpack.normal-pod.enable, hypernode.binpack.resources[.<name>]);
    binpack reads binpack.weight and binpack.resources[.<name>]."""
    values = {r.name: r.values for r in platform.helm_releases(prod())}["volcano"]
    conf = yaml.safe_load(values["custom"]["scheduler_config_override"])
    plugins = {p["name"]: p.get("arguments", {}) for tier in conf["tiers"]
               for p in tier["plugins"]}
    assert {"gang", "network-topology-aware", "predicates", "proportion"} <= set(plugins)
    assert plugins["network-topology-aware"] == {
        "hypernode.binpack.normal-pod.enable": True,
        "hypernode.binpack.resources": "nvidia.com/gpu",
        "hypernode.binpack.resources.nvidia.com/gpu": 10}
    assert plugins["binpack"]["binpack.resources"] == "nvidia.com/gpu"
    assert plugins["binpack"]["binpack.resources.nvidia.com/gpu"] == 10
    assert "enqueue" in conf["actions"] and "allocate" in conf["actions"]


def test_training_operator_is_pinned_and_gang_schedules_through_volcano(build):
    c = prod()
    path = REPO / training_operator.TRAINING_OPERATOR_DIR / "kustomization.yaml"
    text = path.read_text()
    training_operator.check_training_operator_dir(text, c.platform.training_operator.version)
    doc = yaml.safe_load(text)
    # Fetched by the commit the v1.9.4 tag points to, never by the tag (which can be moved):
    # https://proxy.golang.org/github.com/kubeflow/training-operator/@v/v1.9.4.info reports
    # Origin.Ref refs/tags/v1.9.4, Origin.Hash 4445c12aa62e4345b0c2c6ac9b215a70eca46ed7.
    assert c.platform.training_operator.version == "v1.9.4"
    commit = "4445c12aa62e4345b0c2c6ac9b215a70eca46ed7"
    assert doc["resources"] == [
        f"github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref={commit}"]
    assert re.fullmatch(r"[0-9a-f]{40}", doc["resources"][0].rpartition("?ref=")[2])
    assert "# v1.9.4: the commit its tag points to" in text
    assert TRAINING_OPERATOR_COMMITS["v1.9.4"] == commit
    (patch,) = [p for p in doc["patches"] if p["target"]["kind"] == "Deployment"]
    assert patch["target"]["name"] == "training-operator"
    ops = yaml.safe_load(patch["patch"])
    assert ops[0] == {"op": "add", "path": "/spec/template/spec/containers/0/command/-",
                      "value": "--gang-scheduler-name=volcano"}
    # And a node: the upstream Deployment tolerates no taint (placement: test_twin.py), and
    # a system priority (the twin checks the one the API server admits).
    assert {o["path"] for o in ops[1:]} == {"/spec/template/spec/nodeSelector",
                                            "/spec/template/spec/tolerations",
                                            "/spec/template/spec/priorityClassName"}
    # The webhook certificate's Secret, which the operator fills, without kustomize's empty
    # `data` (the provider would replace the Secret on every `pulumi up`).
    (secret,) = [p for p in doc["patches"] if p["target"]["kind"] == "Secret"]
    assert secret["target"]["name"] == "training-operator-webhook-cert"
    assert yaml.safe_load(secret["patch"]) == [{"op": "remove", "path": "/data"}]
    with pytest.raises(ValueError, match="v1.9.3"):
        training_operator.check_training_operator_dir(text, "v1.9.3")
    # The vendored variant: the same patches over the release's manifests in the project.
    vendored = (REPO / training_operator.TRAINING_OPERATOR_VENDORED_DIR
                / "kustomization.yaml").read_text()
    training_operator.check_training_operator_dir(vendored, "v1.9.4", vendored=True)
    assert yaml.safe_load(vendored)["patches"] == doc["patches"]
    assert yaml.safe_load(vendored)["resources"] == [
        "../../vendor/training-operator/manifests/overlays/standalone"]
    # A release without its commit is refused with the fix, never rendered as a tag ref.
    with pytest.raises(ValueError, match=r"v1\.9\.5 .*add \"v1\.9\.5\".*TRAINING_OPERATOR_COMMITS"):
        training_operator.training_operator_kustomization("v1.9.5")
    plan = {r["name"]: r for r in json.loads((build / "plan.json").read_text())["resources"]}
    assert plan["training-operator"]["inputs"]["directory"] \
        == training_operator.TRAINING_OPERATOR_DIR
    # The jobs ask for Volcano, so the operator's PodGroup is what admits them.
    for job in of_kind(build, "PyTorchJob"):
        for rs in job["spec"]["pytorchReplicaSpecs"].values():
            assert rs["template"]["spec"]["schedulerName"] == "volcano"


# ---------------------------------------------------------------- compatibility


@pytest.mark.parametrize(("path", "value", "says"), [
    (("platform", "trainingOperator", "version"), "v2.3.0", "not a Training Operator v1.9.x"),
    (("platform", "trainingOperator", "version"), "v1.9.5",
     'add "v1.9.5": "<commit>" to TRAINING_OPERATOR_COMMITS'),
    (("platform", "cni"), "cilium", "only calico is rendered"),
])
def test_platform_choices_the_stack_cannot_honour_are_config_errors(raw, path, value, says):
    node = raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ConfigError) as info:
        validate_cluster(raw, REPO)
    problems = info.value.problems
    assert [p.path for p in problems] == [".".join(path)]
    assert says in str(info.value)


def test_calico_finds_each_node_on_the_management_network(raw) -> None:
    """GPU nodes carry eight IPoIB rails besides their management port: Calico's default
    first-found autodetection may pick a rail for the VXLAN overlay."""
    calico = next(r for r in platform.helm_releases(prod()) if r.name == "calico")
    detect = calico.values["installation"]["calicoNetwork"]["nodeAddressAutodetectionV4"]
    assert detect == {"cidrs": [raw["network"]["managementCidr"]]}
    assert all(n.management_ip in prod().network.management_cidr for n in prod().nodes)


def test_every_accepted_network_operator_release_renders() -> None:
    """A release the config accepts (compat.NETWORK_OPERATOR_K8S) must render, pinned to its own
    images, never crash the preview for want of an image-table entry."""
    from components.model.compat import NETWORK_OPERATOR_K8S

    for release in NETWORK_OPERATOR_K8S:
        raw = prod_raw()
        raw["platform"]["networkOperator"]["version"] = release
        raw["platform"]["gpuOperator"]["gpudirectRdma"] = False  # 26.4.0 x v26.3.2: no RDMA
        raw["workloads"]["ncclTest"]["gate"] = False
        spec = rdma.nic_cluster_policy(validate_cluster(raw, REPO))["spec"]
        assert spec["rdmaSharedDevicePlugin"]["version"] == f"network-operator-v{release}"


@pytest.mark.slow
def test_a_new_network_operator_release_is_one_table_entry(project: Path) -> None:
    """An operator upgrade to a release the stack has never seen: one entry in the pack's
    release table and the version in the stack file, no code; the preview renders the new
    release's images and the rollout wait, and the pack's version rule accepts it."""
    assert run_offline(project, "preview", "--render").returncode == 0  # the baseline
    data = project / "policies/gpu_guardrails/compat_data.py"
    text = data.read_text()
    # A release the table does not have: the entry's values are this test's, not NVIDIA's.
    entry = ('    "26.10.0": {"kubernetes": (32, 36), "repository": "nvcr.io/nvidia/mellanox",\n'
             '                "docaDriver": "doca3.6.0-26.10-0.1.0.0-0"},\n')
    data.write_text(text.replace('NETWORK_OPERATOR_RELEASES: dict[str, dict] = {\n',
                                 'NETWORK_OPERATOR_RELEASES: dict[str, dict] = {\n' + entry))
    stack = project / "Pulumi.prod.yaml"
    doc = yaml.safe_load(stack.read_text())
    operator = doc["config"]["gpu-cluster:cluster"]["platform"]["networkOperator"]
    operator["version"] = "26.10.0"
    stack.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = run_offline(project, "preview")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    policy = yaml.safe_load((project / "build/prod/manifests/cluster"
                             / "nicclusterpolicy-nic-cluster-policy.yaml").read_text())
    for component in (policy["spec"]["nvIpam"], policy["spec"]["rdmaSharedDevicePlugin"],
                      policy["spec"]["secondaryNetwork"]["multus"]):
        assert (component["repository"], component["version"]) == (
            "nvcr.io/nvidia/mellanox", "network-operator-v26.10.0")
    runbook = (project / "build/prod/runbook.txt").read_text()
    # DOCA-OFED is the hosts' (ofed: host): the operator's node agents roll, nothing drains.
    assert "upgrade network-operator: the chart's pre-upgrade hook applies its new CRDs; " \
        "network-operator 26.4.1 -> 26.10.0: its node agents" in runbook
    assert "so no node is drained" in runbook
    assert "nodes drained: 0" in (project / "build/prod/impact.txt").read_text()


def test_ip_pools_wait_for_the_network_operator(build: Path) -> None:
    """The IPPool CRD is not in the network operator's chart: the operator installs it when it
    reconciles the NicClusterPolicy's nvIpam state (manifests/state-nv-ipam-cni). A pool
    created right after the release is refused ("no matches for kind"), so `pulumi up` creates
    it only after the wait for the operator's rollout."""
    plan = json.loads((build / "plan.json").read_text())
    by_name = {r["name"]: r for r in plan["resources"]}
    rollout = by_name["network-operator-rollout"]
    pools = [r for r in plan["resources"] if r["type"].endswith(":IPPool")]
    assert pools
    for pool in pools:
        assert rollout["urn"] in pool["options"]["dependsOn"], pool["name"]
        assert pool["urn"] not in rollout["options"]["dependsOn"]
