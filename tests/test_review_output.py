"""What a reviewer reads: the preview of the real prod stack, top-down.

A hardware change opens with its impact on hardware and running work, then the policy verdict
(suppressed findings included, each with its reason), then the diff with old and new values,
then the runbook; the stack's inventory comes last and in full only with --verbose. A new
stack copied from prod previews clean without a policy config of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.project import REPO, run_offline
from support.stack_edits import edit_inventory, edit_stack, render_baseline, seven_nodes

from components.planning.workloads import POLICY_SUPPRESS_ANNOTATION

VLLM = "vllm/vllm-openai:v0.32.0"


def sections(out: str) -> list[str]:
    """The first line of each section, in order of appearance."""
    heads = ("Impact", "Policy report", "Changes against", "Hardware-change runbook",
             "Stack ", "By layer:", "Fabric:", "Bring-up order:", "Wrote build/")
    return [line for line in out.splitlines() if line.startswith(heads)]


@pytest.mark.slow
def test_a_hardware_change_reads_impact_then_policies_then_diff_then_runbook(
        project: Path) -> None:
    render_baseline(project)
    edit_stack(project, seven_nodes)
    edit_inventory(project, lambda rows: [r for r in rows if not r.startswith("gpu-node-07,")])
    full = run_offline(project, "preview")
    assert full.returncode == 0, full.stdout + full.stderr
    heads = [h.split(" ")[0].rstrip(":") for h in sections(full.stdout)]
    assert heads == ["Impact", "Policy", "Changes", "Hardware-change", "Stack", "Wrote"], heads
    lines = full.stdout.splitlines()
    assert lines[0].startswith("Impact") and "gpu-node-07" in "\n".join(
        lines[:lines.index(next(x for x in lines if x.startswith("Policy report")))])

    quiet = run_offline(project, "preview", "--quiet")
    assert quiet.returncode == 0
    assert [h.split(" ")[0] for h in sections(quiet.stdout)] == ["Impact", "Policy"]
    assert "suppressed:" not in quiet.stdout  # mandatory violations only

    assert "By layer:" not in full.stdout and "Bring-up order:" not in full.stdout
    verbose = run_offline(project, "preview", "--verbose")
    heads = [h.split(" ")[0].rstrip(":") for h in sections(verbose.stdout)]
    assert heads[-5:] == ["Stack", "By", "Fabric", "Bring-up", "Wrote"], heads


@pytest.mark.slow
def test_the_diff_shows_old_and_new_values_and_masks_secrets(project: Path) -> None:
    render_baseline(project)
    stack = project / "Pulumi.prod.yaml"
    text = stack.read_text()
    assert VLLM in text
    doc = yaml.safe_load(text.replace(VLLM, "vllm/vllm-openai:v0.32.1"))
    doc["config"]["gpu-cluster:cluster"]["credentials"]["bmcPasswordVersion"] = 2
    stack.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = run_offline(project, "preview")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    diff = json.loads((project / "build/prod/diff.json").read_text())
    images = {p: v for c in diff for p, v in c["values"].items() if p.endswith(".image")}
    assert images and all(v == {"old": VLLM, "new": "vllm/vllm-openai:v0.32.1"}
                          for v in images.values()), images
    assert f'"{VLLM}" → "vllm/vllm-openai:v0.32.1"' in proc.stdout
    secrets = [v for c in diff for v in c["values"].values()
               if "[secret" in json.dumps(v)]
    assert secrets and all(v == {"old": "[secret version 1]", "new": "[secret version 2]"}
                           for v in secrets), secrets
    # The values themselves never reach a file: the preview fails if a secret's placeholder
    # appears in plain text anywhere it writes (preview._leak_check).


@pytest.mark.slow
def test_suppressed_findings_are_listed_with_their_reasons(project: Path) -> None:
    proc = run_offline(project, "preview")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((project / "build/prod/policy-report.json").read_text())
    suppressed = [v for v in report if v["level"] == "suppressed"]
    assert {v["policy"] for v in suppressed} == {"nccl-no-debug-knobs"}
    assert {v["resource"].rsplit("::", 1)[1] for v in suppressed} == {
        "mpijob-training-nccl-allreduce"}
    assert any("NCCL_DEBUG='INFO'" in v["message"] for v in suppressed)
    assert all("bring-up check" in v["reason"] for v in suppressed)
    assert f", {len(suppressed)} suppressed):" in proc.stdout
    # Once per rule, with a count: a reviewer acts on none of them.
    lines = [ln for ln in proc.stdout.splitlines() if "nccl-no-debug-knobs" in ln]
    assert lines == [f"    [nccl-no-debug-knobs] {len(suppressed)} findings on "
                     "mpijob-training-nccl-allreduce; reason: the NCCL acceptance test parses "
                     + suppressed[0]["reason"].removeprefix("the NCCL acceptance test parses ")]
    # --verbose lists each finding.
    verbose = run_offline(project, "preview", "--verbose")
    assert verbose.stdout.count("sets NCCL_DEBUG='INFO'") == 2  # launcher and worker


def test_the_stack_writes_the_packs_suppression_annotation() -> None:
    import sys

    sys.path.insert(0, str(REPO / "policies"))
    from gpu_guardrails.registry import SUPPRESS_ANNOTATION

    assert POLICY_SUPPRESS_ANNOTATION == SUPPRESS_ANNOTATION


@pytest.mark.slow
def test_a_new_stack_copied_from_prod_previews_clean_and_says_which_policies_apply(
        project: Path) -> None:
    (project / "Pulumi.staging.yaml").write_text((project / "Pulumi.prod.yaml").read_text())
    assert not (project / "policies/policy-config.staging.json").exists()
    proc = run_offline(project, "preview", "--stack", "staging")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "policies: no policies/policy-config.staging.json" in proc.stdout
    assert ", 0 mandatory," in proc.stdout


def test_the_command_list_shows_only_commands_a_user_runs() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "offline", "--help"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert "SUPPRESS" not in out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ")
              and not line.startswith("     ")]
    assert listed == ["preview", "site", "check-rendered", "bench", "repair"], listed
    assert "{preview,site,check-rendered,bench,repair}" in out


def test_a_switch_without_a_host_key_is_sent_to_the_fabric_config() -> None:
    """The switches' keys live in fabric.switchHostKeys, not in the inventory."""
    import sys
    from types import SimpleNamespace

    sys.path.insert(0, str(REPO / "policies"))
    from gpu_guardrails.rules import ssh_host_key_pinned

    def message(urn: str, name: str) -> str:
        said: list[str] = []
        args = SimpleNamespace(props={"connection": {"host": "10.0.9.1"}}, urn=urn, name=name)
        ssh_host_key_pinned(args, lambda m, _u=None: said.append(m))
        return said[0]

    fabric = "urn:pulumi:prod::gpu-cluster::gpucluster:fabric:InfinibandFabric$command:remote:"
    assert "fabric.switchHostKeys" in message(fabric + "Command::leaf-su1-r0-1-config",
                                              "leaf-su1-r0-1-config")
    assert "inventory" in message(fabric + "Command::sm-01-opensm", "sm-01-opensm")
