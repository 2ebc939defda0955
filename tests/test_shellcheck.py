"""shellcheck (warning level) on every script the stack runs on a host, and (every level) on
the sandbox's recording stubs.

The scripts come from the renderers the blueprint calls; one test renders the real prod stack
with `python -m offline preview` and checks that its scripts/ are exactly these texts. Each stub
is checked twice: its file as it is (tests/support/stubs/bin/<name>.sh, as an editor or the
pre-commit hook reads it) and the script the sandbox installs (the prelude, then that file).
The simulated data centre's stand-ins (tests/support/stubs/datacentre/) are whole scripts,
checked as they are.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.project import REPO
from support.sandbox import STUB_DIR, STUBS, prod_cluster, prod_scripts, stub_script

from components.planning import kubeadm

SHELLCHECK = shutil.which("shellcheck")
needs_shellcheck = pytest.mark.skipif(
    SHELLCHECK is None,
    reason="shellcheck is not installed: apt-get install shellcheck (`make test` installs it)")


def all_scripts() -> dict[str, str]:
    """The preview's scripts/ plus the drain and leave scripts (delete actions, not artifacts)
    and the programs the scripts install (components/planning/scripts/)."""
    scripts = prod_scripts()
    for path in sorted((REPO / "components/planning/scripts").glob("*.sh")):
        scripts[f"installed/{path.name}"] = path.read_text()
    for node in prod_cluster().nodes[:1]:  # identical but for the hostname
        scripts[f"{node.hostname}/drain.sh"] = kubeadm.drain_script(node.hostname)
        scripts[f"{node.hostname}/leave.sh"] = kubeadm.leave_script(node.hostname)
    return scripts


SCRIPTS = all_scripts()


@pytest.mark.slow
@needs_shellcheck
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_shellcheck_warning_level(tmp_path: Path, name: str) -> None:
    path = tmp_path / name.replace("/", "__")
    path.write_text(SCRIPTS[name])
    proc = subprocess.run([SHELLCHECK or "shellcheck", "-S", "warning", "-s", "bash",
                           str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, f"{name}:\n{proc.stdout}{proc.stderr}"


@pytest.mark.slow
def test_shellcheck_sees_what_the_preview_writes(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(REPO, project, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "rendered", ".hypothesis", ".ruff_cache", "__pycache__",
        ".pytest_cache"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-m", "offline", "preview", "--stack", "prod",
                           "--quiet", "--project-dir", str(project)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root = project / "build/prod/scripts"
    written = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.sh")}
    assert written == prod_scripts()


@needs_shellcheck
@pytest.mark.parametrize("name", sorted(STUBS))
def test_each_stub_passes_shellcheck(tmp_path: Path, name: str) -> None:
    installed = tmp_path / name
    installed.write_text(stub_script(name))
    proc = subprocess.run([SHELLCHECK or "shellcheck", "-S", "style", str(installed),
                           str(STUB_DIR / "bin" / f"{name}.sh"), str(STUB_DIR / "prelude.sh")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"{name}:\n{proc.stdout}{proc.stderr}"


@needs_shellcheck
@pytest.mark.parametrize("path", sorted((STUB_DIR / "datacentre").glob("*.sh")),
                         ids=lambda p: p.name)
def test_each_datacentre_stand_in_passes_shellcheck(path: Path) -> None:
    """The simulated data centre's stand-ins, whole scripts as they are installed (their
    placeholders, filled in per run, are plain words)."""
    proc = subprocess.run([SHELLCHECK or "shellcheck", "-S", "style", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"{path.name}:\n{proc.stdout}{proc.stderr}"


def test_a_warning_fails_the_check(tmp_path: Path) -> None:
    """The check can fail: an unquoted, unassigned variable in a test is a warning."""
    if SHELLCHECK is None:
        pytest.skip("shellcheck is not installed")
    path = tmp_path / "bad.sh"
    path.write_text('#!/usr/bin/env bash\nif [ $undefined_thing = x ]; then rm -rf "$dir"/*; fi\n')
    proc = subprocess.run([SHELLCHECK, "-S", "warning", str(path)], capture_output=True,
                          text=True)
    assert proc.returncode != 0 and "SC2154" in proc.stdout
