"""End to end: `python -m offline preview` on the stand-in project of
tests/support/offline_project.py."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.offline_project import (
    SECRET_CIPHERTEXT,
    STARTER_RULES,
    make_offline_project,
    write_offline_stack,
)
from support.project import run_offline

PLACEHOLDER = "offline-secret-sshPrivateKey"
HW = "urn:pulumi:prod::gpu-cluster::gpucluster:hardware:BareMetalNode$command:remote:Command::"


@pytest.fixture(scope="module")
def previewed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    project = make_offline_project(tmp_path_factory.mktemp("preview"))
    proc = run_offline(project, "preview", "--render")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return project, proc


def plan_of(project: Path) -> dict[str, Any]:
    plan = json.loads((project / "build/prod/plan.json").read_text())
    return {r["urn"]: r for r in plan["resources"]} | {"summary": plan["summary"]}


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_secrets_are_hidden_exactly_where_they_are(previewed: tuple[Path, Any]) -> None:
    project, _ = previewed
    cmd = plan_of(project)[HW + "node-a-prepare"]
    # Only the secret env var is hidden, not the whole `environment` input.
    assert cmd["inputs"]["environment"] == {"SSH_KEY": "[secret]", "RAILS": "8"}
    # pulumi-command marks all of `connection` secret: the host stays visible, the key not.
    conn = cmd["inputs"]["connection"]
    assert conn["privateKey"] == "[secret]"
    assert conn["host"] == "10.0.1.1" and conn["hostKey"] == "ssh-ed25519 AAAAnode-a"
    provider = plan_of(project)[
        "urn:pulumi:prod::gpu-cluster::gpucluster:bootstrap:KubeadmCluster"
        "$pulumi:providers:kubernetes::k8s"]
    # stdout is an additionalSecretOutput of the kubeconfig command: the engine's marking.
    assert provider["inputs"]["kubeconfig"] == "[secret]"


def test_secret_values_never_reach_any_file(previewed: tuple[Path, Any]) -> None:
    project, _ = previewed
    files = tree_bytes(project / "build") | tree_bytes(project / "rendered")
    assert len(files) > 20
    for path, data in files.items():
        assert PLACEHOLDER.encode() not in data, path
        assert SECRET_CIPHERTEXT.encode() not in data, path


def test_whole_floats_become_ints(previewed: tuple[Path, Any]) -> None:
    project, _ = previewed
    text = (project / "build/prod/manifests/training/deployment-vllm.yaml").read_text()
    doc = yaml.safe_load(text)
    assert doc["spec"]["replicas"] == 2 and isinstance(doc["spec"]["replicas"], int)
    limits = doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": 1.5, "nvidia.com/gpu": 8}
    assert "2.0" not in text and "8.0" not in text
    port = plan_of(project)[HW + "node-a-prepare"]["inputs"]["connection"]["port"]
    assert port == 22 and isinstance(port, int)


def test_options_are_captured(previewed: tuple[Path, Any]) -> None:
    project, _ = previewed
    plan = plan_of(project)
    cmd = plan[HW + "node-a-prepare"]
    assert cmd["options"]["protect"] is True
    # The engine's URN form: no root-stack type before a top-level resource's own.
    assert cmd["parent"] == ("urn:pulumi:prod::gpu-cluster::"
                             "gpucluster:hardware:BareMetalNode::node-a")
    assert cmd["layer"] == "hardware" and cmd["custom"] is True
    assert cmd["options"]["additionalSecretOutputs"] == ["connection"]
    assert cmd["options"]["replaceOnChanges"] == ["triggers[*]"]
    kubeconfig = plan["urn:pulumi:prod::gpu-cluster::gpucluster:bootstrap:KubeadmCluster"
                      "$command:remote:Command::admin-kubeconfig"]
    assert kubeconfig["options"]["dependsOn"] == [HW + "node-a-prepare", HW + "node-b-prepare"]
    assert kubeconfig["options"]["protect"] is False
    cm = plan["urn:pulumi:prod::gpu-cluster::gpucluster:platform:Platform"
              "$kubernetes:core/v1:ConfigMap::nccl-env"]
    assert cm["options"]["provider"].endswith("$pulumi:providers:kubernetes::k8s")
    component = plan["urn:pulumi:prod::gpu-cluster::gpucluster:hardware:BareMetalNode::node-a"]
    assert component["custom"] is False
    stack = "urn:pulumi:prod::gpu-cluster::pulumi:pulumi:Stack::gpu-cluster-prod"
    assert component["parent"] == stack
    summary = plan["summary"]
    assert summary["byLayer"] == {"hardware": 4, "fabric": 2, "bootstrap": 3, "platform": 6}
    assert summary["byType"]["command:remote:Command"] == 4


def test_manifests_helm_and_artifacts(previewed: tuple[Path, Any]) -> None:
    project, proc = previewed
    build = project / "build/prod"
    names = sorted(p.relative_to(build / "manifests").as_posix()
                   for p in (build / "manifests").rglob("*.yaml"))
    # The auto-named ConfigMap is filed under its resource name.
    assert names == ["cluster/namespace-training.yaml", "training/configmap-nccl-env.yaml",
                     "training/deployment-vllm.yaml", "training/secret-registry.yaml"]
    secret = yaml.safe_load((build / "manifests/training/secret-registry.yaml").read_text())
    assert secret["stringData"] == "[secret]"  # pulumi-kubernetes marks it secret
    cm = yaml.safe_load((build / "manifests/training/configmap-nccl-env.yaml").read_text())
    assert cm == {"apiVersion": "v1", "kind": "ConfigMap", "data": {"NCCL_DEBUG": "WARN"},
                  "metadata": {"name": "nccl-env", "namespace": "training"}}
    helm = yaml.safe_load((build / "helm/gpu-operator.yaml").read_text())
    assert helm == {"name": "gpu-operator", "chart": "gpu-operator", "version": "v26.3.2",
                    "repo": "https://helm.ngc.nvidia.com/nvidia", "namespace": "gpu-operator",
                    "values": {"driver": {"enabled": False}, "dcgmExporter": {"interval": 1.5}}}
    script = build / "scripts/node-b/prepare-host.sh"
    assert script.read_text().endswith("hostnamectl set-hostname node-b\n")
    assert os.access(script, os.X_OK)
    assert (build / "fabric/opensm.conf").read_text() == "routing_engine ftree\n"
    assert json.loads((build / "policy-report.json").read_text()) == []
    assert re.search(r"Policy report \(\d+ policies, 0 mandatory, 0 advisory violations, "
                     r"0 suppressed\)", proc.stdout)


def test_rendered_has_one_file_per_resource(previewed: tuple[Path, Any]) -> None:
    project, _ = previewed
    root = project / "rendered/prod"
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.yaml"))
    assert len(files) == plan_of(project)["summary"]["total"] == 15
    assert "hardware/command-remote-Command/node-a-prepare.yaml" in files
    assert "platform/kubernetes-apps-v1-Deployment/vllm.yaml" in files
    assert "stack/pulumi-providers-kubernetes/k8s.yaml" not in files  # parent is bootstrap
    assert "bootstrap/pulumi-providers-kubernetes/k8s.yaml" in files
    doc = yaml.safe_load((root / "hardware/command-remote-Command/node-a-prepare.yaml").read_text())
    assert set(doc) == {"urn", "type", "name", "parent", "inputs", "options"}


def test_config_error_exits_2_and_leaves_no_earlier_verdict_looking_current(
        offline_project: Path) -> None:
    first = run_offline(offline_project, "preview")
    assert first.returncode == 0, first.stderr
    before = tree_bytes(offline_project / "build")
    write_offline_stack(offline_project, replicas=0)
    proc = run_offline(offline_project, "preview")
    assert proc.returncode == 2
    assert "gpu-cluster:cluster.replicas: 0 is not allowed" in proc.stderr
    assert "fix: set replicas to 1 or more" in proc.stderr
    assert "Traceback" not in proc.stderr
    # The plan and rendering stay the last good run's; the impact and runbook a reader opens
    # next (the README's quick start) say that this preview failed, not the last one's verdict.
    after = tree_bytes(offline_project / "build")
    verdicts = {"prod/impact.txt", "prod/runbook.txt"}
    assert {k: v for k, v in after.items() if k not in verdicts} == {
        k: v for k, v in before.items() if k not in verdicts | {"prod/diff.json"}}
    for name in verdicts:
        assert after[name].decode() == (
            f"No {name[5:-4]}: the last preview failed (exit 2: a config error); fix what it "
            "printed and preview again.\n")


@pytest.mark.parametrize("text, where", [
    ("config:\n  gpu-cluster:cluster: [\n    - a\n", "line 3, column 5: '- a'"),
    ("- just\n- a list\n", "the top level is a list, not a mapping"),
])
def test_a_stack_file_that_is_not_yaml_is_a_config_error(offline_project: Path, text: str,
                                                          where: str) -> None:
    (offline_project / "Pulumi.broken.yaml").write_text(text)
    proc = run_offline(offline_project, "preview", "--stack", "broken")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"Pulumi.broken.yaml{' ' if 'line' in where else ': '}{where}")
    assert "fix: " in proc.stderr and "Traceback" not in proc.stderr
    assert not (offline_project / "build" / "broken").exists()


def test_a_missing_stack_file_is_a_config_error_naming_the_stacks_there(
        offline_project: Path) -> None:
    proc = run_offline(offline_project, "preview", "--stack", "nosuch")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""  # nothing said about a stack that is not there
    assert proc.stderr == (
        "Pulumi.nosuch.yaml: no such stack file (stack 'nosuch'); the stacks here: prod; fix: "
        "name one of them (STACK=<name>), or start this one from the reference cluster: "
        "cp Pulumi.prod.yaml Pulumi.nosuch.yaml\n")


def test_invokes_return_empty_results(offline_project: Path) -> None:
    write_offline_stack(offline_project, invoke=True)
    proc = run_offline(offline_project, "preview", "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_program_exception_exits_1_with_traceback(offline_project: Path) -> None:
    write_offline_stack(offline_project, crash=True)
    proc = run_offline(offline_project, "preview")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "the program crashed on purpose" in proc.stderr
    assert not (offline_project / "build").exists()


def test_plaintext_secret_is_refused(offline_project: Path) -> None:
    write_offline_stack(offline_project, leak=True)
    proc = run_offline(offline_project, "preview")
    assert proc.returncode == 1
    assert "gpu-cluster:sshPrivateKey appears in plain text" in proc.stderr
    assert not (offline_project / "build").exists()


def test_default_provider_disabled_like_the_engine(offline_project: Path) -> None:
    main = offline_project / "__main__.py"
    main.write_text(main.read_text() + '\nk8s.core.v1.Namespace("no-provider")\n')
    proc = run_offline(offline_project, "preview")
    assert proc.returncode == 1
    assert "Default provider for 'kubernetes' disabled" in proc.stderr


def test_mandatory_violation_exits_3_and_is_reported(offline_project: Path) -> None:
    write_offline_stack(offline_project, image="nvcr.io/nvidia/pytorch:latest",
                        chartVersion="^26.3")
    proc = run_offline(offline_project, "preview")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    report = json.loads((offline_project / "build/prod/policy-report.json").read_text())
    assert [(v["policy"], v["level"]) for v in report] == [
        ("helm-chart-pinned", "mandatory"), ("no-latest-image", "mandatory")]
    assert report[1]["resource"].endswith("$kubernetes:apps/v1:Deployment::vllm")
    assert "uses :latest" in report[1]["message"]
    assert "mandatory:" in proc.stdout and "[no-latest-image]" in proc.stdout

    # A policy config downgrades a rule: still reported, no longer failing.
    conf = offline_project / "levels.json"
    conf.write_text(json.dumps({**STARTER_RULES, "no-latest-image": "advisory",
                                "helm-chart-pinned": {"enforcementLevel": "disabled"}}))
    proc = run_offline(offline_project, "preview", "--policy-config", str(conf))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((offline_project / "build/prod/policy-report.json").read_text())
    assert [(v["policy"], v["level"]) for v in report] == [("no-latest-image", "advisory")]
    disabled = next(line for line in proc.stdout.splitlines() if "disabled:" in line)
    assert "helm-chart-pinned" in disabled


def test_two_runs_with_different_hash_seeds_are_byte_identical(tmp_path: Path) -> None:
    trees = []
    for seed in ("1", "4242"):
        project = make_offline_project(tmp_path / seed)
        proc = run_offline(project, "preview", "--render", hashseed=seed)
        assert proc.returncode == 0, proc.stderr
        trees.append(tree_bytes(project / "build") | {
            "rendered/" + k: v for k, v in tree_bytes(project / "rendered").items()})
    assert trees[0] == trees[1]
    # build: 10 files + outputs.json + diff.json + runbook.txt + impact.txt; rendered: 15
    assert len(trees[0]) == 14 + 15
