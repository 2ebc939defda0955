"""The real `pulumi up` on the simulated data centre (tests/support/datacentre.py): the engine
`make engine` builds, its Python language host and both providers, over real SSH into every
host's sandbox, real HTTPS into every BMC's Redfish stand-in, and a real API server at the
stack's API endpoint, all on loopback.

It previews the whole stack with the policy pack (`build/e2e/preview.json`), then runs `pulumi
up` of the whole stack, as an operator would: every host's preparation and authorised keys,
every BMC's settings, every switch's configuration, the subnet managers (standby first), the
control plane's `kubeadm init`, and for each GPU node its reboot check, drain, reboot (the host
goes down, refuses logins, boots with the kernel arguments the preparation staged), the check
after the boot, its join token, its join and the wait for its Node, and the Kubernetes upgrade
chain; the Nodes' placement labels, the volumes and their claims, the Helm releases from the
chart archives and every platform object in the API server; the NCCL acceptance job, gang-
scheduled by Volcano and run by the Training Operator, and the gate that checks it, then the
training job and the model server; the twin's checks hold on what the engine applied. A
second preview finds nothing to change (`build/e2e/preview2.json`). Then five day-2 changes go
through the engine, each changing what the offline preview of it lists: a Kubernetes patch
upgrade (control planes first, then one node at a time), a new switch password, a replaced HCA,
an added node and a GPU driver release (each node's planned reboot, one at a time). Last,
`pulumi destroy` is
refused by the protected checkpoint volumes and deletes nothing. What stands in for what runs
in pods on hardware: docs/testing.md."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import secrets
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from support.cluster_api import ASSIGNED, api_server, api_server_configs
from support.datacentre import (
    OUT,
    Datacentre,
    build,
    cli,
    engine_env,
    make_secrets,
    publish,
    replan,
    running,
)
from support.engine import pulumi_bin, unknown_paths
from support.project import run_offline
from support.sandbox import unavailable

from components.planning import host_scripts
from components.planning.acceptance_run import RUN_SUFFIX
from components.planning.labels import UNTESTED_LABEL
from e2e.keys import keygen
from e2e.stack import STACK
from offline.bench_datacentre import by_type, step_durations
from twin import checks
from twin.__main__ import verify
from twin.run import TwinReport, gates, settle, snapshot, wait_for_job

ENGINE = pulumi_bin()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,
    pytest.mark.skipif(ENGINE is None or not all(
        (Path(ENGINE) / f"pulumi-{p}").exists() for p in (
            "language-python", "resource-command", "resource-kubernetes")),
        reason="the engine is not built: run `make engine`"),
    pytest.mark.skipif(unavailable() is not None, reason=str(unavailable())),
    pytest.mark.skipif(os.geteuid() != 0,
                       reason="the simulated hosts listen on port 22 of their addresses"),
]
GPU_NODES = [f"gpu-node-{i:02d}" for i in range(8)]
CONTROL_PLANE = "mgmt-01"  # the first control plane: `kubeadm init`, the stack's kubectl
CONTROL_PLANES = ["mgmt-01", "mgmt-02", "mgmt-03"]


def commands(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in plan["resources"] if r["type"].startswith("command:")]


def remote(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in commands(plan) if r["type"] == "command:remote:Command"]


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Datacentre, dict[str, Any]]]:
    dc = build(tmp_path_factory.mktemp("datacentre"))
    make_secrets(dc)
    # The cluster's API server serves the whole module: what the engine applied stays.
    with api_server(dc) as api:
        yield dc, _first_up(dc) | {"api": api}


def _first_up(dc: Datacentre) -> dict[str, Any]:
    with running(dc):
        env = engine_env(dc) | dc.secrets
        for step in (("pulumi", "stack", "select", "--create", STACK),
                     ("bash", "tools/set-stack-secrets.sh", STACK)):
            done = cli(dc, env, *step)
            assert done.returncode == 0, done.stderr[-3000:]
        # What a reviewer reads first: the whole first preview, with the policy pack.
        preview = cli(dc, env, "pulumi", "preview", "--diff", "--json", "--policy-pack",
                      "policies", "--stack", STACK)
        assert preview.returncode == 0, preview.stdout[-3000:] + preview.stderr[-3000:]
        (dc.work / "preview.json").write_text(preview.stdout)
        # Its engine events for `make bench` (--event-log is a debug command's flag).
        up = cli(dc, env | {"PULUMI_DEBUG_COMMANDS": "true"}, "pulumi", "up", "--yes",
                 "--non-interactive", "--skip-preview", "--stack", STACK,
                 "--event-log", str(dc.events))
        assert up.returncode == 0, up.stdout[-8000:] + up.stderr[-3000:]
        again = cli(dc, env, "pulumi", "preview", "--expect-no-changes", "--diff", "--json",
                    "--stack", STACK)
        assert again.returncode == 0, again.stdout[-6000:] + again.stderr[-3000:]
        (dc.work / "preview2.json").write_text(again.stdout)
        state = cli(dc, env, "pulumi", "stack", "export", "--stack", STACK)
        assert state.returncode == 0, state.stderr
    publish(dc, state.stdout)
    return {"state": json.loads(state.stdout), "preview": json.loads(preview.stdout),
            "preview2": json.loads(again.stdout)}


# The program reads what the stack deployed last from its own outputs
# (components/wiring/deployed.py):
# every engine preview reads it; the offline preview, which judges against the rendering of
# what is deployed, plans no such read.
OWN_OUTPUTS = (f"urn:pulumi:{STACK}::gpu-cluster::pulumi:pulumi:StackReference::"
               f"organization/gpu-cluster/{STACK}")


def test_the_first_preview_is_the_offline_plan(applied) -> None:
    dc, runs = applied
    steps = {s["urn"]: s for s in runs["preview"]["steps"] if s["urn"] != OWN_OUTPUTS}
    offline = {r["urn"]: r for r in dc.plan["resources"]}
    stack = f"urn:pulumi:{STACK}::gpu-cluster::pulumi:pulumi:Stack::gpu-cluster-{STACK}"
    assert set(steps) == set(offline) | {stack}
    assert {s["op"] for s in steps.values()} == {"create"}
    # The stack's reference to its own outputs (what it deployed last): a read, no resource.
    assert [s["op"] for s in runs["preview"]["steps"] if s["urn"] == OWN_OUTPUTS] == ["read"]
    unknown = {(urn, p) for urn, s in steps.items()
               for p in unknown_paths((s.get("newState") or {}).get("inputs") or {}, True)}
    assert unknown == {(r["urn"], p) for r in offline.values()
                       for p in unknown_paths(r["inputs"], False)}
    assert json.loads((OUT / "preview.json").read_text()) == runs["preview"]


def test_every_command_runs_once_over_ssh_on_the_host_it_names(applied) -> None:
    dc, _ = applied
    hosts = [h for h in dc.hosts.values() if h.user == "ubuntu"]
    assert len(hosts) == 13  # mgmt-01 … mgmt-03, sm-01, sm-02 and the 8 GPU nodes
    for h in hosts:
        planned = [r for r in remote(dc.plan)
                   if r["inputs"]["connection"].get("host") == h.address]
        calls = dc.calls(h.name)
        assert len(calls) == len(planned), (h.name, [c["command"][:60] for c in calls])
        # Every one as root through sudo, none through the SSH environment, and each succeeded.
        assert all(c["command"].startswith("sudo ") for c in calls)
        assert all(c["envRefused"] == [] for c in calls)
        assert all(c["exit"] == 0 for c in calls), calls
        # Its preparation and keys: exactly the scripts the plan shows, its secrets filled in.
        sizes = Counter(c["stdinBytes"] for c in calls)
        for name in (f"{h.name}-prepare", f"{h.name}-ssh-keys"):
            (script,) = [r["inputs"]["stdin"] for r in planned if r["name"] == name]
            assert sizes[len(dc.sent(script).encode())] >= 1, name
    # What the preparation did is in each GPU node's own root: its packages, its firewall.
    for h in hosts:
        if h.name in GPU_NODES:
            packages = {p.name for p in (h.sandbox.state / "pkgs").iterdir()}
            assert {"containerd", "kubelet", "kubeadm", "lustre-client-utils"} <= packages
            assert h.sandbox.path(host_scripts.FIREWALL_FILE).is_file()


def _when(stamp: str) -> datetime:
    """hostsim's RFC 3339 times (nanoseconds, Z) to the microsecond."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00")


def _run_of(dc: Datacentre, name: str,
            calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """hostsim's record (among `calls`, by default all) of the command the plan's resource
    `name` sent with a script on stdin: by its host and the exact size of that script."""
    (r,) = [r for r in commands(dc.plan) if r["name"] == name]
    host = next(h for h in dc.hosts.values() if h.address == r["inputs"]["connection"]["host"])
    size = len(dc.sent(r["inputs"]["stdin"]).encode())
    (run,) = [c for c in (dc.calls(host.name) if calls is None else calls)
              if c["host"] == host.name and c["stdinBytes"] == size]
    return run


def _call(dc: Datacentre, host: str, marker: str,
          calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """hostsim's record (among `calls`, by default all) of the one command on `host` whose
    command line holds `marker`."""
    (run,) = [c for c in (dc.calls(host) if calls is None else calls)
              if c["host"] == host and marker in c["command"]]
    return run


def test_the_standby_subnet_manager_is_configured_before_the_master(applied) -> None:
    dc, _ = applied
    # sm-02 is the standby (lower priority): it runs first, so the master never comes up
    # alone with a configuration the standby does not share.
    standby, master = _run_of(dc, "sm-02-opensm"), _run_of(dc, "sm-01-opensm")
    assert _when(standby["end"]) <= _when(master["start"])
    for host in ("sm-01", "sm-02"):
        prepared = _run_of(dc, f"{host}-prepare")
        assert _when(prepared["end"]) <= _when(_run_of(dc, f"{host}-opensm")["start"])


def test_each_gpu_node_is_drained_rebooted_then_joined(applied) -> None:
    dc, _ = applied
    # A stock DGX OS boots without iommu=pt: every node's check finds a reboot needed, and
    # each goes down once, after its drain, and comes up with the argument.
    assert Counter(host for host, _ in dc.boots) == Counter(GPU_NODES)
    booted = dict(dc.boots)
    init = _run_of(dc, f"{CONTROL_PLANE}-kubeadm-init")
    for n in GPU_NODES:
        check, reboot = _run_of(dc, f"{n}-reboot-check"), _run_of(dc, f"{n}-reboot")
        wait = _run_of(dc, f"{n}-reboot-wait")
        drain = _call(dc, CONTROL_PLANE, f"# Drain before the planned reboot of {n} ")
        uncordon = _call(dc, CONTROL_PLANE, f"# Uncordon after the planned reboot of {n} ")
        token = _call(dc, CONTROL_PLANE, f"'gpu-cluster join of {n}'")
        join = _call(dc, n, f"# kubeadm join for {n} ")
        member = _call(dc, CONTROL_PLANE, f" node/{n} ")
        assert drain["command"].endswith(" drain reboot"), drain["command"][-40:]
        order = [("check", _when(check["end"])), ("drain", _when(drain["start"])),
                 ("drained", _when(drain["end"])), ("reboot", _when(reboot["start"])),
                 ("rebooted", _when(reboot["end"])), ("boot", booted[n]),
                 ("wait", _when(wait["start"])), ("waited", _when(wait["end"])),
                 ("join", _when(join["start"])), ("joined", _when(join["end"])),
                 ("member", _when(member["start"]))]
        assert [step for step, _ in sorted(order, key=lambda s: s[1])] == \
            [step for step, _ in order], (n, order)
        assert _when(init["end"]) <= _when(token["start"])
        assert _when(token["end"]) <= _when(join["start"])
        assert _when(wait["end"]) <= _when(uncordon["start"])
        sandbox = dc.hosts[n].sandbox
        assert "iommu=pt" in sandbox.cmdline.read_text().split()


def test_the_joined_nodes_are_the_clusters(applied) -> None:
    dc, _ = applied
    cluster = dc.work / "cluster"
    # The first control plane's own Node (kubeadm init), the other two's and the 8 GPU
    # nodes' (their joins).
    nodes = [*CONTROL_PLANES, *GPU_NODES]
    assert sorted(p.name for p in (cluster / "nodes").iterdir()) == sorted(nodes)
    version = (cluster / "version").read_text().strip()
    assert {(cluster / "kubelet" / n).read_text().strip() for n in nodes} == {f"v{version}"}


def test_the_control_planes_join_one_at_a_time_behind_the_vip(applied) -> None:
    """Stacked etcd grows one member at a time (kubeadm's HA guide): each further control
    plane joins after the one before it has, with the certificate key the first one uploaded
    for it and the same encryption key, and every one runs kube-vip holding the VIP."""
    dc, _ = applied
    vip = urlsplit(dc.api_endpoint).hostname
    init = _run_of(dc, f"{CONTROL_PLANE}-kubeadm-init")
    previous = _when(init["end"])
    key = dc.hosts[CONTROL_PLANE].sandbox.path("/etc/kubernetes/encryption-config.yaml")
    # Each upload replaces the one kubeadm-certs Secret under a fresh key: a join's key must
    # be the latest, so each upload comes after the join before it.
    uploads = sorted((c for c in dc.calls(CONTROL_PLANE)
                      if "kubeadm init phase upload-certs --upload-certs" in c["command"]),
                     key=lambda c: _when(c["start"]))
    assert len(uploads) == len(CONTROL_PLANES) - 1
    for host, uploaded in zip(CONTROL_PLANES[1:], uploads, strict=True):
        join = _call(dc, host, f"# kubeadm join (control plane) for {host} ")
        assert join["exit"] == 0 and previous <= _when(uploaded["start"]), (host, join)
        assert _when(uploaded["end"]) <= _when(join["start"])
        previous = _when(join["end"])
        sandbox = dc.hosts[host].sandbox
        # Byte for byte (the engine hands the join the file without its last newline).
        assert sandbox.path("/etc/kubernetes/encryption-config.yaml").read_bytes() == \
            key.read_bytes()
    for host in CONTROL_PLANES:
        pod = yaml.safe_load(dc.hosts[host].sandbox.path(
            "/etc/kubernetes/manifests/kube-vip.yaml").read_text())
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["address"] == vip and env["cp_enable"] == "true", host
    # Everyone reaches the API at the VIP: the stack's kubeconfig and every GPU node's join.
    assert dc.api_endpoint == f"https://{vip}:6443"


def test_every_switch_gets_its_configuration_through_its_cli(applied) -> None:
    dc, _ = applied
    switches = [h for h in dc.hosts.values() if h.user == "admin"]
    assert len(switches) == 6
    for h in switches:
        (config,) = [r["inputs"]["stdin"] for r in dc.plan["resources"]
                     if r["name"] == f"{h.name}-config"]
        sessions = sorted((h.sandbox.state / "cli").iterdir())
        assert [s.read_text() for s in sessions] == [config]
        assert [c["command"] for c in dc.calls(h.name)] == ["cli"]


def test_every_bmc_gets_its_redfish_settings_with_the_admin_password(applied) -> None:
    dc, _ = applied
    requests = [json.loads(x) for x in dc.redfish_log.read_text().splitlines()]
    assert sorted(r["bmc"] for r in requests) == sorted(dc.bmcs)
    for r in requests:
        assert (r["method"], r["path"], r["authorised"]) == (
            "PATCH", "/redfish/v1/Systems/1", True)
        assert r["body"] == {"PowerRestorePolicy": "LastState"}


def test_the_volumes_and_node_labels_are_in_the_api_server(applied) -> None:
    dc, runs = applied
    api = runs["api"]
    # The placement labels each GPU node's NodePatch sets, on the Node its join registered.
    for r in dc.plan["resources"]:
        if r["type"] == "kubernetes:core/v1:NodePatch":
            name = r["inputs"]["metadata"]["name"]
            labels = api.get("node", name)["metadata"]["labels"]
            assert r["inputs"]["metadata"]["labels"].items() <= labels.items(), name
    # Every volume the storage layer plans, each claim bound to its volume (the real PV
    # controller), the checkpoints' among them.
    planned = {r["inputs"]["metadata"]["name"] for r in dc.plan["resources"]
               if r["type"] == "kubernetes:core/v1:PersistentVolume"}
    volumes = {v["metadata"]["name"]: v for v in api.get("pv")["items"]}
    assert set(volumes) == planned
    claims = api.get("pvc", "-A")["items"]
    assert {c["status"]["phase"] for c in claims} == {"Bound"}
    assert {c["spec"]["volumeName"] for c in claims} == planned
    assert any("checkpoint" in name for name in planned)
    # The Lustre CSI node plugin runs on the GPU nodes, where the volumes are mounted, and on
    # nothing else (its selector is the role the NodePatches set).
    pods = api.get("pods", "-n", "lustre-csi-system")["items"]
    assert sorted(pod["spec"]["nodeName"] for pod in pods) == GPU_NODES
    assert {pod["status"]["phase"] for pod in pods} == {"Running"}


def _objects(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The Kubernetes objects the stack creates whole (not patches, releases or providers),
    as `kubectl get -f` reads them: kind, API version, name and namespace."""
    out = []
    for r in plan["resources"]:
        manifest = r["inputs"]
        if not r["type"].startswith("kubernetes:") or r["type"].endswith("Patch") \
                or "kind" not in manifest or r["type"] == RELEASE:
            continue
        meta = {k: v for k, v in manifest["metadata"].items() if k in ("name", "namespace")}
        out.append({"apiVersion": manifest["apiVersion"], "kind": manifest["kind"],
                    "metadata": meta})
    return out


RELEASE = "kubernetes:helm.sh/v3:Release"


def test_every_kubernetes_object_of_the_plan_is_in_the_api_server(applied) -> None:
    dc, runs = applied
    planned = _objects(dc.plan)
    assert {o["kind"] for o in planned} >= {"Namespace", "NicClusterPolicy",
                                            "IPPool", "IPAddressPool", "ClusterIssuer",
                                            "PersistentVolumeClaim", "PriorityClass"}
    found = runs["api"].kubectl("get", "-f", "-", "-o", "json", check=False,
                                stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                  "items": planned}))
    assert found.returncode == 0, found.stderr[-3000:]
    got = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
           for o in json.loads(found.stdout)["items"]}
    assert got == {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
                   for o in planned}


def _helm_release(api: Any, name: str, namespace: str) -> dict[str, Any]:
    """What Helm recorded of a release's newest revision (its Secret: base64 of gzipped JSON)."""
    secrets_ = api.get("secrets", "-n", namespace, "-l", f"owner=helm,name={name}")["items"]
    newest = max(secrets_, key=lambda s: int(s["metadata"]["labels"]["version"]))
    data = base64.b64decode(base64.b64decode(newest["data"]["release"]))
    return json.loads(gzip.decompress(data)) | {"status": newest["metadata"]["labels"]["status"]}


def test_every_chart_runs_at_its_pinned_version_with_the_stacks_values(applied) -> None:
    dc, runs = applied
    releases = [r["inputs"] for r in dc.plan["resources"] if r["type"] == RELEASE]
    assert len(releases) == 9
    for r in releases:
        helm = _helm_release(runs["api"], r["name"], r["namespace"])
        assert helm["status"] == "deployed", r["name"]
        # The archive under ../shared/upstream/charts, packaged from the chart's tag.
        assert helm["chart"]["metadata"]["version"] == r["version"], r["name"]
        assert helm["config"] == r["values"], r["name"]
    # Every pod the charts made, placed by the real scheduler with the stack's placement
    # values (control-plane selectors and tolerations, node agents on the nodes they need).
    pods = runs["api"].get("pods", "-A")["items"]
    unplaced = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods
                if not p["spec"].get("nodeName")]
    assert pods and not unplaced, unplaced


def test_the_charts_webhooks_admit_the_stacks_objects(applied) -> None:
    dc, _ = applied
    # What a validating webhook of the chart that owns the kind is asked on hardware (each
    # chart's webhook configuration names its Service): here the admission stand-in answers.
    reviews = {(r["service"], r["kind"], r["name"]) for r in map(
        json.loads, dc.admission_log.read_text().splitlines()) if r["operation"] == "CREATE"}
    owners = {"metallb.io": "metallb-webhook-service.metallb-system.svc:443",
              "cert-manager.io": "cert-manager-webhook.cert-manager.svc:443"}
    checked = [(owners[o["apiVersion"].split("/")[0]], o["kind"], o["metadata"]["name"])
               for o in _objects(dc.plan) if o["apiVersion"].split("/")[0] in owners]
    assert checked and set(checked) <= reviews


def test_ip_pools_are_created_once_the_network_operator_is_ready(applied) -> None:
    dc, runs = applied
    # The operator installs the IPPool CRD as it reconciles the NicClusterPolicy (nv-ipam
    # state): the stack creates its pools after its wait for the operator's rollout.
    wait = _call(dc, CONTROL_PLANE, "wait nicclusterpolicies.mellanox.com/nic-cluster-policy")
    for pool in runs["api"].get("ippools.nv-ipam.nvidia.com", "-A")["items"]:
        created = datetime.fromisoformat(pool["metadata"]["creationTimestamp"])
        assert _when(wait["end"]).replace(microsecond=0) <= created, pool["metadata"]["name"]


def _volcano_placed(api: Any, namespace: str, prefix: str) -> dict[str, str]:
    """Pod → node of every pod named `prefix`… that Volcano's scheduler bound (its events)."""
    events = api.get("events", "-n", namespace, "--field-selector", "reason=Scheduled")["items"]
    out = {}
    for e in sorted(events, key=lambda e: e.get("eventTime") or e.get("lastTimestamp") or ""):
        pod = e["involvedObject"]["name"]
        source = e.get("reportingComponent") or e.get("source", {}).get("component")
        if pod.startswith(prefix) and source == "volcano" and (
                m := ASSIGNED.search(e.get("message", ""))):
            out[pod] = m.group(1)
    return out


def test_the_acceptance_gate_passes_on_the_fabric_test_it_waited_for(applied) -> None:
    dc, runs = applied
    api = runs["api"]
    # The stack's MPIJob is the test's definition, suspended: the Training Operator runs none
    # of it. The gate ran a copy of it on every GPU node of the new cluster.
    template = api.get("mpijob", NCCL_TEST, "-n", TRAINING)
    assert "Suspended" in {c["type"] for c in template["status"]["conditions"]
                           if c["status"] == "True"}
    job = api.get("mpijob", f"{NCCL_TEST}{RUN_SUFFIX}", "-n", TRAINING)
    done = [c for c in job["status"]["conditions"] if c["status"] == "True"]
    assert "Succeeded" in {c["type"] for c in done}, done
    # Its 8 workers, one per GPU node, gang-scheduled by Volcano (the Training Operator's
    # PodGroup), with the launcher after them; then no node is left untested.
    workers = _volcano_placed(api, TRAINING, f"{NCCL_TEST}{RUN_SUFFIX}-worker-")
    assert sorted(workers.values()) == GPU_NODES, workers
    assert not [n["metadata"]["name"] for n in api.get("nodes")["items"]
                if UNTESTED_LABEL in n["metadata"]["labels"]]
    # The gate ran on the control plane once the job existed, read the launcher's log (a
    # healthy run of the job's size stands in for mpirun's output) and passed.
    gate = _run_of(dc, f"{NCCL_TEST}-acceptance")
    assert gate["exit"] == 0
    assert _when(gate["start"]).replace(microsecond=0) >= datetime.fromisoformat(
        template["metadata"]["creationTimestamp"])
    assert datetime.fromisoformat(job["metadata"]["creationTimestamp"]) <= _when(
        gate["end"])


def test_training_and_serving_start_after_the_gate_on_the_gpu_nodes(applied) -> None:
    dc, runs = applied
    api = runs["api"]
    passed = _when(_run_of(dc, f"{NCCL_TEST}-acceptance")["end"]).replace(microsecond=0)
    training = api.get("pytorchjobs.kubeflow.org", "-n", TRAINING)["items"]
    serving = api.get("deployments", "-n", INFERENCE)["items"]
    assert training and serving
    for obj in [*training, *serving]:
        assert datetime.fromisoformat(obj["metadata"]["creationTimestamp"]) >= passed
    # The training job's workers as one gang, each on a GPU node of its own; the model
    # server's replicas on GPU nodes too.
    for job in training:
        name = job["metadata"]["name"]
        workers = _volcano_placed(api, TRAINING, f"{name}-worker-")
        assert len(workers) == job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
        assert len(set(workers.values())) == len(workers) and set(workers.values()) <= set(
            GPU_NODES)
    pods = api.get("pods", "-n", INFERENCE)["items"]
    replicas = sum(d["spec"]["replicas"] for d in serving)
    assert len(pods) == replicas
    assert {p["spec"]["nodeName"] for p in pods} <= set(GPU_NODES)


def test_the_inference_api_key_is_made_in_the_cluster_and_kept_nowhere_else(applied) -> None:
    dc, runs = applied
    (setup,) = [r for r in dc.plan["resources"] if r["name"].endswith("-setup")]
    name = re.search(r"^SECRET=(\S+)$", setup["inputs"]["stdin"], re.M)
    assert name
    secret = runs["api"].get("secret", name.group(1), "-n", INFERENCE)
    key = base64.b64decode(secret["data"]["api-key"]).decode().strip()
    assert len(key) == 64  # openssl rand -hex 32, on the control plane
    assert key not in json.dumps(runs["state"])
    assert not [p for p in OUT.rglob("*") if p.is_file() and key in p.read_text()]


def test_the_api_server_runs_with_the_configuration_the_engine_wrote(applied) -> None:
    """What the API server admits and authenticates by are the files `kubeadm init` was given
    on the control plane: the ones the API server of the data centre runs with."""
    dc, _ = applied
    etc = dc.hosts[CONTROL_PLANE].sandbox.root / "etc/kubernetes"
    for rendered in api_server_configs(dc):
        assert (etc / rendered.name).read_bytes() == rendered.read_bytes(), rendered.name
    assert "PodSecurity" in api_server_configs(dc)[0].read_text()


def test_the_twins_checks_hold_on_what_the_engine_applied(applied) -> None:
    """The checks `make twin` runs on objects it applies itself, on what `pulumi up` applied:
    every pod bound and admitted by Pod Security, every PodGroup running, training on whole
    nodes of one scalable unit, the gate alone on the fabric, node agents on every node,
    system pods outranking workloads, the admission policy and anonymous access as the stack
    states them. (Draining for the budget is left to the twin: it would evict what the day-2
    changes below start from.)"""
    dc, first = applied
    api = first["api"]
    report = TwinReport()
    plan_gates = gates(dc.plan)
    assert plan_gates
    # The gate ran a copy of the stack's (suspended) job: that run is what must have finished.
    runs = [(kind, ns, name + RUN_SUFFIX) for kind, ns, name in (g.job for g in plan_gates)]
    for g, run in zip(plan_gates, runs, strict=True):
        report.gates[g.name] = wait_for_job(api, run, timeout=60)
    verify(dc.cluster, snapshot(api, settle(api, report)), runs, report)
    report.failures += checks.pod_admission(api, dc.cluster, report.seen)
    report.failures += checks.anonymous_access(api, report.seen)
    assert not report.failures, "\n".join(report.failures)
    assert report.ok, (report.unscheduled, report.rejected)


NCCL_TEST, TRAINING, INFERENCE = "nccl-allreduce", "training", "inference"


def test_a_second_preview_finds_nothing_to_change(applied) -> None:
    dc, runs = applied
    summary = runs["preview2"]["changeSummary"]
    assert summary == {"same": summary["same"], "read": 1}, summary  # the read: OWN_OUTPUTS
    assert json.loads((OUT / "preview2.json").read_text()) == runs["preview2"]


def test_the_engines_preview_fails_on_a_change_pulumi_up_must_not_make(applied) -> None:
    """A Kubernetes downgrade, judged by the program against what the stack deployed (its own
    outputs, read back): `pulumi preview` fails with the refusal and no traceback, as the
    offline preview does (exit 4); the stack file is put back and nothing changed."""
    dc, _ = applied
    render = run_offline(dc.project, "preview", "--stack", STACK, "--render", "--quiet")
    assert render.returncode == 0, render.stdout[-3000:] + render.stderr[-3000:]
    stack_file = dc.project / f"Pulumi.{STACK}.yaml"
    before = stack_file.read_text()
    doc = yaml.safe_load(before)
    cluster = doc["config"]["gpu-cluster:cluster"]
    major, minor, _patch = cluster["kubernetes"]["version"].split(".")
    cluster["kubernetes"]["version"] = f"{major}.{int(minor) - 1}.0"
    stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        offline = run_offline(dc.project, "preview", "--stack", STACK, "--quiet")
        with running(dc):
            preview = cli(dc, engine_env(dc) | dc.secrets, "pulumi", "preview",
                          "--non-interactive", "--stack", STACK)
    finally:
        stack_file.write_text(before)
    assert offline.returncode == 4, offline.stdout[-2000:] + offline.stderr[-2000:]
    out = preview.stdout + preview.stderr
    assert preview.returncode != 0, out[-3000:]
    assert "refused against what is deployed" in out, out[-3000:]
    assert "kubeadm upgrades one minor version at a time and never back" in out
    assert "Traceback" not in out, out[-3000:]


def test_the_state_is_the_real_engines_with_every_secret_encrypted(applied) -> None:
    dc, runs = applied
    deployment = runs["state"]["deployment"]
    urns = {r["urn"] for r in deployment["resources"]}
    assert {r["urn"] for r in commands(dc.plan)} <= urns
    # The providers that ran are the releases the SDK asks for.
    providers = {r["urn"].rsplit("::", 1)[1]: r["inputs"].get("version")
                 for r in deployment["resources"]
                 if r["type"] in ("pulumi:providers:command", "pulumi:providers:kubernetes")}
    assert providers == {"default_1_2_1": "1.2.1", "kubernetes": "4.25.0"}, providers
    assert deployment["manifest"]["version"].startswith("v3.274.1"), deployment["manifest"]
    text = json.dumps(runs["state"])
    for value in (*dc.secrets.values(), dc.stack_token):
        assert value.strip() not in text


def test_the_bench_finds_every_step_of_the_up_in_the_engines_events(applied) -> None:
    dc, _ = applied
    # What `make bench` reports of the up (offline/bench_datacentre.py), from its event log.
    events = [json.loads(x) for x in dc.events.read_text().splitlines()]
    rows = {r["type"]: r for r in by_type(step_durations(events))}
    assert rows[RELEASE]["steps"] == 9
    assert rows["command:remote:Command"]["steps"] == len(remote(dc.plan))
    assert not any(kind.startswith("gpucluster:") for kind in rows)


def test_build_e2e_holds_the_state_and_every_command_in_order(applied) -> None:
    dc, runs = applied
    assert json.loads((OUT / "state.json").read_text()) == runs["state"]
    calls = [json.loads(x) for x in (OUT / "calls.log").read_text().splitlines()]
    # Every command hostsim ran, each once, numbered in the order it started.
    assert len(calls) == sum(len(dc.calls(h)) for h in dc.hosts) == len(remote(dc.plan))
    assert len({c["seq"] for c in calls}) == len(calls)
    assert {p.stem for p in (OUT / "hosts").iterdir()} == set(dc.hosts)
    text = "".join(p.read_text() for p in OUT.rglob("*") if p.is_file())
    for value in (*dc.secrets.values(), dc.stack_token):
        assert value.strip() not in text


# ----------------------------------------------------------------- day 2


def day2(dc: Datacentre, change: str, edit: Callable[[dict[str, Any]], None] | None = None,
         new_secrets: dict[str, str] | None = None,
         inventory: Callable[[str], str] | None = None, up_fails: bool = False
         ) -> dict[str, Any]:
    """A change of the stack file (`edit` of its cluster config), of its secrets or of the
    inventory (`inventory`: its new text from the old) through the engine: the offline
    preview of it against the rendering of what is deployed, the engine's preview
    (`build/e2e/preview-<change>.json`), `pulumi up`, and a preview after it that must find
    nothing to change (unless the `up` is known to fail: `up_fails`, its output returned)."""
    before = len(dc.calls_in_order())
    render = run_offline(dc.project, "preview", "--stack", STACK, "--render", "--quiet")
    assert render.returncode == 0, render.stdout[-3000:] + render.stderr[-3000:]
    stack_file = dc.project / f"Pulumi.{STACK}.yaml"
    doc = yaml.safe_load(stack_file.read_text())
    cluster = doc["config"]["gpu-cluster:cluster"]
    if edit is not None:
        edit(cluster)
        stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    if inventory is not None:
        rows = dc.project / cluster["inventoryFile"]
        rows.write_text(inventory(rows.read_text()))
    offline = run_offline(dc.project, "preview", "--stack", STACK)
    assert offline.returncode == 0, offline.stdout[-3000:] + offline.stderr[-3000:]
    changes = json.loads((dc.project / "build" / STACK / "diff.json").read_text())
    replan(dc)  # the guard on the new plan, and a root for each host it adds
    dc.secrets |= new_secrets or {}
    with running(dc):
        env = engine_env(dc) | dc.secrets
        if new_secrets:
            done = cli(dc, env, "bash", "tools/set-stack-secrets.sh", STACK)
            assert done.returncode == 0, done.stderr[-3000:]
        preview = cli(dc, env, "pulumi", "preview", "--diff", "--json", "--stack", STACK)
        assert preview.returncode == 0, preview.stdout[-3000:] + preview.stderr[-3000:]
        (dc.work / f"preview-{change}.json").write_text(preview.stdout)
        up = cli(dc, env, "pulumi", "up", "--yes", "--non-interactive", "--skip-preview",
                 "--stack", STACK)
        # Whole, beside the hosts' logs: a failed step's diagnostics can sit anywhere in it.
        (dc.work / f"up-{change}.log").write_text(up.stdout + up.stderr)
        assert (up.returncode != 0) == up_fails, up.stdout[-8000:] + up.stderr[-3000:]
        if not up_fails:
            again = cli(dc, env, "pulumi", "preview", "--expect-no-changes", "--json",
                        "--stack", STACK)
            assert again.returncode == 0, again.stdout[-6000:] + again.stderr[-3000:]
        state = cli(dc, env, "pulumi", "stack", "export", "--stack", STACK)
        assert state.returncode == 0, state.stderr
    publish(dc, state.stdout)
    engine = {s["urn"]: s["op"] for s in json.loads(preview.stdout)["steps"]
              if s["op"] != "same" and s["urn"] != OWN_OUTPUTS}
    # The offline preview's changes to what the engine was asked to change.
    return {"offline": {c["urn"]: c["action"] for c in changes},
            "engine": engine, "up": up.stdout + up.stderr,
            "calls": dc.calls_in_order()[before:], "state": json.loads(state.stdout)}


def _next_patch(version: str) -> str:
    major, minor, patch = version.split(".")
    return f"{major}.{minor}.{int(patch) + 1}"


@pytest.fixture(scope="module")
def upgraded(applied) -> tuple[Datacentre, dict[str, Any]]:
    """Kubernetes one patch release up."""
    dc, _ = applied
    versions: dict[str, str] = {}

    def edit(cluster: dict[str, Any]) -> None:
        versions["old"] = cluster["kubernetes"]["version"]
        versions["new"] = cluster["kubernetes"]["version"] = _next_patch(versions["old"])

    return dc, day2(dc, "upgrade", edit) | versions


def test_an_upgrade_changes_what_the_offline_preview_said(upgraded) -> None:
    dc, run = upgraded
    engine = run["engine"]
    assert engine == run["offline"]
    # What they are: each host's preparation (the package version it would install on a new
    # host), the control plane's configuration and every step of the upgrade chain.
    names = {urn.rsplit("::", 1)[1] for urn in engine}
    assert {f"{n}-{step}" for n in GPU_NODES
            for step in ("kubernetes-upgrade", "upgrade-drain", "upgrade-uncordon")} <= names
    assert f"{CONTROL_PLANE}-kubernetes-upgrade" in names
    assert set(engine.values()) == {"update"}


def test_an_upgrade_runs_the_control_plane_first_then_one_node_at_a_time(upgraded) -> None:
    dc, run = upgraded
    calls = run["calls"]
    # The scripts as the plan now has them, at the new release.
    control_plane = _run_of(dc, f"{CONTROL_PLANE}-kubernetes-upgrade", calls)
    previous = _when(control_plane["end"])
    for n in GPU_NODES:
        drain = _call(dc, CONTROL_PLANE, f"# Drain of {n} for the Kubernetes upgrade ", calls)
        upgrade = _run_of(dc, f"{n}-kubernetes-upgrade", calls)
        uncordon = _call(dc, CONTROL_PLANE, f"# Uncordon of {n} after the Kubernetes upgrade ",
                         calls)
        steps = [previous, _when(drain["start"]), _when(drain["end"]),
                 _when(upgrade["start"]), _when(upgrade["end"]), _when(uncordon["start"])]
        assert steps == sorted(steps), n
        previous = _when(uncordon["end"])
    assert all(c["exit"] == 0 for c in calls)


def test_after_the_upgrade_every_kubelet_and_the_api_server_run_the_new_release(
        upgraded) -> None:
    dc, run = upgraded
    cluster = dc.work / "cluster"
    assert (cluster / "version").read_text().strip() == run["new"]
    nodes = [CONTROL_PLANE, *GPU_NODES]
    assert {n: (cluster / "kubelet" / n).read_text().strip() for n in nodes} == {
        n: f"v{run['new']}" for n in nodes}
    # Each GPU node was drained for it and uncordoned after (the kubectl stub's record).
    for n in GPU_NODES:
        assert (cluster / "nodes" / n).read_text().split()[-2:] == ["drain", "uncordon"]


# ----------------------------------------------------------------- day 2: a switch password


@pytest.fixture(scope="module")
def rotated(upgraded) -> tuple[Datacentre, dict[str, Any]]:
    """A new switch password, set on every switch first (hostsim serves it), then in the
    stack: the secret with its version bumped (docs/day2.md)."""
    dc, _ = upgraded
    new = {"GPU_CLUSTER_SWITCH_PASSWORD": secrets.token_urlsafe(16)}

    def edit(cluster: dict[str, Any]) -> None:
        cluster["credentials"]["switchPasswordVersion"] += 1

    return dc, day2(dc, "switch-password", edit, new)


def test_a_new_switch_password_reconfigures_every_switch_with_it(rotated) -> None:
    dc, run = rotated
    assert run["engine"] == run["offline"]
    # Exactly the switches' commands, each logging in with the new password (hostsim knows
    # no other now) and sending the same configuration again.
    switches = [h for h in dc.hosts.values() if h.user == "admin"]
    assert {urn.rsplit("::", 1)[1] for urn in run["engine"]} == {
        f"{h.name}-config" for h in switches}
    assert sorted(c["host"] for c in run["calls"]) == sorted(h.name for h in switches)
    assert all(c["exit"] == 0 for c in run["calls"])
    for h in switches:
        first, second = sorted((h.sandbox.state / "cli").iterdir())
        assert first.read_text() == second.read_text()
    assert dc.secrets["GPU_CLUSTER_SWITCH_PASSWORD"] not in json.dumps(run["state"])


# ----------------------------------------------------------------- day 2: a replaced HCA


NEW_GUID = "0xb83fd20300a4ffee"  # the replacement HCA's port GUID (NVIDIA's OUI, as its own)


@pytest.fixture(scope="module")
def hca_replaced(rotated) -> tuple[Datacentre, dict[str, Any]]:
    """gpu-node-03's rail-2 HCA replaced: the inventory row with the new card's port GUID."""
    dc, _ = rotated
    old: list[str] = []

    def swap(text: str) -> str:
        lines = text.splitlines(keepends=True)
        (i,) = [i for i, row in enumerate(lines) if row.startswith("gpu-node-03,2,")]
        cells = lines[i].split(",")
        old.append(cells[3])
        lines[i] = ",".join([*cells[:3], NEW_GUID, *cells[4:]])
        return "".join(lines)

    return dc, day2(dc, "hca", inventory=swap) | {"old_guid": old[0]}


def test_a_replaced_hca_changes_only_the_subnet_managers_standby_first(hca_replaced) -> None:
    dc, run = hca_replaced
    assert run["engine"] == run["offline"]
    # The subnet managers' files, and the GUIDs the fabric publishes (a component: nothing runs).
    assert {urn.rsplit("::", 1)[1] for urn in run["engine"]} == {"sm-01-opensm", "sm-02-opensm",
                                                                 "fabric"}
    calls = run["calls"]
    assert [c["host"] for c in sorted(calls, key=lambda c: _when(c["start"]))] == [
        "sm-02", "sm-01"]
    standby, master = sorted(calls, key=lambda c: _when(c["start"]))
    assert _when(standby["end"]) <= _when(master["start"])
    assert all(c["exit"] == 0 for c in calls)
    # Both subnet managers now know the new port GUID, and neither the old one.
    for sm in ("sm-01", "sm-02"):
        text = "".join(p.read_text(errors="replace") for p in
                       (dc.hosts[sm].sandbox.root / "etc/opensm").rglob("*") if p.is_file())
        assert NEW_GUID in text and run["old_guid"] not in text, sm


# ----------------------------------------------------------------- day 2: a node added


NEW_NODE = "gpu-node-08"


@pytest.fixture(scope="module")
def node_added(hca_replaced) -> tuple[Datacentre, dict[str, Any]]:
    """A ninth GPU node in a third rack, as docs/day2.md adds one: the range one longer and
    the new board's inventory rows (its port GUIDs, MAC and the host key its sshd serves)."""
    dc, _ = hca_replaced
    host_key = " ".join(keygen(dc.work / "keys" / "hosts" / NEW_NODE, NEW_NODE).split()[:2])
    boots = len(dc.boots)

    def grow(cluster: dict[str, Any]) -> None:
        (nodes,) = cluster["gpuNodes"]["ranges"]
        nodes["count"] += 1
        nodes["racks"].append("r03")

    def rows(text: str) -> str:
        last = [row.split(",") for row in text.splitlines() if row.startswith("gpu-node-07,")]
        return text + "".join(",".join([NEW_NODE, rail, hca, guid.replace("a83c", "a93c"),
                                        mac.replace(":07:", ":08:"), host_key]) + "\n"
                              for _, rail, hca, guid, mac, _key in last)

    return dc, day2(dc, "add-node", grow, inventory=rows) | {"boots": boots}


def test_an_added_node_is_built_and_joined_and_no_other_node_is_touched(applied,
                                                                      node_added) -> None:
    dc, run = node_added
    assert run["engine"] == run["offline"]
    calls = run["calls"]
    assert all(c["exit"] == 0 for c in calls)
    # The new node: prepared, keyed, checked, rebooted once into its kernel arguments, joined;
    # its BMC configured; its Node in the cluster.
    assert [host for host, _ in dc.boots[run["boots"]:]] == [NEW_NODE]
    assert "iommu=pt" in dc.hosts[NEW_NODE].sandbox.cmdline.read_text().split()
    assert (dc.work / "cluster" / "nodes" / NEW_NODE).exists()
    assert len([c for c in calls if c["host"] == NEW_NODE]) == len(
        [r for r in remote(dc.plan)
         if r["inputs"]["connection"]["host"] == dc.hosts[NEW_NODE].address])
    requests = [json.loads(x) for x in dc.redfish_log.read_text().splitlines()]
    assert NEW_NODE in {r["bmc"] for r in requests}
    # No other node drained, rebooted or run anything: only the first control plane (the new
    # node's token, drain check, wait), the other control planes' approver of kubelet serving
    # certificates (it vouches for the inventory's addresses, the new node's now among them),
    # the leaves its cables land on and the subnet managers.
    assert {c["host"] for c in calls} - {NEW_NODE, *CONTROL_PLANES} == {
        "sm-01", "sm-02", *(urn.rsplit("::", 1)[1].removesuffix("-config")
                            for urn in run["engine"] if urn.endswith("-config"))}
    for host in CONTROL_PLANES[1:]:
        assert [c for c in calls if c["host"] == host] == [_run_of(dc, f"{host}-identities",
                                                                   calls)]
    assert not [c for c in calls if c["host"] == CONTROL_PLANE
                and any(f"of {n} " in c["command"] for n in GPU_NODES)]
    # The acceptance test's definition (suspended, sized by the node count) is replaced and
    # its gate runs again (below).
    job = [urn for urn, op in run["engine"].items() if ":MPIJob::" in urn]
    assert [run["engine"][urn] for urn in job] == ["replace"]


def test_an_added_node_passes_the_fabric_acceptance_test(applied, node_added) -> None:
    """On the busy cluster (the training job and the model server keep their nodes), the gate
    runs the test on the new node and one node of its SU that passed before and had its GPUs
    free, not on every node; then the new node is open to work."""
    dc, run = node_added
    api = applied[1]["api"]
    gate = _run_of(dc, f"{NCCL_TEST}-acceptance", run["calls"])
    assert gate["exit"] == 0, run["up"][-3000:]
    job = api.get("mpijob", f"{NCCL_TEST}{RUN_SUFFIX}", "-n", TRAINING)
    (terms,) = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"][
        "nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    hosts = terms["matchExpressions"][0]["values"]
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    (peer,) = set(hosts) - {NEW_NODE}
    assert NEW_NODE in hosts and peer in GPU_NODES, hosts
    busy = {p["spec"]["nodeName"] for p in api.get("pods", "--all-namespaces")["items"]
            if p["metadata"]["namespace"] in (TRAINING, INFERENCE)
            and p["status"].get("phase") == "Running"
            and not p["metadata"]["name"].startswith(NCCL_TEST)}
    assert busy and peer not in busy, (peer, busy)
    workers = _volcano_placed(api, TRAINING, f"{NCCL_TEST}{RUN_SUFFIX}-worker-")
    assert {workers[f"{NCCL_TEST}{RUN_SUFFIX}-worker-{i}"] for i in range(2)} == set(hosts)
    labels = api.get("node", NEW_NODE)["metadata"]["labels"]
    assert UNTESTED_LABEL not in labels, labels


# ----------------------------------------------------------------- day 2: the GPU driver


NEW_DRIVER = "580.105.08"  # the R580 production branch's next release after 580.95.05
REBOOT_CHAIN = ("reboot-check", "reboot-drain", "reboot", "reboot-wait", "reboot-uncordon")


@pytest.fixture(scope="module")
def driver_bumped(node_added) -> tuple[Datacentre, dict[str, Any]]:
    """The GPU driver one release up. The hosts own it (DGX OS ships one): a new release of
    each GPU node's planned reboot, not of the GPU Operator's values."""
    dc, _ = node_added
    boots = len(dc.boots)

    def edit(cluster: dict[str, Any]) -> None:
        cluster["platform"]["gpuOperator"]["driverVersion"] = NEW_DRIVER

    return dc, day2(dc, "driver", edit) | {"boots": boots}


def test_a_driver_release_takes_each_gpu_node_through_its_planned_reboot(driver_bumped) -> None:
    dc, run = driver_bumped
    nodes = [*GPU_NODES, NEW_NODE]
    assert run["engine"] == run["offline"]
    # Only the GPU nodes' reboot chains, re-created by their boot fingerprint, and the kubeadm
    # cluster's published facts (the hosts' driver release: a component, nothing runs); the
    # GPU Operator's release is untouched (its driver container is off).
    assert {urn.rsplit("::", 1)[1]: op for urn, op in run["engine"].items()} == {
        "kubernetes": "update",
        **{f"{n}-{step}": "replace" for n in nodes for step in REBOOT_CHAIN}}
    calls = run["calls"]
    assert all(c["exit"] == 0 for c in calls), [c for c in calls if c["exit"]]
    # Each node booted once, into the new module, its fabric manager running, the packages
    # of the new release installed and held.
    assert sorted(host for host, _ in dc.boots[run["boots"]:]) == sorted(nodes)
    for n in nodes:
        sb = dc.hosts[n].sandbox
        assert sb.path("/sys/module/nvidia/version").read_text().strip() == NEW_DRIVER
        assert (sb.state / "pkgs/nvidia-driver-580-server-open").read_text().strip() == \
            f"{NEW_DRIVER}-*"
        assert (sb.state / "held/nvidia-fabricmanager-580").exists()
        assert (sb.state / "units/nvidia-fabricmanager.active").exists()
    # One member at a time, each drained before its install: a node's drain ends (it holds
    # the lock) only after the one before it began its uncordon (which releases the lock).
    spans = []
    for n in nodes:
        drain = _call(dc, CONTROL_PLANE, f"# Drain before the planned reboot of {n} ", calls)
        uncordon = _call(dc, CONTROL_PLANE, f"# Uncordon after the planned reboot of {n} ",
                         calls)
        reboot = _run_of(dc, f"{n}-reboot", calls)
        assert drain["command"].endswith(" drain reboot")
        assert _when(drain["end"]) <= _when(reboot["start"]) <= _when(uncordon["start"])
        spans.append((_when(drain["end"]), _when(uncordon["start"])))
    spans.sort()
    for (_, released), (acquired, _) in zip(spans, spans[1:], strict=False):
        assert released <= acquired, spans


# ----------------------------------------------------------------- destroy


@pytest.fixture(scope="module")
def destroy_attempted(applied, node_added) -> tuple[Datacentre, dict[str, Any]]:
    """`pulumi destroy` of the whole stack, as someone would type it."""
    dc, first = applied
    before = len(dc.calls_in_order())
    with running(dc):
        env = engine_env(dc) | dc.secrets
        export = ("pulumi", "stack", "export", "--stack", STACK)
        state = cli(dc, env, *export)
        destroy = cli(dc, env, "pulumi", "destroy", "--yes", "--non-interactive", "--stack",
                      STACK)
        after = cli(dc, env, *export)
    return dc, {"destroy": destroy, "api": first["api"], "before": json.loads(state.stdout),
                "after": json.loads(after.stdout), "calls": dc.calls_in_order()[before:]}


def test_destroy_is_refused_by_the_protected_volumes_and_nothing_is_deleted(
        destroy_attempted) -> None:
    dc, run = destroy_attempted
    destroy = run["destroy"]
    assert destroy.returncode != 0
    protected = {r["urn"].rsplit("::", 1)[1] for r in run["before"]["deployment"]["resources"]
                 if r.get("protect")}
    # The checkpoints' volume and claim, and the control planes' init and joins (etcd).
    assert protected == {"persistentvolume-checkpoints-training",
                         "persistentvolumeclaim-training-checkpoints",
                         f"{CONTROL_PLANE}-kubeadm-init",
                         *(f"{h}-kubeadm-join" for h in CONTROL_PLANES[1:])}, protected
    said = " ".join((destroy.stdout + destroy.stderr).split())
    assert ("Preview failed: resource \"urn:pulumi:e2e::gpu-cluster::gpucluster:storage:"
            "Storage$kubernetes:core/v1:PersistentVolumeClaim::persistentvolumeclaim-training-"
            "checkpoints\" cannot be deleted because it is protected") in said, said[-3000:]
    # Refused before anything ran: the state, every host and the API server as they were.
    assert [r["urn"] for r in run["after"]["deployment"]["resources"]] == [
        r["urn"] for r in run["before"]["deployment"]["resources"]]
    assert run["calls"] == []
    api = run["api"]
    assert {v["metadata"]["name"] for v in api.get("pv")["items"]} == {
        r["inputs"]["metadata"]["name"] for r in dc.plan["resources"]
        if r["type"] == "kubernetes:core/v1:PersistentVolume"}
