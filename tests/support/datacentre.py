"""The simulated data centre the real engine runs `pulumi up` against: the e2e stack (prod's
cluster on loopback, e2e/stack.py) in a copy of the project, one hostsim host per management
address (its root a sandbox with the recording stand-ins of tests/support/sandbox.py: DGX H100
drives and HCAs on the GPU nodes, a `cli` on the switches), the Redfish stand-in on every BMC
address, and the engine's environment (a file backend, the stack's secrets, the run's CA).

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
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.guard import endpoints, outside
from e2e.keys import make_keys
from e2e.redfish import certificates
from e2e.stack import CLUSTER_KEY, STACK, Keys, e2e_inventory, e2e_stack
from support.engine import local_env
from support.hostsim import go_missing, serve, serving
from support.project import REPO, copy_repo, run_offline
from support.sandbox import DGX_H100_HCAS, Sandbox, dgx_h100

CHARTS = REPO.parent / "shared" / "upstream" / "charts"
OUT = REPO / "build" / "e2e"  # what `make e2e` leaves for a reader (and CI's artifacts)
USER = "ubuntu"
SWITCH_USER = "admin"
BMC_USER = "admin"
# Stand-ins the hosts' roots need beyond sandbox.py's: the commands arrive as `sudo bash -s`
# (every sandbox already runs as root), and a switch's management CLI reads its config on stdin.
SUDO = '#!/bin/bash\n# Stand-in: the sandbox runs as root already.\nexec "$@"\n'
SWITCH_CLI = """#!/bin/bash
# Stand-in for the switch's management CLI: keeps each session's lines, in order.
n=$(ls /stub/state/cli 2>/dev/null | wc -l)
mkdir -p /stub/state/cli
cat > "/stub/state/cli/$(printf '%03d' "$n").txt"
"""


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
    hosts: dict[str, Host] = field(default_factory=dict)
    bmcs: dict[str, str] = field(default_factory=dict)  # host -> BMC address
    secrets: dict[str, str] = field(default_factory=dict)
    ca: Path | None = None

    @property
    def order(self) -> Path:
        return self.work / "order.log"

    @property
    def redfish_log(self) -> Path:
        return self.work / "redfish.log"

    def sent(self, planned: str) -> str:
        """What the engine sends for a value the offline plan shows: its secrets filled in."""
        return SECRET_IN_PLAN.sub(
            lambda m: self.secrets[SECRET_VARIABLES[m.group(1)]], planned)

    def calls(self, host: str) -> list[dict[str, Any]]:
        path = self.hosts[host].calls
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def e2e_project(work: Path) -> tuple[Path, Keys, list[str]]:
    """A copy of the project with the e2e stack (`Pulumi.e2e.yaml`, the inventory's host keys)
    and what it names: the chart archives and the Training Operator's vendored manifests; the
    keys, and the GPU nodes (the inventory's)."""
    if not CHARTS.is_dir():
        pytest.skip(f"no chart archives at {CHARTS}")
    if (why := go_missing()) is not None:
        pytest.skip(why)  # tools/vendor-training-operator.sh reads the operator's Go module
    project = copy_repo(work / "gpu-cluster")
    (project / ".venv").symlink_to(REPO / ".venv")
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
    return project, keys, nodes


def build(work: Path) -> Datacentre:
    """The project with its e2e stack, checked by the guard, and every host's root."""
    project, keys, nodes = e2e_project(work)
    preview = run_offline(project, "preview", "--stack", STACK, "--quiet")
    assert preview.returncode == 0, preview.stdout[-3000:] + preview.stderr[-3000:]
    plan = json.loads((project / "build" / STACK / "plan.json").read_text())
    refused = outside(plan)
    assert not refused, f"the e2e stack would dial outside this machine: {refused[:5]}"
    dc = Datacentre(work, project, keys, plan)
    _hosts(dc, nodes)
    return dc


def _hosts(dc: Datacentre, gpu_nodes: list[str]) -> None:
    """A sandbox per SSH endpoint, named by the resource that prepares or configures it; the
    BMC each `<host>-bmc` command reaches."""
    dc.bmcs = {e.urn.rsplit("::", 1)[1].removesuffix("-bmc"): e.address
               for e in endpoints(dc.plan) if e.via == "url"}
    for r in dc.plan["resources"]:
        conn = (r.get("inputs") or {}).get("connection") or {}
        name = r["name"]
        if r["type"] != "command:remote:Command":
            continue
        for suffix, user in (("-prepare", USER), ("-config", SWITCH_USER)):
            if name.endswith(suffix) and conn.get("user") == user:
                host = name.removesuffix(suffix)
                dc.hosts[host] = Host(host, conn["host"], user, _sandbox(dc.work, host,
                                      host in gpu_nodes, user == SWITCH_USER),
                                      dc.work / "calls" / f"{host}.log")


def _sandbox(work: Path, host: str, gpu_node: bool, switch: bool) -> Sandbox:
    sb = Sandbox(work / "hosts" / host, host, DGX_H100_HCAS if gpu_node else {})
    if gpu_node:
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
                {"authorizedKeys": str(authorized)})
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
    env = local_env(dc.work, "e2e-" + secrets.token_hex(8))
    env["CURL_CA_BUNDLE"] = str(dc.ca) if dc.ca else ""
    return env


@contextlib.contextmanager
def running(dc: Datacentre) -> Iterator[None]:
    """hostsim and the Redfish stand-in, for the block."""
    redfish = [sys.executable, "-m", "e2e.redfish", str(redfish_spec(dc))]
    with serve(hostsim_spec(dc)), serving(
            redfish, dc.work / "redfish.stderr.log", "the Redfish stand-in",
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}):
        yield


def cli(dc: Datacentre, env: Mapping[str, str], *args: str, timeout: float = 1800
        ) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    done = subprocess.run(args, cwd=dc.project, env=dict(env), capture_output=True, text=True,
                          timeout=timeout)
    with (dc.work / "cli.log").open("a") as f:
        f.write(f"$ {' '.join(args)}  # exit {done.returncode} in "
                f"{time.monotonic() - started:.1f}s\n{done.stdout[-20000:]}\n"
                f"{done.stderr[-20000:]}\n")
    return done


def publish(dc: Datacentre, state: str) -> Path:
    """build/e2e/: the engine's state export (every secret in it encrypted), the order of every
    command hostsim ran (`calls.log`, one JSON line each, stdin never recorded), each host's
    own log, and the requests the BMCs' stand-in received."""
    shutil.rmtree(OUT, ignore_errors=True)
    (OUT / "hosts").mkdir(parents=True)
    (OUT / "state.json").write_text(state)
    shutil.copyfile(dc.order, OUT / "calls.log")
    for h in dc.hosts.values():
        if h.calls.exists():
            shutil.copyfile(h.calls, OUT / "hosts" / f"{h.name}.log")
    if dc.redfish_log.exists():
        shutil.copyfile(dc.redfish_log, OUT / "redfish.log")
    return OUT
