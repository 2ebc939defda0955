"""The CI workflows never hand production credentials to unreviewed code.

GitHub's model (docs.github.com: "Using environments for deployment", "Security hardening for
GitHub Actions"): a `pull_request` run gets no repository secrets from a fork, but a branch of
the same repository does; an environment's secrets reach only jobs that name it, and its
deployment-branch rule and reviewers gate them; `workflow_dispatch` runs any branch's copy of
the workflow; a tag can be moved, a commit SHA cannot. actionlint checks the rest.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
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


def test_the_pr_is_judged_by_the_base_branchs_runner_too() -> None:
    """The PR's own offline/ runs the base pack; the base branch's runner runs it as well, on
    the PR's program, so a PR cannot skip the rules by changing the runner."""
    steps = WORKFLOWS["pull-request.yml"]["jobs"]["offline"]["steps"]
    base = next(s for s in steps if s.get("with", {}).get("path") == ".base")
    assert set(base["with"]["sparse-checkout"].split()) == {"policies", "offline"}
    runner = next(s for s in steps if s.get("working-directory") == ".base")
    assert re.search(r"-m offline preview --project-dir \.\. .*--policy-pack policies",
                     runner["run"]), runner["run"]
    make = next(i for i, s in enumerate(steps) if "make preview" in str(s.get("run", "")))
    assert steps.index(runner) > make  # after `make preview` made the virtualenv


def _owned(path: str, pattern: str) -> bool:
    """CODEOWNERS' gitignore-style match, as far as this file uses it."""
    if pattern == "*":
        return True
    if pattern.endswith("/"):
        return ("/" + path).startswith(pattern)
    return fnmatch.fnmatchcase("/" + path, pattern)


def test_codeowners_guard_everything_that_runs_with_production_secrets() -> None:
    """main's `up` job runs the program, its components and requirements, the Makefile, the
    preview runner and tools with production credentials; the pack and the stack files decide
    what passes: every tracked file has an owner."""
    rules = [line.split()[0] for line in (REPO / ".github/CODEOWNERS").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    for must in ("__main__.py", "Makefile", "requirements.txt", "components/wiring/blueprint.py",
                 "offline/cli.py", "policies/policy-config.prod.json", "Pulumi.prod.yaml",
                 ".github/workflows/main.yml", "tools/set-stack-secrets.sh"):
        assert must in tracked, must
    unowned = [p for p in tracked if not any(_owned(p, r) for r in rules)]
    assert unowned == [], unowned[:20]


@pytest.mark.slow
@pytest.mark.parametrize("weakened", ["suppression", "runner", "rule removed"])
def test_a_change_cannot_weaken_the_pack_that_judges_it(project: Path, weakened: str) -> None:
    """A change turns audit logging off and, in the same change, silences the rule that
    catches it: its own pack lets it through; the base branch's (this repository's) does not."""
    stack = project / "Pulumi.prod.yaml"
    stack.write_text(stack.read_text().replace("auditLogging: true", "auditLogging: false"))
    if weakened == "suppression":
        config = project / "policies/policy-config.prod.json"
        config.write_text(json.dumps({**json.loads(config.read_text()),
                                      "kube-audit-logging": "disabled"}))
    elif weakened == "runner":  # the change's own preview runner skips the pack
        policy = project / "offline/policy.py"
        text = policy.read_text()
        assert "\ndef load_pack(" in text
        policy.write_text(text + "\n\ndef load_pack(*args, **kwargs):\n    return None\n")
    else:  # the rule demoted to advisory in the change's own pack
        rules = project / "policies/gpu_guardrails/rules_bootstrap.py"
        text = rules.read_text()
        head = '"kube-audit-logging",\n    "kubeadm\'s API server writes an audit log'
        assert head in text
        at = text.index(head)
        demoted = text[at:].replace("MANDATORY,", "EnforcementLevel.ADVISORY,", 1)
        rules.write_text(text[:at] + demoted)
    own = run_offline(project, "preview", "--quiet") if weakened != "runner" else \
        subprocess.run([sys.executable, "-m", "offline", "preview", "--quiet"], cwd=project,
                       env={**os.environ, "PYTHONPATH": str(project)}, capture_output=True,
                       text=True, timeout=300)  # the change's own runner, as make runs it
    assert own.returncode == 0, own.stdout[-2000:] + own.stderr
    base = run_offline(project, "preview", "--quiet",
                       "--policy-pack", str(REPO / "policies"))
    assert base.returncode == 3, base.stdout[-2000:] + base.stderr
    assert "kube-audit-logging" in base.stdout
