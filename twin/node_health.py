"""GPU nodes as node-problem-detector sees them, without the hardware: a DGX H100's host files
and stand-in tools under one directory, and the real node-problem-detector run over them as on
a node, reporting to an API server. The twin runs one per simulated GPU node; the tests run the
same pieces (docs/health.md).

`FixtureNode` lays out the host files the checks read (each rail's /sys/class/infiniband port,
/proc/mdstat and /sys/block/md*/md with the boot RAID1 and the scratch RAID0) and stand-ins
named nvidia-smi, dcgmi and systemctl that print what the real tools print for the queries the
checks make, from files a caller changes to inject a fault. `lay_out_host` adds what
`health.files` plans for the node (monitors over a kernel log file, the checks, its rails as
planned); `exporting_detector` runs node-problem-detector v1.36.0 (`detector_binary`, built by
tools/npd/build.sh) with its Kubernetes exporter on, every process bounded in time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from components.model.cluster import Cluster
from components.planning import health, health_detector

from .controlplane import ControlPlane

REPO = Path(__file__).resolve().parent.parent
NPD_VERSION = "v1.36.0"
HEALTHY_RATE = "400 Gb/sec (4X NDR)"
COUNTERS = ("symbol_error", "link_downed", "local_link_integrity_errors",
            "excessive_buffer_overrun_errors")
# PCI bus of each GPU of a DGX H100, as nvidia-smi -q names them.
GPU_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")

NVIDIA_SMI = """#!/usr/bin/env bash
# Stand-in for nvidia-smi: the two queries the health checks make, from the fixture's files.
case "$*" in
  "nvlink --status") cat '{tools}/nvlink-status' ;;
  "-q") cat '{tools}/query' ;;
  *) echo "stand-in nvidia-smi: no answer for: $*" >&2; exit 9 ;;
esac
"""
DCGMI = """#!/usr/bin/env bash
# Stand-in for dcgmi health against a host engine: --fetch shows the watches (Off until --set),
# --set a turns them on, --check prints the fixture's report. An unreachable engine fails.
if [ -e '{tools}/dcgm-down' ]; then
  echo "Error: unable to establish a connection to $3"
  exit 255
fi
case "$4" in
  --fetch) printf '| %-26s | %-46s |\\n' "PCIe" "$(cat '{tools}/dcgm-watches')" \\
             "NVLINK" "$(cat '{tools}/dcgm-watches')" ;;
  --set) [ "$5" = a ] && echo On >'{tools}/dcgm-watches' && echo "Health monitor systems set." ;;
  --check) cat '{tools}/dcgm-report' ;;
  *) echo "stand-in dcgmi: no answer for: $*" >&2; exit 9 ;;
esac
"""
SYSTEMCTL = """#!/usr/bin/env bash
# Stand-in for systemctl is-active: the unit's state from the fixture.
[ "$1" = is-active ] && [ "$2" = nvidia-fabricmanager ] || exit 9
state="$(cat '{tools}/fabricmanager')"
echo "$state"
[ "$state" = active ]
"""
MDSTAT = """Personalities : [raid0] [raid1]
md0 : active raid1 nvme1n1[1]{boot_failed} nvme0n1[0]
      1874715648 blocks super 1.2 [2/{boot_up}] [{boot_status}]
      bitmap: 1/14 pages [4KB], 65536KB chunk

md127 : active raid0 {scratch_members}
      30004846592 blocks super 1.2 512k chunks

unused devices: <none>
"""


def _mdstat(**boot: object) -> str:
    """The boot mirror (md0) and the eight-drive scratch RAID0 (md127), as DGX OS has them."""
    members = " ".join(f"nvme{i + 2}n1[{i}]" for i in reversed(range(8)))
    return MDSTAT.format(scratch_members=members, **boot)


def _report(overall: str, lines: Sequence[tuple[str, str]] = ()) -> str:
    """`dcgmi health --check` as dcgmi prints it: a 28-wide key column, a 60-wide value."""
    rule = "+" + "-" * 27 + "+" + "-" * 58 + "+"
    rows = [rule, f"| {'Health Monitor Report':<84} |", rule.replace("-", "="),
            f"| {'Overall Health':<25} | {overall:<56} |"]
    rows += [f"| {key:<25} | {value:<56} |" for key, value in lines]
    return "\n".join([*rows, rule]) + "\n"


def _nvlink_status(inactive: dict[int, set[int]], links: int = 18) -> str:
    out = []
    for gpu in range(len(GPU_BUSES)):
        uuid = f"GPU-{gpu:08x}-0000-0000-0000-000000000000"
        out.append(f"GPU {gpu}: NVIDIA H100 80GB HBM3 (UUID: {uuid})")
        out += [f"\t Link {n}: " + ("<inactive>" if n in inactive.get(gpu, set())
                                     else "26.562 GB/s") for n in range(links)]
    return "\n".join(out) + "\n"


def _query(fabric: dict[int, tuple[str, str]]) -> str:
    out = ["==============NVSMI LOG==============", "",
           f"{'Driver Version':<42}: 550.127.08", f"{'Attached GPUs':<42}: 8"]
    for i, bus in enumerate(GPU_BUSES):
        state, status = fabric.get(i, ("Completed", "Success"))
        out += [f"GPU 00000000:{bus}:00.0", f"    {'Product Name':<38}: NVIDIA H100 80GB HBM3",
                "    Fabric", f"        {'State':<34}: {state}",
                f"        {'Status':<34}: {status}", f"        {'CliqueId':<34}: 0",
                f"    {'Processes':<38}: None"]
    return "\n".join(out) + "\n"


class FixtureNode:
    """One GPU node's host files and stand-in tools under `root`, healthy until told
    otherwise: what the checks see where a node's HEALTH_ROOT and PATH would be."""

    def __init__(self, root: Path, hcas: Sequence[str]):
        self.root, self.hcas = root, tuple(hcas)
        self.tools, self.bin, self.state = root / "tools", root / "bin", root / "state"
        for d in (self.tools, self.bin, self.state):
            d.mkdir(parents=True, exist_ok=True)
        for name, text in (("nvidia-smi", NVIDIA_SMI), ("dcgmi", DCGMI),
                           ("systemctl", SYSTEMCTL)):
            (self.bin / name).write_text(text.format(tools=self.tools))
            (self.bin / name).chmod(0o755)
        (self.tools / "dcgm-watches").write_text("Off\n")
        self.heal()

    def _port(self, hca: str) -> Path:
        return self.root / "sys/class/infiniband" / hca / "ports/1"

    def _write(self, path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def heal(self) -> None:
        """Every rail up at 400 Gb/s, NVLinks and fabric up, DCGM healthy, arrays whole. The
        error counters keep their values: a counter never goes back by itself."""
        for hca in self.hcas:
            port = self._port(hca)
            self._write(port / "state", "4: ACTIVE\n")
            self._write(port / "phys_state", "5: LinkUp\n")
            self._write(port / "rate", HEALTHY_RATE + "\n")
            for counter in COUNTERS:
                if not (port / "counters" / counter).exists():
                    self._write(port / "counters" / counter, "0\n")
        (self.tools / "nvlink-status").write_text(_nvlink_status({}))
        (self.tools / "query").write_text(_query({}))
        (self.tools / "fabricmanager").write_text("active\n")
        (self.tools / "dcgm-report").write_text(_report("Healthy"))
        (self.tools / "dcgm-down").unlink(missing_ok=True)
        self._write(self.root / "proc/mdstat",
                    _mdstat(boot_failed="", boot_up=2, boot_status="UU"))
        for md, disks in (("md0", 2), ("md127", 8)):
            self._write(self.root / f"sys/block/{md}/md/array_state", "clean\n")
            self._write(self.root / f"sys/block/{md}/md/raid_disks", f"{disks}\n")

    # ------------------------------------------------------------ faults

    def rail_down(self, hca: str) -> None:
        self.port_state(hca, "1: DOWN", "3: Disabled")

    def port_state(self, hca: str, state: str, phys_state: str) -> None:
        """The port's state and physical state as the kernel writes them (`4: ACTIVE`,
        `5: LinkUp`)."""
        self._write(self._port(hca) / "state", state + "\n")
        self._write(self._port(hca) / "phys_state", phys_state + "\n")

    def set_counter(self, hca: str, counter: str, value: int) -> None:
        self._write(self._port(hca) / "counters" / counter, f"{value}\n")

    def rail_rate(self, hca: str, rate: str) -> None:
        self._write(self._port(hca) / "rate", rate + "\n")

    def add_errors(self, hca: str, counter: str, n: int) -> None:
        path = self._port(hca) / "counters" / counter
        path.write_text(f"{int(path.read_text()) + n}\n")

    def nvlinks_inactive(self, gpu: int, links: set[int]) -> None:
        (self.tools / "nvlink-status").write_text(_nvlink_status({gpu: links}))

    def fabric_manager(self, state: str) -> None:
        (self.tools / "fabricmanager").write_text(state + "\n")

    def gpu_fabric(self, gpu: int, state: str, status: str) -> None:
        (self.tools / "query").write_text(_query({gpu: (state, status)}))

    def dcgm(self, overall: str, lines: Sequence[tuple[str, str]] = ()) -> None:
        (self.tools / "dcgm-report").write_text(_report(overall, lines))

    def dcgm_unreachable(self) -> None:
        (self.tools / "dcgm-down").write_text("")

    def scratch_broken(self) -> None:
        self._write(self.root / "sys/block/md127/md/array_state", "broken\n")

    def boot_mirror_degraded(self) -> None:
        self._write(self.root / "proc/mdstat",
                    _mdstat(boot_failed="(F)", boot_up=1, boot_status="U_"))

    def env(self, node_name: str, path: str) -> dict[str, str]:
        """What a check runs with: the fixture as the host, the stand-ins first on PATH."""
        return {"HEALTH_ROOT": str(self.root), "HEALTH_STATE": str(self.state),
                "NODE_NAME": node_name, "PATH": f"{self.bin}:{path}", "LC_ALL": "C"}


def kernel_line(message: str) -> str:
    """A kernel log line as the file-log kernel monitor reads it (health.LogFile):
    `<RFC 3339 time> <message>`."""
    return f"{datetime.now(UTC).isoformat()} {message}\n"


# ---------------------------------------------------------------- a simulated GPU node


@dataclass
class SimulatedHost:
    """One simulated GPU node: its stand-in host, kernel log file and node-problem-detector's
    files (monitors/, plugins/, rails/ as `health.files` plans them)."""

    name: str
    fixture: FixtureNode
    kernel_log: Path
    config: Path

    def monitors(self) -> tuple[Path, list[Path]]:
        """The system log monitor (the kernel's) and the custom plugin monitors."""
        monitors = self.config / "monitors"
        kernel = monitors / f"{health.KERNEL_SOURCE}.json"
        return kernel, sorted(p for p in monitors.glob("*.json") if p != kernel)

    def rails(self) -> dict[int, str]:
        """rail -> HCA, as the node's rails file plans them."""
        rows = (line.split("\t") for line in (self.config / "rails" / self.name)
                .read_text().splitlines())
        return {int(row[0]): row[1] for row in rows}

    def kernel(self, message: str) -> None:
        """`message` logged by the kernel now."""
        with self.kernel_log.open("a") as f:
            f.write(kernel_line(message))


def lay_out_host(cluster: Cluster, name: str, root: Path, interval_s: int) -> SimulatedHost:
    """`name`'s host under `root`: the stand-in host (root/host), an empty kernel log
    (root/kern.log) and the planned files (root/config), the checks running every
    `interval_s` seconds."""
    kernel_log, config = root / "kern.log", root / "config"
    layout = health.Layout(plugins=str(config / "plugins"), rails=str(config / "rails"))
    for path, text in health.files(cluster, layout, health.LogFile(str(kernel_log)),
                                   interval_s=interval_s).items():
        (config / path).parent.mkdir(parents=True, exist_ok=True)
        (config / path).write_text(text)
        if path.startswith("plugins/"):
            (config / path).chmod(0o755)  # the detector runs them as programs
    hcas = [line.split("\t")[1] for line in (config / "rails" / name).read_text().splitlines()]
    kernel_log.write_text("")
    return SimulatedHost(name, FixtureNode(root / "host", hcas), kernel_log, config)


def conditions_of(node: Mapping[str, Any], kinds: set[str]) -> dict[str, tuple[str, str]]:
    """The Node object's conditions of `kinds`: type -> (status, reason)."""
    return {c["type"]: (c["status"], c.get("reason", ""))
            for c in node.get("status", {}).get("conditions", []) if c["type"] in kinds}


def detected(cluster: Cluster) -> set[str]:
    """Every condition node-problem-detector keeps on a GPU node (docs/health.md)."""
    return set(health.KERNEL_CONDITIONS) | {
        c.condition for found in health.checks(cluster).values() for c in found}


# ---------------------------------------------------------------- node-problem-detector


class DetectorMissing(RuntimeError):
    pass


def detector_binary(shared: Path) -> Path:
    """node-problem-detector v1.36.0, built (or found built) by tools/npd/build.sh from the
    release archive in `shared`/upstream; DetectorMissing says why not."""
    build = subprocess.run(["bash", str(REPO / "tools/npd/build.sh")], capture_output=True,
                           text=True, timeout=1200,
                           env={**os.environ, "GPU_CLUSTER_SHARED": str(shared)})
    if build.returncode != 0:
        raise DetectorMissing(f"tools/npd/build.sh failed:\n{build.stderr[-3000:]}")
    binary = Path(build.stdout.strip().splitlines()[-1]) / "node-problem-detector"
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=30)
    if version.stdout.strip() != NPD_VERSION:
        raise DetectorMissing(f"{binary} says it is {version.stdout.strip()!r}, not "
                              f"{NPD_VERSION}")
    return binary


def exporting_detector(binary: Path, system_log: Path, custom: Sequence[Path], node: str,
                       env: dict[str, str], kubeconfig: Path, log: Path,
                       limit_s: float) -> subprocess.Popen[bytes]:
    """node-problem-detector as on a node: its Kubernetes exporter reports conditions and
    events to the API server of `kubeconfig` as that kubeconfig's identity; no HTTP endpoint
    of its own; killed past `limit_s`. The caller stops it (`stop`)."""
    args = [str(binary), "--enable-k8s-exporter=true",
            # inClusterConfig=false: the identity and the server come from the kubeconfig.
            f"--apiserver-override=https://127.0.0.1?inClusterConfig=false&auth={kubeconfig}",
            "--apiserver-wait-interval=1s", "--port=0", "--prometheus-port=0",
            f"--hostname-override={node}", f"--config.system-log-monitor={system_log}",
            "--config.custom-plugin-monitor=" + ",".join(map(str, custom))]
    with log.open("wb") as out:
        return subprocess.Popen(["timeout", "-s", "KILL", str(limit_s), *args], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def start_detector(binary: Path, host: SimulatedHost, kubeconfig: Path, log: Path,
                   limit_s: float) -> subprocess.Popen[bytes]:
    """node-problem-detector over `host`, its checks on the stand-in host and tools."""
    kernel, custom = host.monitors()
    env = {**host.fixture.env(host.name, os.environ["PATH"]), "HOME": str(host.config)}
    return exporting_detector(binary, kernel, custom, host.name, env, kubeconfig, log, limit_s)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the detector and its checks, SIGKILL if they linger."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ---------------------------------------------------------------- in the twin

# The checks' interval in the twin (the stack's default is 30 s): a fault is found in seconds.
INTERVAL_S = 2
# At most this many detectors: each runs its checks every INTERVAL_S on a two-core machine.
MAX_DETECTORS = 8
LIMIT_S = 3600  # no detector outlives the twin
DETECT_S = 120  # for a detector to find a fault and patch its Node, on a loaded machine


class Detectors:
    """node-problem-detector on the twin's GPU nodes (MAX_DETECTORS at most): a process per
    node, each over its own stand-in host, reporting as the stack's own identity (a token of
    the ServiceAccount health_detector renders, bound to the API server's
    `system:node-problem-detector`). Stopped with the control plane."""

    def __init__(self, cp: ControlPlane, cluster: Cluster, binary: Path) -> None:
        self.cp, self.kinds = cp, detected(cluster)
        root = cp.work / "node-health"
        self.hosts = {n: lay_out_host(cluster, n, root / n, INTERVAL_S)
                      for n in sorted(health.rails_files(cluster))[:MAX_DETECTORS]}
        token = cp.kubectl("create", "token", health_detector.NAME, "-n",
                           health_detector.NAMESPACE, "--duration=2h").stdout.strip()
        config = json.loads(cp.kubeconfig.read_text())
        config["users"][0]["user"] = {"token": token}
        self.kubeconfig = root / "node-problem-detector.conf"
        self.kubeconfig.write_text(json.dumps(config))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        cp.on_stop(self.stop)
        for name, host in self.hosts.items():
            self.procs[name] = start_detector(binary, host, self.kubeconfig, self.log(name),
                                              LIMIT_S)

    def stop(self) -> None:
        for proc in self.procs.values():
            stop(proc)

    def log(self, node: str) -> Path:
        return self.cp.work / f"node-problem-detector-{node}.log"

    def conditions(self, node: str) -> dict[str, tuple[str, str]]:
        return conditions_of(self.cp.get("node", node), self.kinds)

    def condition(self, node: str, kind: str) -> Mapping[str, Any]:
        """The Node's condition `kind` as the API server has it ({} when absent)."""
        return next((c for c in self.cp.get("node", node)["status"].get("conditions", [])
                     if c["type"] == kind), {})

    def all_false(self, node: str) -> bool:
        return {t: s for t, (s, _) in self.conditions(node).items()} == dict.fromkeys(
            self.kinds, "False")

    def exited(self) -> dict[str, int]:
        """node -> exit status of each detector that stopped."""
        return {n: rc for n, p in self.procs.items() if (rc := p.poll()) is not None}

    def tail(self, node: str) -> str:
        log = self.log(node)
        return log.read_text(errors="replace")[-600:] if log.exists() else ""
