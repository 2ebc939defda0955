"""The real engine agrees with the offline preview: `pulumi preview --json --policy-pack
policies` of prod (the CLI, the Python language host and both providers `make engine` builds, a
local file backend, placeholder secrets) plans the same resources as `python -m offline
preview`, with the same URNs, types, parents and dependencies, the same values unknown and
secret, and the same policy findings. Both are first previews (no state, no rendering): a first
preview dials nothing, as the command provider connects only in `pulumi up` and the kubernetes
provider has no kubeconfig yet."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.engine import (
    local_env,
    policy_findings,
    pulumi_bin,
    secret_inputs,
    unknown_paths,
)
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


STACK_URN = "urn:pulumi:prod::gpu-cluster::pulumi:pulumi:Stack::gpu-cluster-prod"


@pytest.fixture(scope="module")
def previews(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("engine")
    project = copy_repo(tmp / "gpu-cluster")
    (project / ".venv").symlink_to(REPO / ".venv")
    (project / "policies" / "venv").symlink_to(REPO / ".venv")  # the pack's (PulumiPolicy.yaml)
    env = local_env(tmp, "engine-preview") | PLACEHOLDER_SECRETS

    def cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=project, env=env | extra, capture_output=True,
                              text=True, timeout=600)

    for step in (("pulumi", "stack", "select", "--create", "prod"),
                 ("bash", "tools/set-stack-secrets.sh", "prod")):
        done = cli(*step)
        assert done.returncode == 0, done.stderr[-3000:]
    preview = ("pulumi", "preview", "--diff", "--json", "--policy-pack", "policies")
    real = cli(*preview)
    assert real.returncode == 0, real.stderr[-3000:] + real.stdout[-3000:]
    # The same preview as a stream of engine events: the only JSON that carries policy events.
    events = cli(*preview, PULUMI_ENABLE_STREAMING_JSON_PREVIEW="true")
    assert events.returncode == 0, events.stderr[-3000:]
    # The offline preview of the same copy (its stack file as the CLI left it, no rendering).
    offline = run_offline(project, "preview", "--stack", "prod", "--quiet")
    assert offline.returncode == 0, offline.stdout[-3000:]
    build = project / "build" / "prod"
    return {"real": json.loads(real.stdout), "events": events.stdout,
            "plan": json.loads((build / "plan.json").read_text()),
            "report": json.loads((build / "policy-report.json").read_text())}


def test_the_engine_plans_the_offline_previews_resources(previews) -> None:
    real, plan = previews["real"], previews["plan"]
    # The program reads what the stack deployed last from its own outputs (a read, no
    # resource; none before the first `pulumi up`): the offline plan has no such read.
    own = ("urn:pulumi:prod::gpu-cluster::pulumi:pulumi:StackReference::"
           "organization/gpu-cluster/prod")
    assert [s["op"] for s in real["steps"] if s["urn"] == own] == ["read"]
    steps = {s["urn"]: s for s in real["steps"] if s["urn"] != own}
    offline = {r["urn"]: r for r in plan["resources"]}
    stack = "urn:pulumi:prod::gpu-cluster::pulumi:pulumi:Stack::gpu-cluster-prod"
    assert set(steps) - set(offline) == {stack}  # the offline plan records no Stack
    assert set(offline) - set(steps) == set()
    assert {s["op"] for s in steps.values()} == {"create"}
    assert real["changeSummary"] == {"create": len(offline) + 1}  # a first read changes nothing


def test_types_parents_and_dependencies_agree(previews) -> None:
    real, plan = previews["real"], previews["plan"]
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


def test_the_same_values_are_unknown(previews) -> None:
    real, plan = previews["real"], previews["plan"]
    steps = {s["urn"]: (s.get("newState") or {}).get("inputs") or {} for s in real["steps"]}
    engine = {(urn, p) for urn, inputs in steps.items() for p in unknown_paths(inputs, True)}
    offline = {(r["urn"], p) for r in plan["resources"]
               for p in unknown_paths(r["inputs"], False)}
    assert engine == offline
    # What they are: each GPU node's reboot chain acts on its reboot check's verdict (the
    # check's stdout, printed only when it runs): the drain's command, and the trigger of the
    # drain, the reboot, the wait and the uncordon.
    by_name = {(urn.rsplit("::", 1)[1], p) for urn, p in offline}
    nodes = [f"gpu-node-{i:02d}" for i in range(8)]
    assert by_name == {(f"{n}-reboot-drain", ".create") for n in nodes} | {
        (f"{n}-reboot{step}", ".triggers[1]") for n in nodes
        for step in ("-drain", "", "-wait", "-uncordon")}


def test_the_same_inputs_are_secret(previews) -> None:
    real, plan = previews["real"], previews["plan"]
    steps = {s["urn"]: (s.get("newState") or {}).get("inputs") or {} for s in real["steps"]}
    engine = {(urn, k) for urn, inputs in steps.items() for k in secret_inputs(inputs, True)}
    offline = {(r["urn"], k) for r in plan["resources"]
               for k in secret_inputs(r["inputs"], False, r["type"])}
    assert engine == offline


def test_the_pack_finds_what_the_offline_report_shows(previews) -> None:
    found = policy_findings(previews["events"], STACK_URN)
    # The offline report lists suppressed findings too; the engine keeps them out (a
    # suppression lives in the reviewed policy config or annotation).
    offline = {(v["policy"], v["level"], v["resource"] or STACK_URN, v["message"])
               for v in previews["report"] if v["level"] != "suppressed"}
    assert found == offline
    # One line for the checks a first preview cannot make, none per rule and resource.
    assert [f[0] for f in found] == ["checks-wait-for-up"]
    assert not any("can't run policy" in f[3] for f in found)
