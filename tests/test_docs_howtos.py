"""The how-tos' commands run as written: every ```console block of a docs/ page, in order, in one
scratch copy of the project per page (with the committed rendering, so previews diff against
it). A block's first lines may say `# needs: <tools>` (without them the rest of the page is
skipped: later blocks build on earlier ones) and `# exit: <n>` (the status it must end with;
default 0). The Pulumi CLI edits the stack file (`pulumi config set --path`) on a local file
backend; it is found on PATH or in the engine cache `make engine` fills."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from support.engine import local_env, pulumi_bin
from support.project import REPO, copy_repo

BLOCK = re.compile(r"^```console\n(.*?)^```", re.M | re.S)
PAGES = sorted(p for p in (REPO / "docs").glob("*.md") if BLOCK.search(p.read_text()))


def blocks(page: Path) -> list[tuple[str, list[str], int]]:
    """(script, tools it needs, expected exit status) per console block, in page order."""
    out = []
    for m in BLOCK.finditer(page.read_text()):
        script = m.group(1)
        needs = re.search(r"^# needs: (.+)$", script, re.M)
        status = re.search(r"^# exit: (\d+)$", script, re.M)
        out.append((script, needs.group(1).split() if needs else [],
                    int(status.group(1)) if status else 0))
    return out


def test_the_howto_pages_have_runnable_blocks() -> None:
    assert REPO / "docs" / "day2.md" in PAGES
    assert sum(len(blocks(p)) for p in PAGES) >= 6


@pytest.fixture
def scratch(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    project = copy_repo(tmp_path / "gpu-cluster")
    shutil.copytree(REPO / "rendered", project / "rendered")
    (project / ".venv").symlink_to(REPO / ".venv")
    env = local_env(tmp_path, "docs")
    if pulumi_bin():
        # What the README's CLI section has the reader do first.
        subprocess.run(["pulumi", "stack", "select", "--create", "prod"], cwd=project, env=env,
                       check=True, capture_output=True, timeout=120)
    return project, env


def run_block(script: str, project: Path, env: dict[str, str]
              ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=project,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        # A block may start a background process (ibsim): end its process group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_console_blocks_run_as_written(page: Path, scratch: tuple[Path, dict[str, str]]
                                       ) -> None:
    project, env = scratch
    for i, (script, needs, status) in enumerate(blocks(page), 1):
        missing = [t for t in needs if shutil.which(t, path=env["PATH"]) is None]
        if missing:
            pytest.skip(f"{page.name} block {i} and later need {', '.join(missing)}"
                        + (" (make engine)" if "pulumi" in missing else ""))
        res = run_block(script, project, env)
        assert res.returncode == status, (
            f"{page.name} block {i} exited {res.returncode}, not {status}:\n{script}\n"
            f"{res.stdout[-4000:]}")
