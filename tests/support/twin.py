"""Where the cluster twin's control-plane binaries live (`make k8s-tools`), and the upstream
CRDs beside the checkout (or at GPU_CLUSTER_SHARED); tests that need either skip without
them. `run_twin` runs the twin and `verdict` reads what it found, failing the test, with the
twin's output, when the twin gave no verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.project import CACHE, REPO, SHARED

# One bin-<versions> directory per build (kube-apiserver, scheduler, controller-manager,
# kubectl, etcd, kwok, ...), oldest first.
BINS = sorted((CACHE / "k8s").glob("bin-*"))
# A twin run takes minutes; on a loaded two-core machine several times as long.
TIMEOUT = 1800


@dataclass
class Verdict:
    code: int  # 0: every check holds; 1: the twin found a failure
    out: str  # its stdout: the report's lines
    report: dict[str, Any]  # report.json


def run_twin(out: Path, *args: str, timeout: float = TIMEOUT) -> Verdict:
    """`python -m twin --shared SHARED --out OUT ARGS...` with the newest built binaries, and
    its verdict."""
    proc = subprocess.Popen([sys.executable, "-m", "twin", "--bin", str(BINS[-1]),
                             "--shared", str(SHARED), "--out", str(out), *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the twin stops its control plane on SIGTERM
        try:
            stdout, stderr = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        pytest.fail(f"the twin gave no verdict in {timeout:g}s\n--- stderr\n{stderr[-8000:]}"
                    f"\n--- stdout\n{stdout[-4000:]}", pytrace=False)
    return verdict(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), out)


def verdict(proc: subprocess.CompletedProcess[str], out: Path) -> Verdict:
    """Exit 0 or 1 is the twin's verdict, with report.json written last. Any other status
    (2: it could not run, its control plane failed, or it broke) is no verdict: the test fails
    with the twin's stderr, whatever it expected."""
    if proc.returncode not in (0, 1):
        pytest.fail(f"the twin failed (exit {proc.returncode}): no verdict\n--- stderr\n"
                    f"{proc.stderr[-8000:]}\n--- stdout\n{proc.stdout[-4000:]}", pytrace=False)
    report = out / "report.json"
    if not report.is_file():
        pytest.fail(f"the twin exited {proc.returncode} without writing {report}\n--- stderr\n"
                    f"{proc.stderr[-8000:]}\n--- stdout\n{proc.stdout[-4000:]}", pytrace=False)
    return Verdict(proc.returncode, proc.stdout, json.loads(report.read_text()))
