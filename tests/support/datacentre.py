"""The simulated data centre the real engine runs `pulumi up` against: the e2e stack (prod's
cluster on loopback, e2e/stack.py) in a copy of the project, one hostsim host per management
address (its root a sandbox with the recording stand-ins of tests/support/sandbox.py: DGX H100
drives and HCAs on the GPU nodes, a `cli` on the switches), the Redfish stand-in on every BMC
address, and the engine's environment (a file backend, the stack's secrets, the run's CA).
Its API server and what runs on it: support/cluster_api.py.

Nothing is dialled before e2e/guard.py has passed the stack's plan, and hostsim and the Redfish
stand-in refuse any address outside 127.0.0.0/8 themselves."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from components.model.cluster import Cluster
from components.wiring.loading import validate_cluster
from e2e.guard import endpoints, outside
from e2e.keys import make_keys
from e2e.redfish import certificates
from e2e.stack import CLUSTER_KEY, STACK, Keys, e2e_inventory, e2e_stack
from offline.stackconfig import load_stack_config
from support.engine import local_env
from support.hostsim import go_missing, serve, serving
from support.project import REPO, copy_repo, run_offline
from support.sandbox import DGX_H100_HCAS, STUB_DIR, Sandbox, dgx_h100

CHARTS = REPO.parent / "shared" / "upstream" / "charts"
REF = REPO.parent / "shared" / "ref"  # upstream CRDs
OUT = REPO / "build" / "e2e"  # what `make e2e` leaves for a reader (and CI's artifacts)
USER = "ubuntu"
POLL_S = 0.2  # how often the power-cycle watcher looks for a scheduled shutdown
SPAWN_RETRIES = 10  # polls in a row a stand-in may fail to start a process before it gives up
DOWN_S = 1.0  # how long a rebooting host is down
SWITCH_USER = "admin"
BMC_USER = "admin"
# Stand-ins the hosts' roots need beyond sandbox.py's (tests/support/stubs/datacentre/): the
# commands arrive as `sudo bash -s` (every sandbox already runs as root), a switch's management
# CLI reads its config on stdin, and kubeadm, kubectl, systemctl, shutdown and sleep reach
# across the hosts over the sandbox's own stubs (renamed <name>-sandbox).
STAND_INS = STUB_DIR / "datacentre"
SUDO = (STAND_INS / "sudo.sh").read_text()
SWITCH_CLI = (STAND_INS / "cli.sh").read_text()
# The cluster as every host's kubectl stub sees it (Nodes, kubelet versions, ConfigMaps, the API
# server's version): one directory the hosts share, where a lone sandbox keeps its own.
CLUSTER = "/stub/state/cluster"
# _join_cluster fills in its __SERVER__ (the API endpoint) and __TOKEN__ (the stack's identity).
KUBEADM = (STAND_INS / "kubeadm.sh").read_text()
# _join_cluster fills in its __DOWN__ (DOWN).
SHUTDOWN = (STAND_INS / "shutdown.sh").read_text()
DOWN = "/stub/state/down"  # while it exists hostsim lets nobody but root log in
SLEEP = (STAND_INS / "sleep.sh").read_text()
SYSTEMCTL = (STAND_INS / "systemctl.sh").read_text()
KUBECTL = (STAND_INS / "kubectl.sh").read_text()


# The stack's secrets by config key, and the variables tools/set-stack-secrets.sh reads them from.
SECRET_VARIABLES = {
    "sshPrivateKey": "GPU_CLUSTER_SSH_PRIVATE_KEY", "bmcPassword": "GPU_CLUSTER_BMC_PASSWORD",
    "switchPassword": "GPU_CLUSTER_SWITCH_PASSWORD", "fabricMKey": "GPU_CLUSTER_FABRIC_M_KEY",
    "fabricSmKey": "GPU_CLUSTER_FABRIC_SM_KEY", "fabricSaKey": "GPU_CLUSTER_FABRIC_SA_KEY"}
# How the offline plan shows a secret inside a value (offline/: "[secret <key> version <n>]").
SECRET_IN_PLAN = re.compile(r"\[secret (\w+) version \d+\]")


@dataclass
class Host:
    name: str
    address: str
    user: str
    sandbox: Sandbox
    calls: Path  # hostsim's log of the commands it ran there


@dataclass
class Datacentre:
    work: Path
    project: Path
    keys: Keys
    plan: dict[str, Any]
    cluster: Cluster  # the stack's cluster the plan was made from (an added node's too)
    plan_outputs: dict[str, Any] = field(default_factory=dict)  # the stack's, as planned
    hosts: dict[str, Host] = field(default_factory=dict)
    bmcs: dict[str, str] = field(default_factory=dict)  # host -> BMC address
    secrets: dict[str, str] = field(default_factory=dict)
    ca: Path | None = None
    stack_token: str = ""  # what the API server knows the stack's identity by
    passphrase: str = ""  # the stack's secrets' (engine_env makes it once)
    boots: list[tuple[str, datetime]] = field(default_factory=list)  # (host, when it came up)

    @property
    def order(self) -> Path:
        return self.work / "order.log"

    @property
    def redfish_log(self) -> Path:
        return self.work / "redfish.log"

    @property
    def admission_log(self) -> Path:
        return self.work / "admission.log"

    @property
    def timings(self) -> Path:
        """One JSON line per CLI run: its arguments, exit status and wall seconds."""
        return self.work / "timings.jsonl"

    @property
    def events(self) -> Path:
        """The first `pulumi up`'s engine events (`--event-log`)."""
        return self.work / "events-up.jsonl"

    @property
    def control_plane(self) -> str:
        """The host that runs `kubeadm init`."""
        (host,) = [r["name"].removesuffix("-kubeadm-init") for r in self.plan["resources"]
                   if r["name"].endswith("-kubeadm-init")]
        return host

    @property
    def api_endpoint(self) -> str:
        """The control plane's API endpoint, as the stack plans it (`https://<address>:<port>`)."""
        return str(self.plan_outputs["apiEndpoint"])

    def sent(self, planned: str) -> str:
        """What the engine sends for a value the offline plan shows: its secrets filled in."""
        return SECRET_IN_PLAN.sub(
            lambda m: self.secrets[SECRET_VARIABLES[m.group(1)]], planned)

    def calls_in_order(self) -> list[dict[str, Any]]:
        """Every command hostsim ran, on every host, in the order each run logged them."""
        return [json.loads(x) for x in self.order.read_text().splitlines()] \
            if self.order.exists() else []

    def calls(self, host: str) -> list[dict[str, Any]]:
        path = self.hosts[host].calls
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def e2e_project(work: Path) -> tuple[Path, Keys]:
    """A copy of the project with the e2e stack (`Pulumi.e2e.yaml`, the inventory's host keys)
    and what it names: the chart archives and the Training Operator's vendored manifests; and
    the keys."""
    if not CHARTS.is_dir():
        pytest.skip(f"no chart archives at {CHARTS}")
    if (why := go_missing()) is not None:
        pytest.skip(why)  # tools/vendor-training-operator.sh reads the operator's Go module
    project = copy_repo(work / "gpu-cluster")
    (project / ".venv").symlink_to(REPO / ".venv")
    (project / "policies" / "venv").symlink_to(REPO / ".venv")  # the pack's (PulumiPolicy.yaml)
    prod = yaml.safe_load((project / "Pulumi.prod.yaml").read_text())
    cluster = prod["config"][CLUSTER_KEY]
    inventory = project / cluster["inventoryFile"]
    nodes = sorted({row.split(",")[0] for row in inventory.read_text().splitlines()[1:]})
    names = [h["hostname"] for h in cluster["hosts"]] + nodes + list(
        cluster["fabric"]["switchHostKeys"])
    keys = make_keys(names, work / "keys")
    (project / f"Pulumi.{STACK}.yaml").write_text(
        yaml.safe_dump(e2e_stack(prod, keys, "charts"), sort_keys=False))
    inventory.write_text(e2e_inventory(inventory.read_text(), keys.host_keys))
    (project / "charts").symlink_to(CHARTS)
    vendor = subprocess.run(["bash", "tools/vendor-training-operator.sh",
                             cluster["platform"]["trainingOperator"]["version"]],
                            cwd=project, capture_output=True, text=True, timeout=600)
    assert vendor.returncode == 0, vendor.stderr
    return project, keys


def build(work: Path) -> Datacentre:
    """The project with its e2e stack, checked by the guard, and every host's root."""
    project, keys = e2e_project(work)
    preview = run_offline(project, "preview", "--stack", STACK, "--quiet")
    assert preview.returncode == 0, preview.stdout[-3000:] + preview.stderr[-3000:]
    plan = json.loads((project / "build" / STACK / "plan.json").read_text())
    refused = outside(plan)
    assert not refused, f"the e2e stack would dial outside this machine: {refused[:5]}"
    outputs = json.loads((project / "build" / STACK / "outputs.json").read_text())
    dc = Datacentre(work, project, keys, plan, stack_cluster(project),
                    outputs.get("outputs") or {})
    dc.stack_token = secrets.token_hex(16)
    _hosts(dc)
    return dc


def _gpu_nodes(dc: Datacentre) -> dict[str, str]:
    """The GPU nodes of the stack's inventory, with their management MACs."""
    cluster = yaml.safe_load((dc.project / f"Pulumi.{STACK}.yaml").read_text())["config"][
        CLUSTER_KEY]
    rows = (dc.project / cluster["inventoryFile"]).read_text().splitlines()[1:]
    return {cells[0]: cells[4] for cells in (row.split(",") for row in rows)}


def replan(dc: Datacentre) -> None:
    """After a change: the plan the last offline preview wrote, checked by the guard, and a
    root for each host it adds (an added node's inventory rows name its GPU nodes)."""
    plan = json.loads((dc.project / "build" / STACK / "plan.json").read_text())
    refused = outside(plan)
    assert not refused, f"the change would dial outside this machine: {refused[:5]}"
    dc.plan = plan
    dc.cluster = stack_cluster(dc.project)
    _hosts(dc)


def stack_cluster(project: Path) -> Cluster:
    """The e2e stack's cluster, validated as the program validates it."""
    raw = json.loads(load_stack_config(project, STACK).config[CLUSTER_KEY])
    return validate_cluster(raw, project)


def _hosts(dc: Datacentre) -> None:
    """A sandbox per SSH endpoint the plan has and `dc` does not yet, named by the resource
    that prepares or configures it; the BMC each `<host>-bmc` command reaches."""
    dc.bmcs = {e.urn.rsplit("::", 1)[1].removesuffix("-bmc"): e.address
               for e in endpoints(dc.plan) if e.via == "url"}
    init = dc.control_plane
    cluster = dc.work / "cluster"
    for d in ("nodes", "kubelet", "configmaps", "registered"):
        (cluster / d).mkdir(parents=True, exist_ok=True)
    ca = cluster_ca(dc)
    server = dc.api_endpoint
    gpu_nodes = _gpu_nodes(dc)
    for r in dc.plan["resources"]:
        conn = (r.get("inputs") or {}).get("connection") or {}
        name = r["name"]
        if r["type"] != "command:remote:Command":
            continue
        for suffix, user in (("-prepare", USER), ("-config", SWITCH_USER)):
            if name.endswith(suffix) and conn.get("user") == user \
                    and name.removesuffix(suffix) not in dc.hosts:
                host = name.removesuffix(suffix)
                sb = _sandbox(dc.work, host, gpu_nodes.get(host), user == SWITCH_USER)
                if user == USER:
                    _join_cluster(sb, cluster, server, dc.stack_token,
                                  ca if host == init else None)
                dc.hosts[host] = Host(host, conn["host"], user, sb,
                                      dc.work / "calls" / f"{host}.log")


CLUSTER_CA = "cluster-ca"  # under the run's directory: the cluster's CA and the API server's


def cluster_ca(dc: Datacentre) -> Path:
    """The cluster's CA certificate (a real one: the stack hashes its public key), made once
    with the API server's serving certificate for the stack's API endpoint."""
    root = dc.work / CLUSTER_CA
    if not (root / "ca.crt").exists():
        certificates(root, [str(urlsplit(dc.api_endpoint).hostname)])
    return root / "ca.crt"


def _join_cluster(sb: Sandbox, cluster: Path, server: str, token: str,
                  ca: Path | None) -> None:
    """A host of the Kubernetes cluster: the shared cluster state, kubeadm across hosts; the
    control plane (`ca`: the cluster's CA) also waits for Nodes and runs the real openssl."""
    sb.shared = {CLUSTER: cluster}
    stand_ins = {"kubeadm": KUBEADM.replace("__SERVER__", server).replace("__TOKEN__", token),
                 "systemctl": SYSTEMCTL, "shutdown": SHUTDOWN.replace("__DOWN__", DOWN),
                 "sleep": SLEEP}
    if ca is not None:
        stand_ins["kubectl"] = KUBECTL
        shutil.copyfile(ca, sb.state / "e2e-ca.crt")
        (sb.bin / "openssl").unlink()
    for name, text in stand_ins.items():
        (sb.bin / name).rename(sb.bin / f"{name}-sandbox")
        (sb.bin / name).write_text(text)
        (sb.bin / name).chmod(0o755)


def _sandbox(work: Path, host: str, gpu_node_mac: str | None, switch: bool) -> Sandbox:
    """A host's root; a GPU node's (its management MAC given) is a DGX H100's."""
    sb = Sandbox(work / "hosts" / host, host, DGX_H100_HCAS if gpu_node_mac else {},
                 management_mac=gpu_node_mac)
    if gpu_node_mac:
        dgx_h100(sb, data_array=False)
    for name, text in (("sudo", SUDO), *((("cli", SWITCH_CLI),) if switch else ())):
        (sb.bin / name).write_text(text)
        (sb.bin / name).chmod(0o755)
    if not switch:
        # The login user the installer made. The sandbox maps one uid (this process's), so
        # the user owns its files under that uid.
        uid = os.getuid()
        (sb.root / "etc/passwd").write_text(
            f"root:x:0:0:root:/root:/bin/bash\n{USER}:x:{uid}:{uid}::/home/{USER}:/bin/bash\n")
        (sb.root / f"home/{USER}/.ssh").mkdir(parents=True)
    return sb


def hostsim_spec(dc: Datacentre) -> Path:
    (dc.work / "calls").mkdir(exist_ok=True)
    authorized = dc.work / "authorized_keys"
    authorized.write_text(dc.keys.client_public + "\n")
    password = dc.work / "switch-password"
    password.write_text(dc.secrets["GPU_CLUSTER_SWITCH_PASSWORD"] + "\n")
    hosts = []
    for h in dc.hosts.values():
        auth = ({"passwordFile": str(password)} if h.user == SWITCH_USER else
                {"authorizedKeys": str(authorized),
                 "nologinFile": str(h.sandbox.state / Path(DOWN).name)})
        hosts.append({"name": h.name, "address": h.address, "port": 22,
                      "hostKey": str(dc.work / "keys" / "hosts" / h.name), "user": h.user,
                      "exec": h.sandbox.command(), "callsLog": str(h.calls), **auth})
    spec = dc.work / "hostsim.json"
    spec.write_text(json.dumps({"hosts": hosts, "order": str(dc.order)}, indent=1))
    return spec


def redfish_spec(dc: Datacentre) -> Path:
    dc.ca, cert, key = certificates(dc.work / "tls", sorted(dc.bmcs.values()))
    password = dc.work / "bmc-password"
    password.write_text(dc.secrets["GPU_CLUSTER_BMC_PASSWORD"] + "\n")
    spec = dc.work / "redfish.json"
    spec.write_text(json.dumps({"bmcs": dc.bmcs, "port": 443, "user": BMC_USER,
                                "passwordFile": str(password), "cert": str(cert),
                                "key": str(key), "log": str(dc.redfish_log)}))
    return spec


def make_secrets(dc: Datacentre) -> None:
    """The stack's secrets, made for this run (tools/set-stack-secrets.sh reads these)."""
    dc.secrets = {
        "GPU_CLUSTER_SSH_PRIVATE_KEY": (dc.work / "keys" / "client").read_text(),
        "GPU_CLUSTER_BMC_PASSWORD": secrets.token_urlsafe(16),
        "GPU_CLUSTER_SWITCH_PASSWORD": secrets.token_urlsafe(16),
        **{f"GPU_CLUSTER_FABRIC_{k}_KEY": f"0x{secrets.token_hex(8)}" for k in ("M", "SM", "SA")},
    }


def engine_env(dc: Datacentre) -> dict[str, str]:
    """The CLI's environment: a file backend and home under the run's directory, no plugin
    downloads, the run's CA for the BMCs' HTTPS (the local commands' curl inherits it)."""
    dc.passphrase = dc.passphrase or "e2e-" + secrets.token_hex(8)  # the stack's, kept
    env = local_env(dc.work, dc.passphrase)
    env["CURL_CA_BUNDLE"] = str(dc.ca) if dc.ca else ""
    return env


@contextlib.contextmanager
def running(dc: Datacentre) -> Iterator[None]:
    """hostsim, the Redfish stand-in and the hosts' power cycles, for the block (the API
    server runs longer: `cluster_api.api_server`)."""
    redfish = [sys.executable, "-m", "e2e.redfish", str(redfish_spec(dc))]
    with serve(hostsim_spec(dc)), serving(
            redfish, dc.work / "redfish.stderr.log", "the Redfish stand-in",
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}), _power_cycles(dc):
        yield


@contextlib.contextmanager
def _power_cycles(dc: Datacentre) -> Iterator[None]:
    """A host whose reboot is scheduled (the `shutdown` stand-in leaves it in the state and
    marks the host down, so hostsim lets nobody but root log in) goes down a moment later and
    boots: Sandbox.reboot() gives it a new boot ID and the kernel arguments update-grub staged,
    and clears /run; its sshd takes logins again last. Each boot is recorded in `dc.boots`."""
    def cycle() -> None:
        for h in dc.hosts.values():
            if (h.sandbox.state / "shutdown-scheduled").exists():
                time.sleep(DOWN_S)
                # Ubuntu's udev rules assemble every array whose members carry an md
                # superblock at boot (mdadm --incremental): the scratch array comes back.
                h.sandbox.boot_arrays |= {md.name for md in
                                          (h.sandbox.root / "sys/block").glob("md*")}
                h.sandbox.reboot()
                dc.boots.append((h.name, datetime.now(UTC)))
                (h.sandbox.state / Path(DOWN).name).unlink(missing_ok=True)

    with polling("power-cycles", cycle) as errors:
        yield
    assert not errors, f"a host failed to boot: {errors[0]}"


@contextlib.contextmanager
def polling(name: str, step: Callable[[], None]) -> Iterator[list[BaseException]]:
    """`step` every POLL_S on a thread of its own, for the block; yields the error that
    stopped it, if one did (whatever waited on it fails and says so meanwhile)."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        refused = 0
        while not stop.wait(POLL_S):
            try:
                step()
                refused = 0
            except OSError as err:
                # A process the kernel would not start (EAGAIN, ENOMEM, EFAULT seen under a
                # loaded CI machine): the next poll tries again, as a controller would.
                refused += 1
                if refused <= SPAWN_RETRIES:
                    continue
                traceback.print_exc()
                errors.append(err)
                return
            except Exception as err:
                # Said at once, on stderr: what waits on this step fails only later.
                traceback.print_exc()
                errors.append(err)
                return

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield errors
    finally:
        stop.set()
        thread.join()


def cli(dc: Datacentre, env: Mapping[str, str], *args: str, timeout: float = 1800
        ) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    done = subprocess.run(args, cwd=dc.project, env=dict(env), capture_output=True, text=True,
                          timeout=timeout)
    seconds = time.monotonic() - started
    with (dc.work / "cli.log").open("a") as f:
        f.write(f"$ {' '.join(args)}  # exit {done.returncode} in "
                f"{seconds:.1f}s\n{done.stdout[-20000:]}\n{done.stderr[-20000:]}\n")
    with dc.timings.open("a") as f:  # what `make bench` reports of the run
        f.write(json.dumps({"args": list(args), "exit": done.returncode,
                            "seconds": round(seconds, 3)}) + "\n")
    return done


def publish(dc: Datacentre, state: str) -> Path:
    """build/e2e/: the engine's previews (`preview.json` the first, `preview2.json` the one
    after `up`, `preview-<change>.json` a day-2 change's), its state export (every secret in
    it encrypted), the order of every command hostsim ran (`calls.log`, one JSON line each,
    stdin never recorded), each host's own log, the requests the BMCs' and the webhooks'
    stand-ins received, each CLI run's seconds and the first `up`'s engine events."""
    shutil.rmtree(OUT, ignore_errors=True)
    (OUT / "hosts").mkdir(parents=True)
    (OUT / "state.json").write_text(state)
    for preview in sorted(dc.work.glob("preview*.json")):
        shutil.copyfile(preview, OUT / preview.name)
    shutil.copyfile(dc.order, OUT / "calls.log")
    for h in dc.hosts.values():
        if h.calls.exists():
            shutil.copyfile(h.calls, OUT / "hosts" / f"{h.name}.log")
    for log in (dc.redfish_log, dc.admission_log, dc.timings, dc.events):
        if log.exists():
            shutil.copyfile(log, OUT / log.name)
    return OUT
