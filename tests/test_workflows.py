"""The CI workflows never hand production credentials to unreviewed code.

GitHub's model (docs.github.com: "Using environments for deployment", "Security hardening for
GitHub Actions"): a `pull_request` run gets no repository secrets from a fork, but a branch of
the same repository does; an environment's secrets reach only jobs that name it, and its
deployment-branch rule and reviewers gate them; `workflow_dispatch` runs any branch's copy of
the workflow; a tag can be moved, a commit SHA cannot. actionlint checks the rest.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.project import run_offline

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = {p.name: yaml.safe_load(p.read_text())
             for p in sorted((REPO / ".github/workflows").glob("*.yml"))}
TEXTS = {p.name: p.read_text() for p in sorted((REPO / ".github/workflows").glob("*.yml"))}
SECRET = re.compile(r"\$\{\{\s*secrets\.(\w+)\s*\}\}")


def triggers(wf: dict[str, Any]) -> set[str]:
    on = wf.get("on", wf.get(True))  # PyYAML reads the key `on` as True
    return set(on) if isinstance(on, dict) else {on} if isinstance(on, str) else set(on)


def production_secrets(job: dict[str, Any]) -> set[str]:
    return set(SECRET.findall(yaml.safe_dump(job))) - {"GITHUB_TOKEN"}


@pytest.mark.slow
def test_actionlint_finds_nothing() -> None:
    build = subprocess.run(["bash", str(REPO / "tools/actionlint/build.sh")],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    binary = build.stdout.strip().splitlines()[-1]
    proc = subprocess.run([binary, *sorted(str(p) for p in (REPO / ".github/workflows")
                                           .glob("*.yml"))],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pull_requests_get_no_secret_and_no_management_runner() -> None:
    for name, wf in WORKFLOWS.items():
        assert "pull_request_target" not in triggers(wf), name
        if "pull_request" not in triggers(wf):
            continue
        for job_name, job in wf["jobs"].items():
            assert not production_secrets(job), (name, job_name)
            assert "self-hosted" not in yaml.safe_dump(job.get("runs-on")), (name, job_name)
            assert "environment" not in job, (name, job_name)


def test_production_secrets_reach_only_main_in_the_production_environment() -> None:
    """Every job that reads a production secret names the `production` environment (whose
    secrets they are: repository secrets would reach any branch) and refuses any ref but main
    (workflow_dispatch runs any branch's copy), on the management runner group."""
    jobs = [(name, job_name, job) for name, wf in WORKFLOWS.items()
            for job_name, job in wf["jobs"].items() if production_secrets(job)]
    assert {(n, j) for n, j, _ in jobs} == {("main.yml", "up"), ("drift.yml", "drift")}
    for name, job_name, job in jobs:
        assert job.get("environment") == "production", (name, job_name)
        assert "github.ref == 'refs/heads/main'" in job["if"], (name, job_name)
        assert job["runs-on"]["group"] == "gpu-cluster-mgmt", (name, job_name)
        assert not set(triggers(WORKFLOWS[name])) & {"pull_request", "pull_request_target"}


def test_every_action_is_pinned_by_commit_and_checkouts_keep_no_token() -> None:
    for name, text in TEXTS.items():
        uses = re.findall(r"uses:\s*(\S+)(.*)", text)
        assert uses, name
        for ref, comment in uses:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), (name, ref)
            assert re.search(r"# v\d", comment), (name, ref, "no version comment")
        for job in WORKFLOWS[name]["jobs"].values():
            for step in job["steps"]:
                if str(step.get("uses", "")).startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False, name
    # Python packages are pinned the same way: every install from a requirements file is
    # checked against the lock file's hashes (pip refuses a package without one).
    installs = [(name, line) for name, text in TEXTS.items() for line in text.splitlines()
                if re.search(r"\bpip install\b.*\s-r\s", line)]
    assert installs
    for name, line in installs:
        assert "--require-hashes" in line.split(), (name, line)


def test_the_cli_is_the_one_the_end_to_end_run_proves() -> None:
    """The workflows run the CLI release `make engine` builds and `make e2e` runs `pulumi up`
    with, at or above the SDK (an older CLI refuses a newer SDK's programs)."""
    sdk = re.search(r"^pulumi==([^\s\\]+)", (REPO / "requirements.txt").read_text(), re.M)
    engine = re.search(r'^PULUMI_VERSION="\$\{PULUMI_VERSION:-([^}]+)\}"',
                       (REPO / "tools/engine/build.sh").read_text(), re.M)
    assert sdk and engine
    pins = [step["with"]["pulumi-version"] for wf in WORKFLOWS.values()
            for job in wf["jobs"].values() for step in job["steps"]
            if "pulumi-version" in (step.get("with") or {})]
    assert pins and set(pins) == {engine.group(1)}

    def release(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))
    assert release(engine.group(1)) >= release(sdk.group(1))


def test_the_pr_is_judged_by_the_base_branchs_pack() -> None:
    steps = WORKFLOWS["pull-request.yml"]["jobs"]["offline"]["steps"]
    base = next(s for s in steps if s.get("with", {}).get("path") == ".base")
    assert base["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"
    preview = next(s for s in steps if "make preview" in str(s.get("run", "")))
    assert "POLICY_PACK=.base/policies" in preview["run"]


def test_codeowners_guard_what_decides_production() -> None:
    owners = (REPO / ".github/CODEOWNERS").read_text()
    for path in ("/.github/", "/policies/", "/Pulumi.*.yaml"):
        assert re.search(rf"^{re.escape(path)}\s+@\S+", owners, re.M), path


@pytest.mark.slow
@pytest.mark.parametrize("weakened", ["suppression", "rule removed"])
def test_a_change_cannot_weaken_the_pack_that_judges_it(project: Path, weakened: str) -> None:
    """A change turns audit logging off and, in the same change, silences the rule that
    catches it: its own pack lets it through; the base branch's (this repository's) does not."""
    stack = project / "Pulumi.prod.yaml"
    stack.write_text(stack.read_text().replace("auditLogging: true", "auditLogging: false"))
    if weakened == "suppression":
        config = project / "policies/policy-config.prod.json"
        config.write_text(json.dumps({**json.loads(config.read_text()),
                                      "kube-audit-logging": "disabled"}))
    else:  # the rule demoted to advisory in the change's own pack
        rules = project / "policies/gpu_guardrails/rules_bootstrap.py"
        text = rules.read_text()
        head = '"kube-audit-logging",\n    "kubeadm\'s API server writes an audit log'
        assert head in text
        at = text.index(head)
        demoted = text[at:].replace("MANDATORY,", "EnforcementLevel.ADVISORY,", 1)
        rules.write_text(text[:at] + demoted)
    own = run_offline(project, "preview", "--quiet")
    assert own.returncode == 0, own.stdout[-2000:] + own.stderr
    base = run_offline(project, "preview", "--quiet",
                       "--policy-pack", str(REPO / "policies"))
    assert base.returncode == 3, base.stdout[-2000:] + base.stderr
    assert "kube-audit-logging" in base.stdout
