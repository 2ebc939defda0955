"""The real engine agrees with the offline preview: `pulumi preview --json` of prod (the CLI,
the Python language host and both providers `make engine` builds, a local file backend,
placeholder secrets) plans the same resources as `python -m offline preview`, with the same
URNs, types, parents and dependencies. A first preview dials nothing: the command provider
connects only in `pulumi up`, and the kubernetes provider has no kubeconfig yet."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.engine import local_env, pulumi_bin
from support.project import REPO, copy_repo, run_offline

from offline.engine import PLACEHOLDER_SECRETS

ENGINE = pulumi_bin()
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.skipif(
    ENGINE is None or not all((Path(ENGINE) / f"pulumi-{p}").exists() for p in (
        "language-python", "resource-command", "resource-kubernetes")),
    reason="the engine is not built: run `make engine`")]

# What the engine reports differently, and why (docs/preview.md, "The real engine").
KNOWN = {
    # A kustomize Directory is a component the provider constructs; the engine's step for it
    # carries no dependencies of its own.
    "kubernetes:kustomize/v2:Directory": "dependencies",
}


@pytest.fixture(scope="module")
def previews(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("engine")
    project = copy_repo(tmp / "gpu-cluster")
    (project / ".venv").symlink_to(REPO / ".venv")
    env = local_env(tmp, "engine-preview") | PLACEHOLDER_SECRETS

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=project, env=env, capture_output=True, text=True,
                              timeout=600)

    for step in (("pulumi", "stack", "select", "--create", "prod"),
                 ("bash", "tools/set-stack-secrets.sh", "prod")):
        done = cli(*step)
        assert done.returncode == 0, done.stderr[-3000:]
    real = cli("pulumi", "preview", "--json")
    assert real.returncode == 0, real.stderr[-3000:] + real.stdout[-3000:]
    # The offline preview of the same copy, its stack file as the CLI left it.
    shutil.copytree(REPO / "rendered", project / "rendered")
    offline = run_offline(project, "preview", "--stack", "prod", "--quiet")
    assert offline.returncode == 0, offline.stdout[-3000:]
    plan = json.loads((project / "build" / "prod" / "plan.json").read_text())
    return json.loads(real.stdout), plan


def test_the_engine_plans_the_offline_previews_resources(previews) -> None:
    real, plan = previews
    steps = {s["urn"]: s for s in real["steps"]}
    offline = {r["urn"]: r for r in plan["resources"]}
    stack = "urn:pulumi:prod::gpu-cluster::pulumi:pulumi:Stack::gpu-cluster-prod"
    assert set(steps) - set(offline) == {stack}  # the offline plan records no Stack
    assert set(offline) - set(steps) == set()
    assert {s["op"] for s in steps.values()} == {"create"}
    assert real["changeSummary"] == {"create": len(offline) + 1}


def test_types_parents_and_dependencies_agree(previews) -> None:
    real, plan = previews
    steps = {s["urn"]: s.get("newState") or {} for s in real["steps"]}
    stack = "urn:pulumi:prod::gpu-cluster::pulumi:pulumi:Stack::gpu-cluster-prod"
    differ = []
    for r in plan["resources"]:
        state = steps[r["urn"]]
        if state.get("type") != r["type"]:
            differ.append(f"{r['urn']}: type {state.get('type')}")
        if (state.get("parent") or stack) != (r.get("parent") or stack):
            differ.append(f"{r['urn']}: parent {state.get('parent')} vs {r.get('parent')}")
        deps = sorted(state.get("dependencies") or [])
        if deps != sorted(r["options"].get("dependsOn") or []) \
                and KNOWN.get(r["type"]) != "dependencies":
            differ.append(f"{r['urn']}: dependencies {deps} vs {r['options'].get('dependsOn')}")
    assert differ == []
