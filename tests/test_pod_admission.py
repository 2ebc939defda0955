"""Pod admission in the training namespaces, against a real kube-apiserver with the stack's
AdmissionConfiguration, namespaces and ValidatingAdmissionPolicy (the twin's and the e2e's
check, `twin.checks.pod_admission`, run here on its own in seconds).

Expected verdicts come from Pod Security "baseline" (k8s.io/pod-security-admission v0.35,
policy/check_*.go: each baseline check on containers, init containers and ephemeral
containers) plus what RDMA training needs (IPC_LOCK, the scratch hostPath)."""

from __future__ import annotations

import time

import pytest
import yaml
from support.sandbox import prod_cluster
from support.twin import BINS

from components.planning import kubeadm, namespaces, pod_security
from twin import checks
from twin.controlplane import ControlPlane

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not BINS, reason="control-plane binaries not built: run "
                                 "`make k8s-tools` (kube-apiserver, kubectl)")]

CLUSTER = prod_cluster()


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("admission")
    config = work / "admission-config.yaml"
    config.write_text(kubeadm.admission_configuration_yaml(CLUSTER))
    with ControlPlane(BINS[-1], work / "cp", admission_config=config) as cp:
        cp.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(
            [*namespaces.namespaces(CLUSTER), *pod_security.rdma_pod_policy(CLUSTER)]))
        namespace = CLUSTER.platform.gpu_operator.namespace
        cp.kubectl("create", "namespace", namespace, check=False)
        lines: list[str] = []
        # The binding takes a moment to reach the admission plugin: retry until a refusal.
        failures: list[str] = []
        for _ in range(30):
            lines = []
            failures = list(checks.pod_admission(cp, CLUSTER, lines))
            if not failures:
                break
            time.sleep(1)
        assert failures == [], failures
    return {s.split(":", 1)[0].removeprefix("admission "): s.split(": ", 1)[1]
            for s in lines if s.startswith("admission ")}


@pytest.mark.parametrize(("case", "why"), [
    ("privileged", "privileged containers are not allowed"),
    ("host-root", "hostPath volumes other than the scratch array"),
    ("sys-admin", "capabilities beyond baseline and IPC_LOCK"),
    ("apparmor-unconfined", "AppArmor profiles other than RuntimeDefault and Localhost"),
    ("selinux-spc", "SELinux options other than a container type"),
    ("probe-host", "probes and lifecycle handlers may not name a host"),
    # `kubectl debug --profile=sysadmin`: an UPDATE of pods/ephemeralcontainers.
    ("sysadmin-debugger", "privileged containers are not allowed"),
])
def test_a_training_pod_is_refused_what_baseline_refuses(seen: dict[str, str], case: str,
                                                         why: str) -> None:
    assert why in seen[f"training/{case}"], seen


def test_what_rdma_training_needs_is_admitted(seen: dict[str, str]) -> None:
    assert seen["training/rdma-worker"] == "admitted"
    assert seen[f"{CLUSTER.platform.gpu_operator.namespace}/driver"] == "admitted"
    assert 'violates PodSecurity "baseline:latest"' in seen["twin-unlabeled/privileged"]


def test_every_baseline_check_of_the_pod_security_admission_is_in_the_policy() -> None:
    """Each baseline check of pod-security-admission (its check IDs) has its rule here."""
    messages = " ".join(v["message"] for v in
                        pod_security.rdma_pod_policy(CLUSTER)[0]["spec"]["validations"])
    for word in ("host namespaces", "privileged", "capabilities", "hostPath", "host ports",
                 "seccomp", "procMount", "sysctls", "AppArmor", "SELinux", "hostProcess",
                 "probes and lifecycle handlers"):
        assert word in messages, word
    rules = pod_security.rdma_pod_policy(CLUSTER)[0]["spec"]["matchConstraints"]["resourceRules"]
    assert rules[0]["resources"] == ["pods", "pods/ephemeralcontainers"]
