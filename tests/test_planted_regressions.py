"""Planted security regressions (support/plants.py), each alone in a copy of the repository with
prod's committed rendering, previewed as a PR is: each must fail the preview, refused by the
config (exit 2) or by a mandatory rule of the pack (exit 3) that names its class of risk. What
each class protects, and why: docs/security.md, "Threat model"."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.plants import PLANTS
from support.project import copy_deployed, run_offline

pytestmark = pytest.mark.slow

EXIT_CONFIG, EXIT_POLICY = 2, 3

# plant -> (exit status, the words that name its class: a rule of the pack, or the config's)
EXPECTED: dict[str, tuple[int, str]] = {
    "old_vllm_from_mirror": (EXIT_CONFIG, "is a vLLM release before"),
    "host_firewall_off": (EXIT_POLICY, "hosts-reachable-only-from-admin-networks"),
    "admin_cidrs_anywhere": (EXIT_POLICY, "hosts-reachable-only-from-admin-networks"),
    "sshd_root_login": (EXIT_POLICY, "hosts-reachable-only-from-admin-networks"),
    "training_in_kube_system": (EXIT_POLICY, "workloads-out-of-system-namespaces"),
    "rdma_policy_warn_only": (EXIT_POLICY, "admission-controls-intact"),
    "training_pod_security_exempt": (EXIT_POLICY, "admission-controls-intact"),
    "node_restriction_off": (EXIT_POLICY, "admission-controls-intact"),
    "inference_policy_any_namespace": (EXIT_POLICY, "services-only-through-the-ingress"),
    "inference_load_balancer": (EXIT_POLICY, "services-only-through-the-ingress"),
    "ingress_snippets_allowed": (EXIT_POLICY, "services-only-through-the-ingress"),
    "approver_any_kubernetes_signer": (EXIT_POLICY, "identities-least-privilege"),
    "viewers_cluster_admin": (EXIT_POLICY, "identities-least-privilege"),
    "vllm_as_root": (EXIT_POLICY, "workload-containers-unprivileged"),
    "default_partition_full": (EXIT_POLICY, "fabric-partitions-closed"),
    "vllm_trust_remote_code": (EXIT_POLICY, "no-remote-code-from-models"),
    "grafana_literal_password": (EXIT_POLICY, "secrets-not-in-clear"),
    "api_key_on_argv": (EXIT_POLICY, "secrets-not-in-clear"),
    "approver_accepts_any_ip": (EXIT_POLICY, "kubelet-serving-approver-vouches"),
    "pods_reach_the_management_network": (EXIT_POLICY, "workloads-off-admin-networks"),
}


def test_every_plant_has_its_verdict() -> None:
    assert sorted(EXPECTED) == sorted(PLANTS)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_deployed(tmp_path_factory.mktemp("prod") / "gpu-cluster")


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_regression_fails_the_preview_naming_its_class(
        deployed: Path, tmp_path: Path, plant: str) -> None:
    project = tmp_path / "gpu-cluster"
    shutil.copytree(deployed, project)
    PLANTS[plant](project)
    proc = run_offline(project, "preview", "--quiet")
    status, words = EXPECTED[plant]
    assert proc.returncode == status, (plant, proc.stdout[-3000:] + proc.stderr[-2000:])
    assert words in proc.stdout + proc.stderr, (plant, proc.stdout[-3000:] + proc.stderr)
