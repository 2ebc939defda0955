"""The simulated data centre's Kubernetes side: the API server at the stack's API endpoint
(the twin's real control plane) and what stands in for what runs in pods on hardware.

The bridge carries what the hosts tell the cluster (their Nodes as their kubelets register
them, what the control plane's `kubectl` applies or asks about a namespace's own objects); the
charts' webhooks are reached through the admission stand-in (e2e/admission.py); Volcano's
controllers and scheduler and the Training Operator run as processes here; the operators'
status and device plugins, MetalLB's addresses, ingress-nginx's status, the kubelet's CSI
registration and the NCCL launcher's output are stood in for (docs/testing.md)."""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from components.planning.nodes import PlannedNode, planned_nodes
from components.planning.platform import ROLLOUT_READY
from components.planning.rdma import rdma_resource
from e2e import admission
from e2e.guard import is_local
from e2e.stack import STACK
from support.datacentre import CLUSTER_CA, REF, Datacentre, cluster_ca, polling
from support.nccl_run import healthy_run
from support.twin import BINS
from twin.controlplane import ControlPlane
from twin.operators import (
    TO_NS,
    TO_SECRET,
    TO_SERVICE,
    VOLCANO_NS,
    kwok_stages,
    module_dir,
    one_twin_at_a_time,
    register_csi_drivers,
    start_training_operator,
    start_volcano_controllers,
)

STACK_USER = "gpu-cluster:stack"  # the identity the stack's kubeconfig names (bootstrap.py)


@contextlib.contextmanager
def api_server(dc: Datacentre) -> Iterator[ControlPlane]:
    """The cluster's API server at the stack's API endpoint: the twin's real control plane
    (`make k8s-tools`), serving a certificate the cluster's CA signed for that address, and
    knowing the stack's identity by the token its kubeconfig carries (no role: RBAC is what
    the stack itself applies). It runs with the stack's admission and authentication
    configuration as rendered (CONFIGS): the files `kubeadm init` is given on the control
    plane, which the engine writes there only once the API server must already answer."""
    if not BINS:
        pytest.skip("the twin's control plane is not built: run `make k8s-tools`")
    url = urlsplit(dc.api_endpoint)
    assert url.hostname and is_local(url.hostname), f"{dc.api_endpoint} is not on loopback"
    cluster_ca(dc)
    serving = (dc.work / CLUSTER_CA / "server.crt", dc.work / CLUSTER_CA / "server.key")
    # The charts' webhooks, answered by the admission stand-in, which the API server reaches
    # as its proxy (loopback, etcd's address included, is never proxied).
    namespaces = sorted({r["inputs"]["namespace"] for r in dc.plan["resources"]
                         if r["type"] == "kubernetes:helm.sh/v3:Release"} | {TO_NS})
    relays: dict[str, tuple[str, int]] = {}  # webhooks whose process runs here
    built = json.loads((BINS[-1] / "versions.json").read_text())
    stages = _serving_gates(kwok_stages(module_dir("sigs.k8s.io/kwok", built["kwok"], dc.work)))
    with one_twin_at_a_time(), admission.serving(
            "127.0.0.1", namespaces, dc.work / "admission", dc.admission_log,
            relays) as (proxy, ca):
        admission_config, authentication_config = api_server_configs(dc)
        plane = ControlPlane(BINS[-1], dc.work / "apiserver", kwok_stages=stages,
                             admission_config=admission_config,
                             authentication_config=authentication_config,
                             address=url.hostname, port=url.port or 443, serving=serving,
                             tokens=[f"{dc.stack_token},{STACK_USER},{STACK_USER}"],
                             pod_cidr=_pod_cidr(dc), apiserver_env={
                                 "HTTPS_PROXY": proxy, "NO_PROXY": "127.0.0.0/8,localhost",
                                 "SSL_CERT_FILE": str(ca)})
        with plane, _bridge(dc, plane), _operators(dc, plane), _load_balancers(plane), \
                _controllers(plane, relays):
            yield plane


# The API server's configuration files, as `offline preview` renders them and the control
# plane's `kubeadm init` command writes them (components/planning/kubeadm.py).
CONFIGS = ("kubernetes/admission-config.yaml", "kubernetes/authentication-config.yaml")


def api_server_configs(dc: Datacentre) -> tuple[Path, Path]:
    """The stack's AdmissionConfiguration and AuthenticationConfiguration, as rendered."""
    admission, authentication = (dc.project / "build" / STACK / c for c in CONFIGS)
    return admission, authentication


# Pods of a controller that runs as a process here (the Training Operator): Ready only once
# the process serves, as its readiness probe would say, so `pulumi up` waits for it as it does
# on hardware. Every other pod is Ready at once.
SERVED = ("control-plane", "kubeflow-training-operator")
SERVING = "gpucluster.io/e2e-serving"


def _serving_gates(stages: str) -> str:
    """KWOK's pod stages with the readiness of SERVED pods held until they are SERVING."""
    docs = list(yaml.safe_load_all(stages))
    ready = next(d for d in docs if d["metadata"]["name"] == "pod-ready")
    held = json.loads(json.dumps(ready))
    label = f'.metadata.labels.["{SERVED[0]}"]'
    ready["spec"]["selector"]["matchExpressions"].append(
        {"key": label, "operator": "NotIn", "values": [SERVED[1]]})
    held["metadata"]["name"] = "pod-ready-once-serving"
    held["spec"]["selector"]["matchExpressions"] += [
        {"key": label, "operator": "In", "values": [SERVED[1]]},
        {"key": f'.metadata.annotations.["{SERVING}"]', "operator": "Exists"}]
    return yaml.safe_dump_all([*docs, held])


@contextlib.contextmanager
def _controllers(plane: ControlPlane, relays: dict[str, tuple[str, int]]) -> Iterator[None]:
    """Volcano's controllers and scheduler and the Training Operator, as processes on this
    machine (tools/k8s/build.sh builds them), each started once what it runs on is applied:
    Volcano's with the release's controller flags and the scheduler configuration the stack
    gave the chart, the operator with the flags of the Deployment the stack applied, its
    webhook reached through the admission stand-in's relay."""
    started: set[str] = set()
    serving = threading.Event()
    registered = [0]  # CSI node plugin pods whose nodes have their CSINode entry
    ticks = itertools.count()

    def start() -> None:
        # Helm creates a release's ConfigMaps before its Deployments.
        if "volcano" not in started and plane.kubectl(
                "get", "deployment", "volcano-controllers", "-n", VOLCANO_NS, check=False
                ).returncode == 0:
            conf = plane.get("configmap", VOLCANO_CONF[0], "-n", VOLCANO_NS)["data"][
                VOLCANO_CONF[1]]
            deployment = plane.get("deployment", "volcano-controllers", "-n", VOLCANO_NS)
            start_volcano_controllers(plane, deployment["spec"]["template"]["spec"][
                "containers"][0].get("args", []), conf)
            started.add("volcano")
        # The operator exits while its Secret or webhook configuration is missing (a pod
        # would restart until they are there): it starts once the three are applied.
        if "training-operator" not in started and plane.kubectl(
                "get", f"deployment/{TO_SERVICE}", f"secret/{TO_SECRET}", "-n", TO_NS,
                check=False).returncode == 0 and plane.kubectl(
                "get", "validatingwebhookconfiguration", TO_WEBHOOK, check=False
                ).returncode == 0:
            started.add("training-operator")
            deployment = plane.get("deployment", TO_SERVICE, "-n", TO_NS)

            def expose(port: int) -> None:
                relays[f"{TO_SERVICE}.{TO_NS}.svc:443"] = ("127.0.0.1", port)
            start_training_operator(plane, [deployment], "127.0.0.1", expose)
            serving.set()
        # What follows lists every DaemonSet and the operator's pods: once a second (a
        # kubelet, too, registers a plugin some time after its pod starts), not every tick.
        if next(ticks) % PODS_EVERY:
            return
        # The kubelet's part when a CSI node plugin registers: a CSINode entry for its driver
        # on each node its pod runs on (Volcano counts the driver's volumes against it).
        plugins = [d for d in plane.get("daemonsets", "-A")["items"] if any(
            "csi-node-driver-registrar" in c.get("image", "")
            for c in d["spec"]["template"]["spec"]["containers"])]
        placed = sum(d.get("status", {}).get("numberReady", 0) for d in plugins)
        if placed and placed != registered[0]:
            register_csi_drivers(plane, [*plane.get("csidrivers")["items"], *plugins])
            registered[0] = placed
        if serving.is_set():
            for pod in plane.get("pods", "-n", TO_NS, "-l", "=".join(SERVED))["items"]:
                if SERVING not in (pod["metadata"].get("annotations") or {}):
                    plane.kubectl("annotate", "pod", pod["metadata"]["name"], "-n", TO_NS,
                                  f"{SERVING}=true")

    with polling("controllers", start) as errors:
        yield
    assert not errors, f"a controller could not be started: {errors[0]}"


VOLCANO_CONF = ("volcano-scheduler-configmap", "volcano-scheduler.conf")
PODS_EVERY = 5  # polls (of POLL_S) between looks at the pods the controllers stand in for
TO_WEBHOOK = "validator.training-operator.kubeflow.org"


def _pod_cidr(dc: Datacentre) -> str:
    """The pods' addresses: from the cluster's pod network, as its CNI gives them, so their
    Services have endpoints. No pod runs a process, and nothing dials one: the API server
    reaches webhooks and aggregated APIs only through its proxy (the admission stand-in, which
    answers itself or relays to a process on loopback)."""
    net = ipaddress.ip_network(dc.cluster.kubernetes.pod_cidr)
    return f"{net.network_address + 1}/{net.prefixlen}"


@contextlib.contextmanager
def _bridge(dc: Datacentre, plane: ControlPlane) -> Iterator[None]:
    """The shared cluster directory to the API server: each Node a join registered becomes a
    Node object (KWOK reports it Ready, as the kubelet would), then `registered/<node>`; what
    the control plane's `kubectl apply` recorded (the stack's RBAC) is applied, then
    `forwarded` holds how much of it was."""
    cluster = dc.work / "cluster"

    def forward() -> None:
        applied, forwarded = cluster / "applied", cluster / "forwarded"
        for node in sorted((cluster / "nodes").iterdir()):
            if not (cluster / "registered" / node.name).exists():
                plane.kubectl("apply", "-f", "-", stdin=json.dumps(
                    _node(planned(dc)[node.name], _not_running(dc))))
                (cluster / "registered" / node.name).touch()
        size = applied.stat().st_size if applied.exists() else 0
        done = int(forwarded.read_text()) if forwarded.exists() else 0
        if size > done:
            with applied.open("rb") as f:
                f.seek(done)
                plane.kubectl("apply", "-f", "-", stdin=f.read(size - done).decode())
            forwarded.write_text(str(size))
        for request in sorted((cluster / "requests").glob("*.args")):
            _answer(plane, request, cluster / "responses")

    with polling("api-bridge", forward) as errors:
        yield
    assert not errors, f"the API server refused what the hosts registered: {errors[0]}"


@contextlib.contextmanager
def _operators(dc: Datacentre, plane: ControlPlane) -> Iterator[None]:
    """Stand-ins for the network and GPU operators' reconcilers (they run in pods): each policy
    the stack waits for is reported `ready` in its status, the network operator's only after
    its nv-ipam state installed the IPPool CRD (the one of the operator's release tag, from
    ../shared/ref), and `ready/<policy>` tells the control plane's `kubectl wait`."""
    release = {r["name"]: r["inputs"] for r in dc.plan["resources"]
               if r["type"] == "kubernetes:helm.sh/v3:Release"}
    tag = f"network-operator-v{release['network-operator']['version']}"
    ippool_crd = REF / "nvidia-k8s-ipam" / tag / "crd" / "nv-ipam.nvidia.com_ippools.yaml"
    ready = dc.work / "cluster" / "ready"
    ready.mkdir(exist_ok=True)

    def reconcile() -> None:
        for name, policy in ROLLOUT_READY.items():
            if name not in release or (ready / policy.replace("/", "_")).exists():
                continue
            found = plane.kubectl("get", policy, "-o", "json", check=False)
            if found.returncode != 0:
                continue
            if name == "network-operator" and json.loads(found.stdout)["spec"].get("nvIpam"):
                plane.kubectl("apply", "--server-side", "-f", str(ippool_crd))
                plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                              "crd/ippools.nv-ipam.nvidia.com")
            _run_device_plugins(dc, plane, name)
            plane.kubectl("patch", policy, "--subresource=status", "--type=merge",
                          "-p", json.dumps({"status": {"state": "ready"}}))
            (ready / policy.replace("/", "_")).touch()

    with polling("operators", reconcile) as errors:
        yield
    assert not errors, f"an operator stand-in failed: {errors[0]}"


def _run_device_plugins(dc: Datacentre, plane: ControlPlane, release: str) -> None:
    """What the operator's device plugins report on each node registered so far (its
    resources in the node's capacity and allocatable) and, for the GPU operator, GPU Feature
    Discovery's labels; a node that registers later has them from the start."""
    resources = {r for r, owner in device_plugins(dc).items() if owner == release}
    nodes = planned(dc)
    for registered in sorted((dc.work / "cluster" / "registered").iterdir()):
        node = nodes[registered.name]
        devices = {k: v for k, v in node.allocatable.items() if k in resources}
        if not devices:
            continue
        plane.kubectl("patch", "node", node.name, "--subresource=status", "--type=merge",
                      "-p", json.dumps({"status": {"capacity": devices,
                                                   "allocatable": devices}}))
        if release == "gpu-operator":
            plane.kubectl("label", "node", node.name, "--overwrite", *(
                f"{k}={v}" for k, v in node.labels.items() if k.startswith(GFD_PREFIX)))


@contextlib.contextmanager
def _load_balancers(plane: ControlPlane) -> Iterator[None]:
    """Stand-ins for MetalLB's controller and ingress-nginx's status publisher (they run in
    pods, so nothing runs them here): a LoadBalancer Service gets the first free address of
    the IPAddressPool its `metallb.io/address-pool` annotation names, in its status, as MetalLB
    assigns it; an Ingress of ingress-nginx's class gets its controller Service's address."""
    def assign() -> None:
        services = [s for s in plane.get("services", "--all-namespaces")["items"]
                    if s["spec"].get("type") == "LoadBalancer"]
        taken = {i["ip"] for s in services
                 for i in s.get("status", {}).get("loadBalancer", {}).get("ingress") or []}
        for svc in services:
            if svc.get("status", {}).get("loadBalancer", {}).get("ingress"):
                continue
            pool = (svc["metadata"].get("annotations") or {}).get(POOL_ANNOTATION)
            found = plane.kubectl("get", "ipaddresspools.metallb.io", pool or "", "-n",
                                  METALLB_NS, "-o", "json", check=False)
            if pool is None or found.returncode != 0:
                continue  # MetalLB leaves it pending too
            free = [a for a in _addresses(json.loads(found.stdout)) if a not in taken]
            if not free:
                continue
            taken.add(free[0])
            status = {"status": {"loadBalancer": {"ingress": [{"ip": free[0],
                                                               "ipMode": "VIP"}]}}}
            plane.kubectl("patch", "service", svc["metadata"]["name"], "-n",
                          svc["metadata"]["namespace"], "--subresource=status",
                          "--type=merge", "-p", json.dumps(status))

        # ingress-nginx publishes its Service's address on every Ingress of its class.
        published = [i for s in services for i in s.get("status", {}).get("loadBalancer", {})
                     .get("ingress") or [] if s["metadata"]["name"] == INGRESS_SERVICE[1]
                     and s["metadata"]["namespace"] == INGRESS_SERVICE[0]]
        for ing in plane.get("ingresses", "--all-namespaces")["items"] if published else []:
            if ing["spec"].get("ingressClassName") == INGRESS_CLASS and not ing.get(
                    "status", {}).get("loadBalancer", {}).get("ingress"):
                plane.kubectl("patch", "ingress", ing["metadata"]["name"], "-n",
                              ing["metadata"]["namespace"], "--subresource=status",
                              "--type=merge", "-p", json.dumps({"status": {"loadBalancer": {
                                  "ingress": [{"ip": i["ip"]} for i in published]}}}))

    with polling("load-balancers", assign) as errors:
        yield
    assert not errors, f"the load-balancer stand-in failed: {errors[0]}"


INGRESS_SERVICE = ("ingress-nginx", "ingress-nginx-controller")
INGRESS_CLASS = "nginx"


POOL_ANNOTATION = "metallb.io/address-pool"
METALLB_NS = "metallb-system"


def _addresses(pool: dict[str, Any]) -> list[str]:
    """A pool's addresses in order: CIDRs and `first-last` ranges, as MetalLB reads them."""
    out: list[str] = []
    for spec in pool["spec"]["addresses"]:
        if "-" in spec:
            first, last = (ipaddress.ip_address(a.strip()) for a in spec.split("-"))
            out += [str(ipaddress.ip_address(i)) for i in range(int(first), int(last) + 1)]
        else:
            out += [str(a) for a in ipaddress.ip_network(spec, strict=False)]
    return out


def _answer(plane: ControlPlane, request: Path, responses: Path) -> None:
    """Run a control plane's forwarded kubectl call against the API server (its own
    `--kubeconfig` dropped: the admin's is the API server's) and leave what it said. KWOK
    runs no container, so a job's launcher has no log: `logs` of an MPIJob's launcher answers
    with a healthy run of its size (support/nccl_run.py), the stand-in for what mpirun would
    print on the fabric."""
    args, skip = [], False
    for a in request.read_bytes().decode().split("\0")[:-1]:
        if skip or a.startswith("--kubeconfig"):
            skip = a == "--kubeconfig"
            continue
        args.append(a)
    stdin_file = request.with_suffix(".stdin")
    stdin = stdin_file.read_text() if stdin_file.exists() else None
    launcher = [a.removeprefix("pod/") for a in args if a.endswith("-launcher")]
    if "logs" in args and launcher:
        out, err, rc = _launcher_log(plane, args[args.index("-n") + 1], launcher[0]), "", 0
    else:
        done = plane.kubectl(*args, stdin=stdin, check=False)
        out, err, rc = done.stdout, done.stderr, done.returncode
    key = request.name.removesuffix(".args")
    responses.mkdir(exist_ok=True)
    (responses / f"{key}.out").write_text(out)
    (responses / f"{key}.err").write_text(err)
    (responses / f"{key}.rc.tmp").write_text(str(rc))
    os.replace(responses / f"{key}.rc.tmp", responses / f"{key}.rc")  # the answer is whole
    request.unlink()


# A scheduler's Scheduled event: "Successfully assigned <namespace>/<pod> to <node>".
ASSIGNED = re.compile(r"assigned \S+ to (\S+)$")


def _launcher_log(plane: ControlPlane, namespace: str, launcher: str) -> str:
    """What the MPIJob's launcher would print on a healthy fabric, for its workers on the
    nodes Volcano bound them to (support/nccl_run.py)."""
    job = launcher.removesuffix("-launcher")
    spec = plane.get("mpijob", job, "-n", namespace)["spec"]["mpiReplicaSpecs"]["Worker"]
    bound = {e["involvedObject"]["name"]: m.group(1)
             for e in plane.get("events", "-n", namespace, "--field-selector",
                                "reason=Scheduled")["items"]
             if (m := ASSIGNED.search(e.get("message", "")))}
    workers = [f"{job}-worker-{i}" for i in range(spec["replicas"])]
    return healthy_run(job, [bound.get(w, w) for w in workers])


def planned(dc: Datacentre) -> dict[str, PlannedNode]:
    """The nodes of the stack, as the twin models them."""
    return {n.name: n for n in planned_nodes(dc.cluster)}


def device_plugins(dc: Datacentre) -> dict[str, str]:
    """Each device plugin's resource, and the release whose operator runs the plugin."""
    return {"nvidia.com/gpu": "gpu-operator",
            rdma_resource(dc.cluster): "network-operator"}


def _not_running(dc: Datacentre) -> set[str]:
    """The resources of device plugins whose operator is not ready yet."""
    ready = dc.work / "cluster" / "ready"
    return {resource for resource, release in device_plugins(dc).items()
            if not (ready / ROLLOUT_READY[release].replace("/", "_")).exists()}


# What a kubelet registers of itself; the rest of a node's labels are the stack's NodePatches'
# and GPU Feature Discovery's.
KUBELET_LABELS = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch")
GFD_PREFIX = "nvidia.com/gpu."


def _node(node: PlannedNode, absent: set[str]) -> dict[str, Any]:
    """A host's Node object as its kubelet registers it: its own labels, the taints its join
    registers (on the control plane, what `kubeadm init` marks: the role label and NoSchedule
    taint), its allocatable resources but the device plugins' that do not run yet (`absent`).
    KWOK manages its status from there."""
    labels = {k: v for k, v in node.labels.items()
              if k in KUBELET_LABELS or node.role == "control-plane"}
    labels |= node.registered  # its join's --node-labels, until the acceptance gate
    resources = {k: v for k, v in node.allocatable.items() if k not in absent}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": node.name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"taints": [dict(t) for t in node.taints]},
        "status": {"allocatable": resources, "capacity": resources}}
