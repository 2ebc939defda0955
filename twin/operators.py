"""Volcano and the Training Operator, run against the twin's API server from binaries built
from their Go modules (tools/k8s/build.sh), configured as the stack configures them.

Each runs as a process on this machine instead of a pod; the pods their manifests declare are
still applied (and placed by the scheduler like any other), but the API server reaches the
webhooks of these processes: their Services lose the selector and get an endpoint on this
machine's address, which is what kube-apiserver's endpoint routing dials.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .controlplane import ControlPlane, ControlPlaneError
from .objects import get, items

VOLCANO_NS = "volcano-system"
ADMISSION_SERVICE = "volcano-admission-service"
TO_NS = "kubeflow"
TO_SERVICE = "training-operator"
TO_SECRET = "training-operator-webhook-cert"
# Where the operator's certificate rotator expects its mounted secret (pkg/cert/cert.go), and
# its webhook server reads it: a fixed path, the same for every twin on this machine.
TO_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
# The launcher of a finished nccl-tests run: KWOK completes it (stand-in for mpirun's exit).
LAUNCHER_LABEL = "training.kubeflow.org/replica-type"


def module_dir(module: str, version: str, cwd: Path) -> Path:
    """A Go module's source from the module cache (downloaded from the proxy if missing)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    out = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"],
                         capture_output=True, text=True, cwd=cwd, env={**os.environ,
                                                                       "GOFLAGS": "-mod=mod"})
    if out.returncode != 0:
        raise ControlPlaneError(f"go mod download {module}@{version}: {out.stdout}{out.stderr}")
    return Path(json.loads(out.stdout)["Dir"])


def host_address() -> str:
    """This machine's non-loopback address (Endpoints refuse loopback addresses)."""
    candidates = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    for ip in candidates:
        try:
            if socket.inet_pton(socket.AF_INET, ip) and not ip.startswith("127."):
                return ip
        except OSError:
            continue  # an IPv6 address
    raise ControlPlaneError("no non-loopback IPv4 address for the webhooks' endpoints "
                            f"(hostname -I: {' '.join(candidates) or 'nothing'})")


def issue_certificate(out: Path, dns: str, ip: str | None = None) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for `dns` (and `ip`), as the chart's cert job makes."""
    out.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, crt = (out / n for n in ("ca.key", "ca.crt", "tls.key", "tls.csr",
                                                   "tls.crt"))
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
        "-days", "1", "-subj", "/CN=twin-webhook-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", f"/CN={dns}")
    san = out / "san.ext"
    san.write_text(f"subjectAltName=DNS:{dns}" + (f",IP:{ip}" if ip else "") + "\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(crt), "-days", "1", "-extfile", str(san))
    return ca, crt, key


def route_service(cp: ControlPlane, ns: str, name: str, port: int, address: str) -> None:
    """Point a webhook Service at a process on this machine: no selector, one endpoint."""
    cp.kubectl("patch", "service", name, "-n", ns, "--type=json",
               "-p", '[{"op": "remove", "path": "/spec/selector"}]', check=False)
    # The slices the controller made while the Service had a selector point at the stand-in
    # pod's address; without the selector it deletes them, but not at once.
    cp.kubectl("delete", "endpointslices", "-n", ns, "-l",
               f"kubernetes.io/service-name={name},"
               "endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io")
    svc = cp.get("service", name, "-n", ns)
    ports = [{"name": p.get("name", ""), "port": port, "protocol": "TCP"}
             for p in svc["spec"]["ports"]]
    endpoints = {"apiVersion": "v1", "kind": "Endpoints",
                 "metadata": {"name": name, "namespace": ns},
                 "subsets": [{"addresses": [{"ip": address}], "ports": ports}]}
    cp.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(endpoints))


@contextlib.contextmanager
def one_twin_at_a_time() -> Iterator[None]:
    """Held while a twin runs: a second twin on this machine would replace the Training
    Operator's certificates in TO_CERT_DIR under the first one's operator, so it waits."""
    TO_CERT_DIR.parent.mkdir(parents=True, exist_ok=True)
    with open(TO_CERT_DIR.parent / "twin.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("twin: waiting for the other twin on this machine to finish", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # the lock goes with the file


# ---------------------------------------------------------------- Volcano


def volcano_install(module: Path) -> list[dict[str, Any]]:
    """The release's own install manifest (installer/volcano-development.yaml)."""
    text = (module / "installer" / "volcano-development.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def start_volcano(cp: ControlPlane, module: Path, scheduler_conf: str, address: str) -> None:
    """vc-webhook-manager (admission), vc-controller-manager and vc-scheduler with the
    scheduler configuration the stack renders; the webhook configurations and ConfigMaps are
    the release's, the webhooks reached through `volcano-admission-service` on this machine."""
    install = volcano_install(module)
    work = cp.work / "volcano"
    work.mkdir(exist_ok=True)
    cp.kubectl("create", "namespace", VOLCANO_NS, check=False)
    args: dict[str, list[str]] = {}
    for obj in install:  # the chart's CRDs (PodGroup, Job, ...) before anything uses them
        if obj["kind"] == "CustomResourceDefinition":
            cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                       stdin=yaml.safe_dump(obj))
    cp.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    for obj in install:
        kind = obj["kind"]
        if kind in ("ConfigMap", "MutatingWebhookConfiguration",
                    "ValidatingWebhookConfiguration"):
            cp.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(obj))
        if kind == "Deployment":
            args[obj["metadata"]["name"]] = obj["spec"]["template"]["spec"]["containers"][0][
                "args"]
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": ADMISSION_SERVICE, "namespace": VOLCANO_NS},
               "spec": {"ports": [{"port": 443, "protocol": "TCP"}]}}
    cp.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(service))
    ca, crt, key = issue_certificate(work / "certs", f"{ADMISSION_SERVICE}.{VOLCANO_NS}.svc")
    admission_conf = work / "volcano-admission.conf"
    admission_conf.write_text(next(
        o["data"]["volcano-admission.conf"] for o in install
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "volcano-admission-configmap"))
    enabled = next(a for a in args["volcano-admission"] if a.startswith("--enabled-admission"))
    kubeconfig = f"--kubeconfig={cp.kubeconfig}"

    def webhook(port: int) -> list[str]:
        route_service(cp, VOLCANO_NS, ADMISSION_SERVICE, port, address)
        return [kubeconfig, enabled, f"--tls-cert-file={crt}", f"--tls-private-key-file={key}",
                f"--ca-cert-file={ca}", f"--admission-conf={admission_conf}",
                f"--webhook-namespace={VOLCANO_NS}",
                f"--webhook-service-name={ADMISSION_SERVICE}",
                f"--listen-address={address}", f"--port={port}", "-v=2"]
    cp.spawn_listening("vc-webhook-manager", webhook, host=address)
    start_volcano_controllers(cp, args["volcano-controllers"], scheduler_conf)


def start_volcano_controllers(cp: ControlPlane, controller_args: Sequence[str],
                              scheduler_conf: str) -> None:
    """vc-controller-manager with the release's controller flags, and vc-scheduler with the
    scheduler configuration the stack renders. They serve metrics and health checks only
    when asked (--enable-metrics, --enable-healthz): they listen on no port."""
    kubeconfig = f"--kubeconfig={cp.kubeconfig}"
    cp.spawn("vc-controller-manager", [
        kubeconfig, "--leader-elect=false",
        *_keep(controller_args, "--sharding-configmap", "--worker-threads"), "-v=2"])
    work = cp.work / "volcano"
    work.mkdir(exist_ok=True)
    conf = work / "volcano-scheduler.conf"
    conf.write_text(scheduler_conf)
    cp.spawn("vc-scheduler", [
        kubeconfig, f"--scheduler-conf={conf}", "--disable-default-scheduler-config=true",
        "--leader-elect=false", "--schedule-period=1s", "-v=3"])


def _keep(args: Sequence[str], *prefixes: str) -> list[str]:
    return [a for a in args if a.startswith(prefixes)]


# ---------------------------------------------------------------- Training Operator


def operator_args(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """The flags the stack's kustomization gives the operator's container."""
    dep = next(o for o in objects if o["kind"] == "Deployment"
               and o["metadata"]["name"] == "training-operator")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    return [*container.get("command", [])[1:], *container.get("args", [])]


def start_training_operator(cp: ControlPlane, objects: Sequence[Mapping[str, Any]],
                            address: str, expose: Callable[[int], None] | None = None) -> None:
    """The operator with the stack's flags; its certificate rotator writes the webhook secret,
    which is copied to the directory a pod would mount it at (the kubelet's part). `expose`
    makes its webhook's port the one the API server reaches (by default: its Service's
    endpoint on `address`)."""
    flags = [a for a in operator_args(objects)
             if not a.startswith(("--metrics-bind-address", "--health-probe-bind-address",
                                  "--webhook-server-port", "--leader-elect"))]
    shutil.rmtree(TO_CERT_DIR, ignore_errors=True)
    TO_CERT_DIR.mkdir(parents=True)
    stop = threading.Event()
    cp.on_stop(stop.set)
    threading.Thread(target=_mount_secret, args=(cp, stop), daemon=True).start()

    def operator(port: int) -> list[str]:
        if expose is None:
            route_service(cp, TO_NS, TO_SERVICE, port, address)
        else:
            expose(port)
        # "0": no metrics or health endpoint (unused here), so no port to lose.
        return [f"--kubeconfig={cp.kubeconfig}", *flags, "--leader-elect=false",
                "--metrics-bind-address=0", "--health-probe-bind-address=0",
                f"--webhook-server-port={port}"]
    # The webhook listens only once the rotator found the certificate mounted (it looks after
    # 1, 3, 7, 15... s) and its CA injected: minutes on a loaded machine.
    cp.spawn_listening("training-operator", operator, host=address,
                       env={"MY_POD_NAMESPACE": TO_NS}, timeout=600)


def _mount_secret(cp: ControlPlane, stop: threading.Event) -> None:
    while not stop.wait(1):
        try:
            proc = cp.kubectl("get", "secret", TO_SECRET, "-n", TO_NS, "-o", "json",
                              check=False)
        except ControlPlaneError:
            continue  # no answer in time: ask again
        if proc.returncode != 0:
            continue
        data = json.loads(proc.stdout).get("data") or {}
        if {"tls.crt", "tls.key"} <= data.keys():
            for name in ("tls.key", "tls.crt"):  # the certificate last: its presence is "ready"
                (TO_CERT_DIR / name).write_bytes(base64.b64decode(data[name]))
            return


# ---------------------------------------------------------------- KWOK stages


def kwok_stages(kwok_module: Path) -> str:
    """KWOK's default pod stages plus one that completes a finished MPIJob's launcher (mpirun
    exits 0 a few seconds after it starts: the stand-in for a passing nccl-tests run)."""
    fast = kwok_module / "kustomize" / "stage" / "pod" / "fast"
    docs = [yaml.safe_load((fast / f).read_text())
            for f in ("pod-ready.yaml", "pod-complete.yaml", "pod-delete.yaml")]
    complete = next(d for d in docs if d["metadata"]["name"] == "pod-complete")
    launcher = json.loads(json.dumps(complete))
    launcher["metadata"]["name"] = "mpi-launcher-complete"
    launcher["spec"]["selector"]["matchExpressions"] = [
        e for e in launcher["spec"]["selector"]["matchExpressions"]
        if e["key"] != ".metadata.ownerReferences.[].kind"] + [
        {"key": f'.metadata.labels.["{LAUNCHER_LABEL}"]', "operator": "In",
         "values": ["launcher"]}]
    launcher["spec"]["delay"] = {"durationMilliseconds": 5000}
    return yaml.safe_dump_all([*docs, launcher])


# ---------------------------------------------------------------- the kubelet's CSI part


def register_csi_drivers(cp: ControlPlane, manifests: Sequence[Mapping[str, Any]]) -> None:
    """What a kubelet does when a CSI node plugin registers: a CSINode entry for the driver on
    each node where the plugin's pod (the DaemonSet with node-driver-registrar) runs. Volcano
    counts CSI volumes against it; a node without the plugin cannot take a pod with the
    driver's volumes."""
    drivers = sorted(m["metadata"]["name"] for m in manifests if m["kind"] == "CSIDriver")
    plugins = {(m["metadata"]["namespace"], m["metadata"]["name"]) for m in manifests
               if m["kind"] == "DaemonSet" and any(
                   "csi-node-driver-registrar" in c.get("image", "")
                   for c in m["spec"]["template"]["spec"]["containers"])}
    if not drivers or not plugins:
        return
    def placed() -> dict[tuple[str, str], set[str]]:
        """The nodes each plugin DaemonSet's pods are bound to."""
        found: dict[tuple[str, str], set[str]] = {ds: set() for ds in plugins}
        for p in cp.get("pods", "--all-namespaces")["items"]:
            for o in items(p, "metadata", "ownerReferences"):
                ds = (p["metadata"]["namespace"], get(o, "name"))
                if get(o, "kind") == "DaemonSet" and ds in found and get(p, "spec", "nodeName"):
                    found[ds].add(p["spec"]["nodeName"])
        return found

    def everywhere() -> bool:
        on = placed()
        return all(len(on[(ns, name)]) >= max(1, get(cp.get("daemonset", name, "-n", ns),
                                                     "status", "desiredNumberScheduled",
                                                     default=0))
                   for ns, name in plugins)
    # Every pod each DaemonSet wants, not the first one: the scheduler binds them one by one,
    # and a node registered before its pod was bound would be left without the driver. One
    # that stays unbound is the report's to show, as an unscheduled pod.
    end = time.monotonic() + 180
    while not everywhere() and time.monotonic() < end:
        cp.check_alive()
        time.sleep(1)
    if not any(placed().values()):
        raise ControlPlaneError("no pod of the CSI node plugins was bound in 180 s")
    for node in sorted(set().union(*placed().values())):
        uid = cp.get("node", node)["metadata"]["uid"]
        csinode = {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                   "metadata": {"name": node, "ownerReferences": [
                       {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]},
                   "spec": {"drivers": [{"name": d, "nodeID": node, "topologyKeys": None}
                                        for d in drivers]}}
        cp.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(csinode))
