"""The developer loop: one pyproject.toml configures ruff, pytest and mypy; the pre-commit hooks
run only tools the checkout already has; `make test-fast` leaves out the tests marked slow."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tomllib

import pytest
import yaml
from support.project import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
MAKEFILE = (REPO / "Makefile").read_text()


def make_recipe(target: str) -> list[str]:
    """The recipe lines of one Makefile target."""
    m = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE, re.M)
    assert m, f"no target {target} in the Makefile"
    return [line.strip() for line in m.group(1).splitlines()]


def test_pyproject_configures_ruff_pytest_and_mypy() -> None:
    tool = PYPROJECT["tool"]
    assert PYPROJECT["project"]["name"] == "gpu-cluster"
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"
    assert "RUF100" in tool["ruff"]["lint"]["select"]
    assert tool["ruff"]["lint"]["mccabe"]["max-complexity"] <= 25
    assert "pydantic.mypy" in tool["mypy"]["plugins"]
    assert all((REPO / f).exists() for f in tool["mypy"]["files"]), tool["mypy"]["files"]
    markers = [m.split(":")[0] for m in tool["pytest"]["ini_options"]["markers"]]
    assert "slow" in markers


def test_one_config_file() -> None:
    """ruff and pytest would read these before pyproject.toml (and ignore it)."""
    left = [n for n in ("ruff.toml", ".ruff.toml", "pytest.ini", "setup.cfg", "tox.ini", "mypy.ini",
                        ".mypy.ini") if (REPO / n).exists()]
    assert left == []


def test_pre_commit_hooks_run_tools_the_checkout_has() -> None:
    """Every hook is local and runs a .venv tool (pinned in requirements-dev.txt, installed by
    make) or a command on PATH (`make deps` installs the Debian ones)."""
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    lock = (REPO / "requirements-dev.txt").read_text().lower()
    debian = re.search(r"^DEB_PACKAGES := (.*)$", MAKEFILE, re.M)
    assert debian
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert {"ruff", "mypy", "shellcheck", "actionlint"} <= {h["id"] for h in hooks}
    for repo in config["repos"]:
        assert repo["repo"] == "local", repo["repo"]
    for hook in hooks:
        assert hook["language"] == "system", hook["id"]
        argv = shlex.split(hook["entry"])
        exe = argv[0]
        if exe.startswith(".venv/bin/"):
            name = exe.removeprefix(".venv/bin/")
            assert re.search(rf"^{re.escape(name)}==", lock, re.M), (hook["id"], exe)
        else:
            assert "/" not in exe, (hook["id"], exe)
            assert exe in debian.group(1).split() or shutil.which(exe), (hook["id"], exe)
        for script in re.findall(r"\b(?:tools|\.ci)/[\w./-]+", hook["entry"]):
            assert (REPO / script).is_file(), (hook["id"], script)


def test_make_runs_ruff_and_mypy_and_test_fast_skips_slow() -> None:
    for target in ("lint", "test", "test-fast"):
        recipe = make_recipe(target)
        assert "$(VENV)/bin/ruff check ." in recipe, target
        assert "$(VENV)/bin/mypy" in recipe, target
    # The loop's tests spread over every core (pytest-xdist).
    assert '$(PY) -m pytest -q -m "not slow" -n auto' in make_recipe("test-fast")


@pytest.mark.slow
def test_mypy_passes() -> None:
    mypy = REPO / ".venv" / "bin" / "mypy"
    if not mypy.exists():
        pytest.skip("no .venv/bin/mypy: run `make lint` first")
    proc = subprocess.run([str(mypy)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
