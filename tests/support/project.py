"""This repository as the tests see it: its root, the prod stack's config, copies of the repo
to preview changes in, and the offline runner in a fresh interpreter."""

from __future__ import annotations

import copy
import fcntl
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

# tests/support/project.py -> the repository root.
REPO = Path(__file__).resolve().parents[2]
# The shared directory (upstream archives, CRDs): beside the repository, or GPU_CLUSTER_SHARED.
SHARED = Path(os.environ.get("GPU_CLUSTER_SHARED") or REPO.parent / "shared")
# Where tools/k8s/build.sh and tools/engine/build.sh keep what they build.
CACHE = Path(os.environ.get("GPU_CLUSTER_CACHE") or Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-cluster")
# Every resource that exists because of one GPU node (named by its hostname).
NODE_RESOURCES = ("{h}", "{h}-prepare", "{h}-ssh-keys", "{h}-bmc", "{h}-join-token",
                  "{h}-kubeadm-join", "{h}-member", "{h}-placement", "{h}-reboot-check",
                  "{h}-reboot-drain", "{h}-reboot", "{h}-reboot-wait", "{h}-reboot-uncordon",
                  "{h}-upgrade-drain", "{h}-kubernetes-upgrade", "{h}-upgrade-uncordon")


@functools.cache
def _prod_cluster_doc() -> dict[str, Any]:
    return yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]["gpu-cluster:cluster"]


def prod_raw() -> dict[str, Any]:
    """The `gpu-cluster:cluster` object of Pulumi.prod.yaml; a fresh copy per call."""
    return copy.deepcopy(_prod_cluster_doc())


def run_offline(project: Path, *args: str, hashseed: str = "0"
                ) -> subprocess.CompletedProcess[str]:
    """`python -m offline <args> --project-dir <project>` in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": hashseed,
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "offline", *args, "--project-dir", str(project)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )


def shared_prod(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of this repository with prod rendered by one offline preview per test run, shared
    by every xdist worker (the first to take the lock renders it; read only)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's directory, above each worker's own
    project, verdict = root / "prod-rendered", root / "prod-rendered.verdict"
    with open(root / "prod-rendered.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not verdict.exists():
            copy_repo(project)
            out = run_offline(project, "preview", "--stack", "prod", "--quiet")
            verdict.write_text(f"{out.returncode}\n{out.stdout}{out.stderr}")
    code, _, log = verdict.read_text().partition("\n")
    # 0 = clean; 3 = a mandatory policy violation (reported by the policy tests, not here).
    assert int(code) in (0, 3), log
    return project


def copy_deployed(dst: Path, stack: str = "prod") -> Path:
    """A copy of this repository with the stack's committed rendering: what it has deployed,
    for changes to preview against."""
    copy_repo(dst)
    shutil.copytree(REPO / "rendered" / stack, dst / "rendered" / stack)
    return dst


def copy_repo(dst: Path) -> Path:
    """A copy of this repository without build/, rendered/, vendor/, .git or caches (as a
    fresh clone has it), to preview changes in."""
    shutil.copytree(REPO, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
        ".venv", "build", ".git", "__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache",
        ".mypy_cache", "rendered", "vendor"))
    return dst
