"""Shared fixtures and pytest hooks only; the helpers they use live in tests/support/."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.offline_project import make_offline_project
from support.project import copy_repo, run_offline, shared_prod

if TYPE_CHECKING:
    from support.analyzer import Res


@pytest.fixture
def offline_project(tmp_path: Path) -> Path:
    """The tiny stand-in project of support/offline_project.py (not the real components)."""
    return make_offline_project(tmp_path)


@pytest.fixture
def offline_run() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_offline


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A fresh copy of this repository to change and preview."""
    return copy_repo(tmp_path / "gpu-cluster")


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The prod stack rendered by the offline preview, in a copy of the repository (read only:
    shared by every test, and every xdist worker, that reads the rendering)."""
    return shared_prod(tmp_path_factory) / "build" / "prod"


@pytest.fixture(scope="session")
def prod_plan(tmp_path_factory: pytest.TempPathFactory) -> list[Res]:
    """The recorded prod stack as engine-shaped resources: one offline preview of a copy of the
    repository per session (support/analyzer.py, imported here so that only the sessions that
    use it load the policy pack)."""
    from support.analyzer import recorded_prod

    return recorded_prod(tmp_path_factory)[1]
