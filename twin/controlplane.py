"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, and KWOK standing in for every kubelet. Binaries come from `tools/k8s/build.sh`
(built from their Go modules); nothing here is simulated but the nodes."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

TOKEN = "twin-admin-token-0123456789abcdef"
# How often a process is started again after another one took a port picked for it.
BIND_ATTEMPTS = 5
IN_USE = "address already in use"  # what Go's net.Listen says then
# Refusals that say nothing about the object, only that the API server, etcd or a webhook
# process did not answer in time (a loaded machine): a `get` or an `apply` is asked again.
TRANSIENT = ("failed calling webhook", "etcdserver: request timed out",
             "the server is currently unable to handle the request",
             "Timeout: request did not complete within", "context deadline exceeded")
RETRIED = ("get", "apply")  # idempotent: asking twice does what asking once does


class ControlPlaneError(RuntimeError):
    pass


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing is bound to on `host` now, picked below the kernel's ephemeral range:
    each kubectl call's connections take their source ports from that range, so a port picked
    there (as binding port 0 does) can be taken by one of them before the process given it
    binds it. Another listener can still take it first: `ControlPlane.spawn_listening` then
    starts the process again on another port."""
    lo, _hi = _ephemeral_range()
    below = range(10000, lo) if lo > 11000 else range(0, 1)  # 0: any port the kernel gives
    for _ in range(100):
        with socket.socket() as s:
            try:
                s.bind((host, random.choice(below)))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise ControlPlaneError(f"no free port on {host}")


class ControlPlane:
    """Start with `with ControlPlane(bin_dir, work) as cp:`; every process stops on exit."""

    def __init__(self, bin_dir: Path, work: Path, service_cidr: str = "10.96.0.0/12",
                 kwok_stages: str | None = None, admission_config: Path | None = None,
                 authentication_config: Path | None = None, address: str = "127.0.0.1",
                 port: int | None = None, serving: tuple[Path, Path] | None = None,
                 tokens: Sequence[str] = (), pod_cidr: str | None = None,
                 apiserver_env: Mapping[str, str] | None = None) -> None:
        self.bin = bin_dir
        self.work = work
        self.service_cidr = service_cidr
        self.kwok_stages = kwok_stages  # KWOK Stage documents; None: KWOK's defaults
        self.admission_config = admission_config  # the stack's AdmissionConfiguration
        self.authentication_config = authentication_config  # its AuthenticationConfiguration
        # Where kube-apiserver listens (a free port when none is given), the certificate and
        # key it serves (its own self-signed pair when none), and tokens.csv lines it also
        # accepts beside the admin's: a simulated data centre's API endpoint and identities.
        self.address = address
        self.fixed_port = port
        self.serving = serving
        self.tokens = tuple(tokens)
        # The addresses KWOK gives pods (None: KWOK's default, 10.0.0.1/24). The API server
        # dials a Service's pod addresses (webhooks, aggregated APIs), so where pods run no
        # process these must be addresses that lead nowhere off this machine.
        self.pod_cidr = pod_cidr
        self.apiserver_env = dict(apiserver_env or {})  # e.g. the proxy it reaches webhooks by
        self._on_stop: list[Callable[[], None]] = []
        self.port = 0  # kube-apiserver's, once it listens
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.kubeconfig = work / "kubeconfig"
        self.ca = work / "certs" / "ca.crt"

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.port}"

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
              env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start one of the built binaries; it stops with the control plane. Its output is
        appended to <work>/<name>.log (a process started again keeps the earlier tries')."""
        with open(self.work / f"{name}.log", "ab") as log:  # the child keeps its own copy
            # No proxy from this machine's environment: a cluster's components dial each other.
            clean = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
            proc = subprocess.Popen([str(self.bin / name), *args], stdout=log, stderr=log,
                                    start_new_session=True, env={**clean, **(env or {})})
        self.procs.append((name, proc))
        return proc

    def spawn_listening(self, name: str, command: Callable[..., Sequence[str]],
                        ports: int = 1, host: str = "127.0.0.1",
                        env: Mapping[str, str] | None = None,
                        timeout: float = 300, fixed: int | None = None) -> tuple[int, ...]:
        """Start a binary that listens on `ports` fresh ports of `host` (or on the one port
        `fixed`) and wait until it accepts connections on the first; `command(*ports)` gives
        its arguments (and sets up whatever must know the ports first). A port can be taken
        between being picked and being bound; the process then exits saying so, and is
        started again on other ports."""
        log = self.work / f"{name}.log"
        for _ in range(1 if fixed else BIND_ATTEMPTS):
            picked: list[int] = [fixed] if fixed else []
            while len(picked) < ports:
                if (port := free_port(host)) not in picked:
                    picked.append(port)
            start = log.stat().st_size if log.exists() else 0
            proc = self.spawn(name, command(*picked), env)
            if self._listens(name, proc, host, picked[0], timeout):
                return tuple(picked)
            self.procs.remove((name, proc))
            with open(log, "rb") as f:
                f.seek(start)
                said = f.read().decode(errors="replace")
            if IN_USE not in said:
                raise ControlPlaneError(f"{name} exited with {proc.returncode}:\n{said[-3000:]}")
        raise ControlPlaneError(f"{name}: {BIND_ATTEMPTS} times a port picked for it was taken "
                                "before it could bind it")

    def _listens(self, name: str, proc: subprocess.Popen[bytes], host: str, port: int,
                 timeout: float) -> bool:
        """True once `proc` accepts connections on host:port; False if it exited first."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc.poll() is not None:
                return False
            self.check_alive(but=proc)
            with socket.socket() as s:
                s.settimeout(1)
                if s.connect_ex((host, port)) == 0:
                    return True
            time.sleep(0.2)
        raise ControlPlaneError(f"timed out after {timeout:g}s waiting for {name} to listen "
                                f"on {host}:{port}")

    def on_stop(self, fn: Callable[[], None]) -> None:
        self._on_stop.append(fn)

    def start(self) -> None:
        key = self._credentials()
        self._start_api_server(key)
        self._start_controllers(key)
        self.wait_for_service_account("default")

    def _credentials(self) -> Path:
        """A fresh service-account key pair, cluster CA and token file; the private key."""
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
        (w / "tokens.csv").write_text("".join(
            f"{line}\n" for line in (f"{TOKEN},twin-admin,twin-admin,system:masters",
                                     *self.tokens)))
        return key

    def _start_api_server(self, key: Path) -> None:
        """etcd, then kube-apiserver on it, and the admin kubeconfig once it is ready."""
        w = self.work
        # etcd binds its peer port before its client port: once the client port answers,
        # both were free.
        etcd_port, _peer = self.spawn_listening("etcd", lambda client, peer: [
            "--data-dir", str(w / "etcd"), "--name", "twin",
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"twin=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync"], ports=2)
        serving = ([f"--tls-cert-file={self.serving[0]}",
                    f"--tls-private-key-file={self.serving[1]}"] if self.serving else [])
        self.port, = self.spawn_listening("kube-apiserver", lambda port: [
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--bind-address={self.address}",
            f"--secure-port={port}", *serving,
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
              if self.authentication_config else [])],
            host=self.address, fixed=self.fixed_port, env=self.apiserver_env)
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "twin",
            "clusters": [{"name": "twin", "cluster": {"server": self.server,
                                                      "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": "twin", "context": {"cluster": "twin", "user": "admin"}}],
        }))
        self.wait_ready()

    def _start_controllers(self, key: Path) -> None:
        """kube-controller-manager, kube-scheduler and KWOK, the nodes' stand-in."""
        w = self.work
        # --secure-port=0: the controller manager's and the scheduler's health and metrics
        # endpoints are not used here, and a port not asked for cannot be taken.
        self.spawn("kube-controller-manager", [
            f"--kubeconfig={self.kubeconfig}", "--secure-port=0",
            f"--service-account-private-key-file={key}",
            f"--service-cluster-ip-range={self.service_cidr}",
            f"--cluster-signing-cert-file={self.ca}",
            f"--cluster-signing-key-file={w / 'certs' / 'ca.key'}",
            "--use-service-account-credentials=false", "--leader-elect=false",
            # Node IPAM would need a pod CIDR per node; KWOK nodes need none. The node
            # lifecycle controller stays: it lifts the not-ready taint once KWOK reports Ready.
            "--controllers=*,-nodeipam,-cloud-node-lifecycle,-route,-service"])
        self.spawn("kube-scheduler", [f"--kubeconfig={self.kubeconfig}", "--secure-port=0",
                                      "--leader-elect=false"])
        kwok_config = []
        if self.kwok_stages is not None:
            (w / "kwok.yaml").write_text(self.kwok_stages)
            kwok_config = [f"--config={w / 'kwok.yaml'}"]
        # No --server-address: KWOK's kubelet API (logs, exec) is not used, so it listens on
        # nothing.
        self.spawn("kwok", [*kwok_config,
            f"--kubeconfig={self.kubeconfig}", "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1", "--node-lease-duration-seconds=40",
            *([f"--cidr={self.pod_cidr}"] if self.pod_cidr else [])])

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
    def check_alive(self, but: subprocess.Popen[bytes] | None = None) -> None:
        for name, proc in self.procs:
            if proc is not but and proc.poll() is not None:
                tail = (self.work / f"{name}.log").read_text(errors="replace")[-3000:]
                raise ControlPlaneError(f"{name} exited with {proc.returncode}:\n{tail}")

    def wait_for(self, ok: Callable[[], bool], what: str, timeout: float) -> None:
        """Poll `ok` until it holds. Timeouts are what a loaded two-core machine needs, not
        what an idle one takes: each poll also checks that every process still runs, so a
        broken control plane fails at once, never at the timeout."""
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
                      f"the default service account of {namespace}", 180)

    def wait_ready(self) -> None:
        self.wait_for(lambda: self.kubectl("get", "--raw", "/readyz",
                                           check=False).returncode == 0,
                      "kube-apiserver /readyz", 300)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout: float = 120, tries: int = 3) -> subprocess.CompletedProcess[str]:
        for _ in range(tries if args[0] in RETRIED else 1):
            try:
                proc = subprocess.run([str(self.bin / "kubectl"),
                                       f"--kubeconfig={self.kubeconfig}", *args], input=stdin,
                                      capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired as err:
                raise ControlPlaneError(f"kubectl {' '.join(args)}: no answer in "
                                        f"{timeout:g}s") from err
            if proc.returncode == 0 or not any(t in proc.stderr for t in TRANSIENT):
                break
            time.sleep(2)
        if check and proc.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)
