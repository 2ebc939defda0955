"""Volcano and the Training Operator, run against the twin's API server from binaries built
from their Go modules (tools/k8s/build.sh), configured as the stack configures them.

Each runs as a process on this machine instead of a pod; the pods their manifests declare are
still applied (and placed by the scheduler like any other), but the API server reaches the
webhooks of these processes: their Services lose the selector and get an endpoint on this
machine's address, which is what kube-apiserver's endpoint routing dials.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .controlplane import ControlPlane, ControlPlaneError, free_port

VOLCANO_NS = "volcano-system"
ADMISSION_SERVICE = "volcano-admission-service"
TO_NS = "kubeflow"
TO_SERVICE = "training-operator"
TO_SECRET = "training-operator-webhook-cert"
# Where the operator's certificate rotator expects its mounted secret (pkg/cert/cert.go).
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


def _wait_port(cp: ControlPlane, address: str, port: int, what: str) -> None:
    def listening() -> bool:
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex((address, port)) == 0
    cp.wait_for(listening, what, 120)


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
    port = free_port()
    route_service(cp, VOLCANO_NS, ADMISSION_SERVICE, port, address)
    ca, crt, key = issue_certificate(work / "certs", f"{ADMISSION_SERVICE}.{VOLCANO_NS}.svc")
    admission_conf = work / "volcano-admission.conf"
    admission_conf.write_text(next(
        o["data"]["volcano-admission.conf"] for o in install
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "volcano-admission-configmap"))
    enabled = next(a for a in args["volcano-admission"] if a.startswith("--enabled-admission"))
    kubeconfig = f"--kubeconfig={cp.kubeconfig}"
    cp.spawn("vc-webhook-manager", [
        kubeconfig, enabled, f"--tls-cert-file={crt}", f"--tls-private-key-file={key}",
        f"--ca-cert-file={ca}", f"--admission-conf={admission_conf}",
        f"--webhook-namespace={VOLCANO_NS}", f"--webhook-service-name={ADMISSION_SERVICE}",
        f"--listen-address={address}", f"--port={port}", "-v=2"])
    _wait_port(cp, address, port, "Volcano's admission webhook")
    cp.spawn("vc-controller-manager", [
        kubeconfig, "--leader-elect=false", f"--listen-address=127.0.0.1:{free_port()}",
        f"--healthz-address=127.0.0.1:{free_port()}",
        *_keep(args["volcano-controllers"], "--sharding-configmap", "--worker-threads"), "-v=2"])
    conf = work / "volcano-scheduler.conf"
    conf.write_text(scheduler_conf)
    cp.spawn("vc-scheduler", [
        kubeconfig, f"--scheduler-conf={conf}", "--disable-default-scheduler-config=true",
        "--leader-elect=false", "--schedule-period=1s",
        f"--listen-address=127.0.0.1:{free_port()}",
        f"--healthz-address=127.0.0.1:{free_port()}", "-v=3"])


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
                            address: str) -> None:
    """The operator with the stack's flags; its certificate rotator writes the webhook secret,
    which is copied to the directory a pod would mount it at (the kubelet's part)."""
    flags = [a for a in operator_args(objects)
             if not a.startswith(("--metrics-bind-address", "--health-probe-bind-address",
                                  "--webhook-server-port", "--leader-elect"))]
    port = free_port()
    route_service(cp, TO_NS, TO_SERVICE, port, address)
    shutil.rmtree(TO_CERT_DIR, ignore_errors=True)
    TO_CERT_DIR.mkdir(parents=True)
    cp.spawn("training-operator", [
        f"--kubeconfig={cp.kubeconfig}", *flags, "--leader-elect=false",
        f"--metrics-bind-address=127.0.0.1:{free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{free_port()}",
        f"--webhook-server-port={port}"], env={"MY_POD_NAMESPACE": TO_NS})
    stop = threading.Event()
    cp.on_stop(stop.set)
    threading.Thread(target=_mount_secret, args=(cp, stop), daemon=True).start()
    _wait_port(cp, address, port, "the Training Operator's webhook")


def _mount_secret(cp: ControlPlane, stop: threading.Event) -> None:
    while not stop.wait(1):
        proc = cp.kubectl("get", "secret", TO_SECRET, "-n", TO_NS, "-o", "json", check=False)
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
    def placed() -> list[dict[str, Any]]:
        pods = cp.get("pods", "--all-namespaces")["items"]
        return [p for p in pods if p["spec"].get("nodeName") and any(
            (p["metadata"]["namespace"], o["name"]) in plugins
            for o in p["metadata"].get("ownerReferences", []) if o["kind"] == "DaemonSet")]
    cp.wait_for(lambda: bool(placed()), "the CSI node plugin's pods", 60)
    for node in sorted({p["spec"]["nodeName"] for p in placed()}):
        uid = cp.get("node", node)["metadata"]["uid"]
        csinode = {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                   "metadata": {"name": node, "ownerReferences": [
                       {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]},
                   "spec": {"drivers": [{"name": d, "nodeID": node, "topologyKeys": None}
                                        for d in drivers]}}
        cp.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(csinode))
