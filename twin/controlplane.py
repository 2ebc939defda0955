"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, and KWOK standing in for every kubelet. Binaries come from `tools/k8s/build.sh`
(built from their Go modules); nothing here is simulated but the nodes."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

TOKEN = "twin-admin-token-0123456789abcdef"


class ControlPlaneError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ControlPlane:
    """Start with `with ControlPlane(bin_dir, work) as cp:`; every process stops on exit."""

    def __init__(self, bin_dir: Path, work: Path, service_cidr: str = "10.96.0.0/12",
                 kwok_stages: str | None = None, admission_config: Path | None = None,
                 authentication_config: Path | None = None) -> None:
        self.bin = bin_dir
        self.work = work
        self.service_cidr = service_cidr
        self.kwok_stages = kwok_stages  # KWOK Stage documents; None: KWOK's defaults
        self.admission_config = admission_config  # the stack's AdmissionConfiguration
        self.authentication_config = authentication_config  # its AuthenticationConfiguration
        self._on_stop: list[Callable[[], None]] = []
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.kubeconfig = work / "kubeconfig"
        self.ca = work / "certs" / "ca.crt"

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def spawn(self, name: str, args: Sequence[str],
              env: Mapping[str, str] | None = None) -> None:
        """Start one of the built binaries; it stops with the control plane."""
        log = open(self.work / f"{name}.log", "wb")  # closed with the process
        # No proxy from this machine's environment: a cluster's components dial each other.
        clean = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        proc = subprocess.Popen([str(self.bin / name), *args], stdout=log, stderr=log,
                                start_new_session=True, env={**clean, **(env or {})})
        self.procs.append((name, proc))

    def on_stop(self, fn: Callable[[], None]) -> None:
        self._on_stop.append(fn)

    def start(self) -> None:
        w = self.work
        w.mkdir(parents=True, exist_ok=True)
        for d in ("etcd", "certs"):
            shutil.rmtree(w / d, ignore_errors=True)
        (w / "certs").mkdir()
        key = w / "certs" / "sa.key"
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True,
                       capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out",
                        str(w / "certs" / "sa.pub")], check=True, capture_output=True)
        # The cluster CA kube-controller-manager signs approved CSRs with (kubeadm: pki/ca.crt).
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                        "/CN=kubernetes", "-keyout", str(w / "certs" / "ca.key"),
                        "-out", str(self.ca)], check=True, capture_output=True)
        (w / "tokens.csv").write_text(f"{TOKEN},twin-admin,twin-admin,system:masters\n")
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "twin",
            "clusters": [{"name": "twin", "cluster": {"server": self.server,
                                                      "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": "twin", "context": {"cluster": "twin", "user": "admin"}}],
        }))
        etcd_port, peer_port = free_port(), free_port()
        self.spawn("etcd", [
            "--data-dir", str(w / "etcd"), "--name", "twin",
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"twin=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync"])
        self.spawn("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", f"--secure-port={self.port}",
            f"--cert-dir={w / 'certs'}", f"--token-auth-file={w / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={w / 'certs' / 'sa.pub'}",
            f"--service-account-signing-key-file={key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--allow-privileged=true",
            # Webhooks are dialled at their Services' endpoints (processes on this machine),
            # not at a ClusterIP that nothing routes here.
            "--enable-aggregator-routing=true",
            "--enable-admission-plugins=NodeRestriction",
            *([f"--admission-control-config-file={self.admission_config}"]
              if self.admission_config else []),
            *([f"--authentication-config={self.authentication_config}"]
              if self.authentication_config else [])])
        self.wait_ready()
        common = [f"--kubeconfig={self.kubeconfig}", "--bind-address=127.0.0.1"]
        self.spawn("kube-controller-manager", [
            *common, f"--secure-port={free_port()}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--service-account-private-key-file={key}",
            f"--service-cluster-ip-range={self.service_cidr}",
            f"--cluster-signing-cert-file={self.ca}",
            f"--cluster-signing-key-file={w / 'certs' / 'ca.key'}",
            "--use-service-account-credentials=false", "--leader-elect=false",
            # Node IPAM would need a pod CIDR per node; KWOK nodes need none. The node
            # lifecycle controller stays: it lifts the not-ready taint once KWOK reports Ready.
            "--controllers=*,-nodeipam,-cloud-node-lifecycle,-route,-service"])
        self.spawn("kube-scheduler", [
            *common, f"--secure-port={free_port()}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}", "--leader-elect=false"])
        kwok_config = []
        if self.kwok_stages is not None:
            (w / "kwok.yaml").write_text(self.kwok_stages)
            kwok_config = [f"--config={w / 'kwok.yaml'}"]
        self.spawn("kwok", [*kwok_config,
            f"--kubeconfig={self.kubeconfig}", "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1", "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{free_port()}"])
        self.wait_for_service_account("default")

    def stop(self) -> None:
        for fn in self._on_stop:
            fn()
        for _name, proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
        for _name, proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
        self.procs.clear()

    # ------------------------------------------------------------------ use
    def check_alive(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                tail = (self.work / f"{name}.log").read_text(errors="replace")[-3000:]
                raise ControlPlaneError(f"{name} exited with {proc.returncode}:\n{tail}")

    def wait_for(self, ok: Any, what: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.check_alive()
            if ok():
                return
            time.sleep(0.5)
        raise ControlPlaneError(f"timed out after {timeout:g}s waiting for {what}")

    def wait_for_service_account(self, namespace: str) -> None:
        """Pods are admitted only once the controller manager created the namespace's
        `default` service account."""
        self.wait_for(lambda: self.kubectl("get", "serviceaccount", "default", "-n", namespace,
                                           check=False).returncode == 0,
                      f"the default service account of {namespace}", 60)

    def wait_ready(self) -> None:
        self.wait_for(lambda: self.kubectl("get", "--raw", "/readyz",
                                           check=False).returncode == 0,
                      "kube-apiserver /readyz", 120)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True
                ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}",
                               *args], input=stdin, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)
