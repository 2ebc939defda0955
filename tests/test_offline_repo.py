"""The real stack: committed rendering current, full build tree, byte-identical reruns."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.project import REPO, run_offline

# Previews of the whole prod stack, under several hash seeds.
pytestmark = pytest.mark.slow

STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in REPO.glob("Pulumi.*.yaml"))

# DESIGN.md's contract for build/<stack>/fabric/.
FABRIC_FILES = ("topology.net", "cabling.csv", "bom.csv", "opensm.conf", "partitions.conf",
                "root_guids.conf", "cn_guids.conf", "node-name-map")


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_is_up_to_date(stack: str) -> None:
    assert (REPO / "rendered" / stack).is_dir(), (
        f"rendered/{stack} is not committed: run `make render STACK={stack}`")
    proc = run_offline(REPO, "check-rendered", "--stack", stack)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def prod_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project, so tests never rewrite the developer's own build/."""
    dst = tmp_path_factory.mktemp("repo") / "gpu-cluster"
    shutil.copytree(REPO, dst, ignore=shutil.ignore_patterns(
        ".venv", "build", ".git", "__pycache__", ".pytest_cache", ".hypothesis", "rendered"))
    return dst


def test_prod_preview_writes_the_whole_contract(prod_copy: Path) -> None:
    proc = run_offline(prod_copy, "preview", "--stack", "prod")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    build = prod_copy / "build" / "prod"
    for name in ("plan.json", "policy-report.json"):
        assert (build / name).is_file(), name
    for name in FABRIC_FILES:
        assert (build / "fabric" / name).is_file(), f"fabric/{name}"
    hosts = {"mgmt-01", "mgmt-02", "mgmt-03", "sm-01", "sm-02",
             *(f"gpu-node-{i:02d}" for i in range(8))}
    assert {p.name for p in (build / "scripts").iterdir()} == hosts
    assert (build / "helm" / "gpu-operator.yaml").is_file()
    kinds = {p.name.split("-")[0] for p in (build / "manifests").rglob("*.yaml")}
    assert {"pytorchjob", "deployment", "persistentvolume", "hypernode"} <= kinds
    # URNs as the engine forms them (sdk/go/common/resource/urn/urn.go): a top-level
    # component's own type alone, a child's after its parents' whole chain, so a URN copied
    # from the preview works with `pulumi up --target` and `--replace`.
    plan = json.loads((build / "plan.json").read_text())
    urns = {r["urn"] for r in plan["resources"]}
    assert "urn:pulumi:prod::gpu-cluster::gpucluster:hardware:Hardware::hardware" in urns
    assert ("urn:pulumi:prod::gpu-cluster::gpucluster:hardware:Hardware$gpucluster:hardware:"
            "BareMetalNode$command:remote:Command::gpu-node-00-prepare") in urns
    assert not [u for u in urns if "pulumi:pulumi:Stack$" in u]
    # The preview shows the reviewer the fabric before anything else physical happens.
    assert "bisection bandwidth 12.8 Tb/s" in proc.stdout
    assert "Bring-up order:" in proc.stdout


def test_prod_rendering_is_byte_identical_across_hash_seeds(prod_copy: Path) -> None:
    # Both runs preview the same deployed stack: a first preview (no rendering yet) plans as
    # unknown what a deployed one reads from its commands' outputs (docs/preview.md).
    assert run_offline(prod_copy, "preview", "--stack", "prod", "--render").returncode == 0
    trees = []
    for seed in ("0", "271828"):
        proc = run_offline(prod_copy, "preview", "--stack", "prod", "--render", hashseed=seed)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # diff.json, runbook.txt and impact.txt compare with the previous run's rendering, so they
        # differ by design.
        trees.append({k: v for k, v in _tree(prod_copy / "build").items()
                      if not k.endswith(("diff.json", "runbook.txt", "impact.txt"))} | {
            f"rendered/{k}": v for k, v in _tree(prod_copy / "rendered").items()})
    assert trees[0] == trees[1]
    assert len(trees[0]) > 150
    # The rendering keeps what the first one showed unknown: the value the deployed commands
    # printed, which a later preview computes from stand-ins (a settled file, not a change).
    drain = "rendered/prod/bootstrap/command-remote-Command/gpu-node-00-reboot-drain.yaml"
    assert 'create: "[unknown]"' in trees[0][drain].decode()
    check = run_offline(prod_copy, "check-rendered", "--stack", "prod")
    assert check.returncode == 0 and "is up to date" in check.stdout, check.stdout
