"""This repository as the tests see it: its root, the prod stack's config, copies of the repo
to preview changes in, and the offline runner in a fresh interpreter."""

from __future__ import annotations

import copy
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

# tests/support/project.py -> the repository root.
REPO = Path(__file__).resolve().parents[2]
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
