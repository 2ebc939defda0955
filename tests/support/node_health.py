"""node-problem-detector for the tests: the binary (skipping where it cannot be built), and
`Detector`, the real binary run standalone over a stand-in host (twin/node_health.py
`FixtureNode`): no Kubernetes exporter, its Prometheus endpoint on a loopback port, every run
bounded in time. twin/node_health.py runs it as on a node, reporting to an API server."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.project import CACHE, SHARED
from twin.node_health import NPD_VERSION, DetectorMissing, detector_binary

NPD_ARCHIVE = SHARED / f"upstream/node-problem-detector-{NPD_VERSION}.tar.gz"


# ---------------------------------------------------------------- node-problem-detector


def npd_binary() -> Path:
    """node-problem-detector v1.36.0, built from its release archive (tools/npd/build.sh);
    the test skips where neither the archive nor Go is there to build it."""
    if not (CACHE / f"npd/node-problem-detector-{NPD_VERSION}/bin").is_dir():
        if not NPD_ARCHIVE.is_file():
            pytest.skip(f"{NPD_ARCHIVE} is absent (the shared directory beside the repository)")
        if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
            pytest.skip("Go is not installed: tools/npd/build.sh builds node-problem-detector")
    try:
        return detector_binary(SHARED)
    except DetectorMissing as err:
        pytest.fail(str(err))


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
