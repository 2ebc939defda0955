"""End to end: copies of the repo with one harmful change each render offline and fail with
the right rule id (and the offline runner agrees with pulumi-policy's servicer on each); the
unchanged copy passes. Also: RULES.md is current, the pack's version matrix is the stack's,
and the pack runs from policies/ alone."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.analyzer import (
    Analyzer,
    gpu_guardrails,
    offline_preview,
    plan_resources,
    prod_policy_config,
)
from support.project import REPO, copy_repo


def edit_stack(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def apply(project: Path) -> None:
        path = project / "Pulumi.prod.yaml"
        doc = yaml.safe_load(path.read_text())
        change(doc["config"]["gpu-cluster:cluster"])
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return apply


def edit_code(rel: str, pattern: str, replacement: str) -> Callable[[Path], None]:
    def apply(project: Path) -> None:
        path = project / rel
        text, n = re.subn(pattern, replacement, path.read_text(), count=1, flags=re.M)
        assert n == 1, f"{pattern!r} not found in {rel}"
        path.write_text(text)
    return apply


# Keeps one leaf uplink in four in the switch port maps: a planner regression that leaves
# prod's leaves (16 host ports, 8 uplinks) 2:1 oversubscribed while every cable looks plausible.
OVERSUBSCRIBE = '''

_full_port_maps = port_maps


def port_maps(plan):  # noqa: F811
    maps = _full_port_maps(plan)
    return {name: {p: d for p, d in ports.items()
                   if not (name.startswith("leaf") and " rail " not in d and p % 4 != 1)}
            for name, ports in maps.items()}
'''


def append_code(rel: str, code: str) -> Callable[[Path], None]:
    def apply(project: Path) -> None:
        path = project / rel
        path.write_text(path.read_text() + code)
    return apply


HARMFUL: dict[str, tuple[Callable[[Path], None], str]] = {
    "shm-shrunk": (edit_stack(lambda c: c["workloads"]["training"][0].update(shmSize="1Gi")),
                   "dev-shm-memory-emptydir"),
    "wrong-socket-interface": (edit_code("components/planning/workloads.py",
                                         r'("NCCL_SOCKET_IFNAME":\s*).*?,$', r'\1"=ib0",'),
                               "nccl-socket-ifname-exists"),
    "oversubscribed-fabric": (append_code("components/planning/switch_config.py", OVERSUBSCRIBE),
                              "fabric-non-blocking"),
    "week-long-join-token": (edit_stack(lambda c: c["kubernetes"].update(
        joinTokenTtlMinutes=1440)), "kubeadm-token-ttl-bounded"),
    "secrets-unencrypted": (edit_stack(lambda c: c["kubernetes"].update(
        encryptionAtRest=False)), "kube-encryption-at-rest"),
}


def report_of(project: Path) -> list[dict[str, Any]]:
    return json.loads((project / "build/prod/policy-report.json").read_text())


@pytest.mark.slow
def test_prod_passes_with_zero_mandatory_violations(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # Its own copy: the shared rendering (`recorded_prod`) is read by other workers meanwhile.
    project = copy_repo(tmp_path_factory.mktemp("prod-policy") / "repo")
    proc = offline_preview(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = plan_resources(project)
    n = len(gpu_guardrails.POLICIES)
    assert f"Policy report ({n} policies, 0 mandatory, 1 advisory violations, " in proc.stdout
    assert [v for v in report_of(project) if v["level"] == "mandatory"] == []
    # A first preview (the copy has no rendering: nothing is deployed, no command has printed
    # anything). Each GPU node's reboot drain acts on its reboot check's verdict (the check's
    # stdout), so the 14 rules that read command scripts cannot check the 8 drains yet: one
    # finding says so, and no "can't run policy" line per rule and resource.
    (wait,) = [v for v in report_of(project) if v["level"] != "suppressed"]
    assert (wait["policy"], wait["level"], wait["resource"]) == (
        "checks-wait-for-up", "advisory", None)
    assert wait["message"].startswith(
        "112 checks by 14 rules wait for `pulumi up` (the values they read are unknown until "
        "earlier steps run): `.create` of 8 resources (gpu-node-00-reboot-drain, "
        "gpu-node-01-reboot-drain, gpu-node-02-reboot-drain, and 5 more).")
    assert "can't run policy" not in proc.stdout
    assert [d.policy for d in Analyzer(prod_policy_config()).run(plan)] == ["checks-wait-for-up"]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HARMFUL))
def test_harmful_change_fails_with_the_right_rule(case: str, tmp_path: Path) -> None:
    change, rule = HARMFUL[case]
    project = copy_repo(tmp_path / "repo")
    change(project)
    proc = offline_preview(project)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    hits = [v for v in report_of(project) if v["level"] == "mandatory"]
    assert rule in {v["policy"] for v in hits}, hits
    assert f"[{rule}]" in proc.stdout
    # The offline runner and pulumi-policy's own servicer give the same verdicts (the
    # servicer has no notion of a suppressed finding: it reports nothing for one).
    analyzer = Analyzer(prod_policy_config()).run(plan_resources(project))
    assert sorted((v["policy"], v["level"]) for v in report_of(project)
                  if v["level"] != "suppressed") == sorted(
        (d.policy, d.level) for d in analyzer)


def test_rules_md_is_current_and_lists_every_rule() -> None:
    sys.path.insert(0, str(REPO / "policies"))
    from gpu_guardrails import docs

    text = (REPO / "policies" / "RULES.md").read_text()
    assert text == docs.table(), "run: cd policies && python -m gpu_guardrails.docs > RULES.md"
    for p in gpu_guardrails.POLICIES:
        level = p.enforcement_level.value
        assert re.search(rf"^\| `{re.escape(p.name)}` \| {level} \|", text, re.M), p.name


def test_pack_version_matrix_is_the_stacks() -> None:
    """One release table: the stack reads the pack's file and keeps no copy of its own."""
    from gpu_guardrails import compat_data

    from components.model import compat

    assert Path(compat.DATA.__file__).resolve() == Path(compat_data.__file__).resolve()
    for table in ("NETWORK_OPERATOR_K8S", "RDMA_INCOMPATIBLE", "GPU_OPERATOR_K8S",
                  "VOLCANO_HYPERNODE", "TRAINING_OPERATOR_SERIES", "TRAINING_OPERATOR_COMMITS",
                  "CALICO_K8S", "VLLM_FLOOR"):
        assert getattr(compat_data, table) == getattr(compat, table), table
    # No release, commit or series literal anywhere in the stack: adding one is one edit there.
    for path in (REPO / "components").rglob("*.py"):
        source = path.read_text()
        for literal in ('"26.4.0"', '"v26.3.2"', '"v3.30"', "4445c12aa62e", '"v1.9."'):
            assert literal not in source, (path, literal)


def test_pack_files_are_self_contained() -> None:
    """The CLI runs the pack from policies/ with only its requirements installed."""
    for path in (REPO / "policies").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"^\s*(from|import) (components|offline)\b", text, re.M), path
    # A hashed lock file (tests/test_locks.py): each package line pins one release.
    reqs = re.findall(r"^[A-Za-z0-9]\S*", (REPO / "policies" / "requirements.txt").read_text(),
                      re.M)
    assert reqs and all("==" in r for r in reqs), reqs
    manifest = yaml.safe_load((REPO / "policies" / "PulumiPolicy.yaml").read_text())
    assert manifest["runtime"]["name"] == "python"


def test_workflows_run_the_pack_on_every_path() -> None:
    wf = {p.stem: yaml.safe_load(p.read_text())
          for p in (REPO / ".github" / "workflows").glob("*.yml")}
    assert {"pull-request", "main", "drift"} <= set(wf)

    def steps(name: str) -> list[dict[str, Any]]:
        return [s for job in wf[name]["jobs"].values() for s in job["steps"]]

    def pulumi(name: str) -> list[dict[str, Any]]:
        # The steps that run a command (another one only installs the CLI).
        return [s["with"] for s in steps(name) if str(s.get("uses", "")).startswith(
            "pulumi/actions@") and "command" in s.get("with", {})]

    pr = wf["pull-request"]
    assert "pull_request" in pr[True]  # YAML 1.1 reads the key `on` as True
    # Offline, judged by the base branch's pack (tests/test_workflows.py); no real preview
    # there: it would run the PR's program with the production secrets.
    assert any("make preview" in s.get("run", "") for s in steps("pull-request"))
    assert not pulumi("pull-request")
    [up] = pulumi("main")
    assert (up["command"], up["policyPacks"]) == ("up", "policies")
    assert wf["main"][True]["push"]["branches"] == ["main"]
    [drift] = pulumi("drift")
    assert drift["refresh"] is True and drift["expect-no-changes"] is True
    assert drift["policyPacks"] == "policies" and "schedule" in wf["drift"][True]
