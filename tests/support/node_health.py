"""A DGX H100 node as the health checks see it (docs/health.md), and node-problem-detector run
over it.

`FixtureNode` lays out under one directory the host files the checks read (each rail's
/sys/class/infiniband port, /proc/mdstat and /sys/block/md*/md with the boot RAID1 and the
scratch RAID0) and stand-ins named nvidia-smi, dcgmi and systemctl that print what the real
tools print for the queries the checks make, from files the test changes to inject a fault.
`Detector` runs the real node-problem-detector binary standalone over it: no Kubernetes
exporter, its Prometheus endpoint on a loopback port, every run bounded in time;
`exporting_detector` runs it as on a node, reporting to an API server."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from support.project import CACHE, REPO

SHARED = Path(os.environ.get("GPU_CLUSTER_SHARED") or REPO.parent / "shared")
NPD_ARCHIVE = SHARED / "upstream/node-problem-detector-v1.36.0.tar.gz"
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
    """One GPU node's host files and tools under `root`, healthy until told otherwise."""

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
        self._write(self._port(hca) / "state", "1: DOWN\n")
        self._write(self._port(hca) / "phys_state", "3: Disabled\n")

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
    """A kernel log line as the test monitors read it: `<RFC 3339 time> <message>`."""
    return f"{datetime.now(UTC).isoformat()} {message}\n"


# ---------------------------------------------------------------- node-problem-detector


def npd_binary() -> Path:
    """node-problem-detector v1.36.0, built from its release archive (tools/npd/build.sh);
    the test skips where neither the archive nor Go is there to build it."""
    if not (CACHE / "npd/node-problem-detector-v1.36.0/bin").is_dir():
        if not NPD_ARCHIVE.is_file():
            pytest.skip(f"{NPD_ARCHIVE} is absent (the shared directory beside the repository)")
        if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
            pytest.skip("Go is not installed: tools/npd/build.sh builds node-problem-detector")
    build = subprocess.run(["bash", str(REPO / "tools/npd/build.sh")], capture_output=True,
                           text=True, timeout=1200,
                           env={**os.environ, "GPU_CLUSTER_SHARED": str(SHARED)})
    assert build.returncode == 0, build.stderr
    binary = Path(build.stdout.strip().splitlines()[-1]) / "node-problem-detector"
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    assert version.stdout.strip() == "v1.36.0"
    return binary

_SAMPLE = re.compile(r'^(problem_counter|problem_gauge)\{([^}]*)\} (\S+)$', re.M)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Detector:
    """The running node-problem-detector: its metrics and its log."""

    def __init__(self, proc: subprocess.Popen[str], port: int, log: Path):
        self.proc, self.port, self.log = proc, port, log

    def problems(self) -> dict[tuple[str, ...], float]:
        """(metric, reason[, type]) -> value from /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for name, labels, value in _SAMPLE.findall(text):
            kv = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            key = (name, kv["reason"]) + ((kv["type"],) if "type" in kv else ())
            out[key] = float(value)
        return out

    def wait_for(self, done: Callable[[dict[tuple[str, ...], float]], bool], timeout: float,
                 tick: Callable[[], None] = lambda: None) -> dict[tuple[str, ...], float]:
        """Poll the metrics until `done` holds (calling `tick` between polls); the last ones."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, "node-problem-detector exited:\n" + self.log_text()
            try:
                seen = self.problems()
            except OSError:
                seen = {}
            if seen and done(seen) or time.monotonic() > deadline:
                return seen
            tick()
            time.sleep(0.25)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def detector(binary: Path, system_log: Sequence[Path], custom: Sequence[Path], node: str,
             env: dict[str, str], log: Path, limit_s: float = 120) -> Iterator[Detector]:
    """node-problem-detector standalone over the given monitors, stopped on exit (and killed
    past `limit_s`)."""
    port = free_port()
    args = [str(binary), "--enable-k8s-exporter=false", "--prometheus-address=127.0.0.1",
            f"--prometheus-port={port}", f"--hostname-override={node}",
            "--config.system-log-monitor=" + ",".join(map(str, system_log)),
            "--config.custom-plugin-monitor=" + ",".join(map(str, custom))]
    with log.open("w") as out:
        proc = subprocess.Popen(["timeout", "-s", "KILL", str(limit_s), *args], env=env,
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        yield Detector(proc, port, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the detector and its checks, SIGKILL if they linger."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
