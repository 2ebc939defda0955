"""The Kubernetes minor upgrade path from prod (1.35) to 1.36, as the vendors state it.

The expected ranges below are the vendors' own statements, copied from the pages cited beside
them, never from the table under test: the table (policies/gpu_guardrails/compat_data.py) must
agree with them, and the stack's config validation must refuse 1.36 naming exactly the prod
releases the vendors do not support on 1.36, and accept each step that moves them.

- Kubernetes 1.36 "Haru": 1.36.0 released 2026-04-22 (https://kubernetes.io/releases/1.36/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.project import prod_raw

from components.model import compat
from components.model.fields import ConfigError
from components.wiring.loading import validate_cluster

REPO = Path(__file__).resolve().parents[1]

# Vendor statements: (component, release) -> the Kubernetes minors, first and last.
# GPU Operator 26.3.2 release notes: "Added support for Kubernetes 1.36"; its platform support,
# Ubuntu 22.04 and 24.04 with upstream Kubernetes: 1.32-1.36
# (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/release-notes.html;
# NVIDIA/cloud-native-docs gpu-operator/platform-support.rst at "Add docs for 26.3.2").
GPU_OPERATOR_26_3_2 = (32, 36)
# GPU Operator 26.7.0: Ubuntu 24.04 1.32-1.36, Ubuntu 22.04 1.33-1.36; both: 1.33-1.36
# (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/platform-support.html).
GPU_OPERATOR_26_7_0 = (33, 36)
# Network Operator 26.4.x: Kubernetes ">=1.31 and <=1.35"
# (https://docs.nvidia.com/networking/display/kubernetes2640/platform-support.html).
NETWORK_OPERATOR_26_4 = (31, 35)
# Network Operator 26.7.0: Kubernetes ">=1.32 and <=1.36"
# (https://docs.nvidia.com/networking/display/kubernetes2670/platform-support.html); its
# DOCA-OFED driver container (.../kubernetes2670/advanced/images-sha256.html, "DOCA-OFED Driver
# Container Images").
NETWORK_OPERATOR_26_7_0 = (32, 36)
NETWORK_OPERATOR_26_7_0_DOCA = "doca3.5.0-26.07-0.7.7.0-0"
# Calico "Supported versions" (https://docs.tigera.io/calico/<series>/getting-started/
# kubernetes/requirements): v3.31 is tested with 1.32, 1.33, 1.34, 1.35; v3.32 with 1.34,
# 1.35, 1.36. v3.32.1 is a v3.32 release (Calico 3.32 docs, component versions).
CALICO_V3_31 = (32, 35)
CALICO_V3_32 = (34, 36)
CALICO_ON_1_36 = "v3.32.1"

# 1.36.x: the first release and a later patch (1.36.2, released 2026-06-09, kubernetes.io).
K8S_1_36 = ["1.36.0", "1.36.2"]


def _span(rng: tuple[int, int]) -> str:
    return f"1.{rng[0]}-1.{rng[1]}"


def _problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, message) of every problem the stack's config validation finds; [] if valid."""
    try:
        validate_cluster(raw, REPO)
    except ConfigError as err:
        return [(p.path, p.message) for p in err.problems]
    return []


def _prod(k8s: str | None = None, calico: str | None = None,
          network_operator: str | None = None) -> dict[str, Any]:
    raw = prod_raw()
    if k8s is not None:
        raw["kubernetes"]["version"] = k8s
    if calico is not None:
        raw["platform"]["calico"]["version"] = calico
    if network_operator is not None:
        raw["platform"]["networkOperator"]["version"] = network_operator
    return raw


def test_prod_runs_the_releases_this_path_starts_from() -> None:
    """The starting point the vendor statements below are about: prod's stack file."""
    p = prod_raw()
    assert p["kubernetes"]["version"].startswith("1.35.")
    assert p["platform"]["gpuOperator"]["version"] == "v26.3.2"
    assert p["platform"]["networkOperator"]["version"] == "26.4.1"
    assert p["platform"]["calico"]["version"].startswith("v3.31.")


def test_the_table_says_what_the_vendors_say() -> None:
    assert compat.GPU_OPERATOR_K8S["v26.3.2"] == GPU_OPERATOR_26_3_2
    assert compat.GPU_OPERATOR_K8S["v26.7.0"] == GPU_OPERATOR_26_7_0
    assert compat.NETWORK_OPERATOR_K8S["26.4.0"] == NETWORK_OPERATOR_26_4
    assert compat.NETWORK_OPERATOR_K8S["26.4.1"] == NETWORK_OPERATOR_26_4
    assert compat.CALICO_K8S["v3.31"] == CALICO_V3_31
    assert compat.CALICO_K8S["v3.32"] == CALICO_V3_32
    assert compat.NETWORK_OPERATOR_K8S["26.7.0"] == NETWORK_OPERATOR_26_7_0
    assert compat.NETWORK_OPERATOR_RELEASES["26.7.0"]["docaDriver"] == \
        NETWORK_OPERATOR_26_7_0_DOCA


@pytest.mark.parametrize("k8s", K8S_1_36)
def test_1_36_on_prod_is_refused_naming_each_release_that_ends_at_1_35(k8s: str) -> None:
    """Network Operator 26.4.1 and Calico v3.31 end at 1.35; GPU Operator 26.3.2 reaches 1.36,
    so it is not named."""
    problems = _problems(_prod(k8s))
    assert [path for path, _ in problems] == ["kubernetes.version"] * 2, problems
    messages = [m for _, m in problems]
    assert f"Network Operator 26.4.1 supports Kubernetes {_span(NETWORK_OPERATOR_26_4)}" \
        in messages
    calico = prod_raw()["platform"]["calico"]["version"]
    assert f"Calico {calico} is tested with Kubernetes {_span(CALICO_V3_31)}" in messages
    assert not any("GPU Operator" in m for m in messages), messages


def test_calico_moves_first_while_prod_is_on_1_35() -> None:
    """Step 1: Calico v3.32 is tested with 1.35 too, so it moves before Kubernetes does."""
    assert _problems(_prod(calico=CALICO_ON_1_36)) == []


@pytest.mark.parametrize("k8s", K8S_1_36)
def test_with_calico_moved_the_network_operator_alone_blocks_1_36(k8s: str) -> None:
    problems = _problems(_prod(k8s, calico=CALICO_ON_1_36))
    assert problems == [("kubernetes.version", "Network Operator 26.4.1 supports Kubernetes "
                         f"{_span(NETWORK_OPERATOR_26_4)}")]


@pytest.mark.parametrize("k8s", K8S_1_36)
def test_prod_on_releases_that_support_1_36_validates(k8s: str) -> None:
    """The whole path: GPU Operator 26.3.2 (as is), Calico v3.32, Network Operator 26.7.0, then
    Kubernetes 1.36."""
    raw = _prod(calico=CALICO_ON_1_36, network_operator="26.7.0")
    assert _problems(raw) == []  # the Network Operator step, on 1.35
    raw["kubernetes"]["version"] = k8s
    assert _problems(raw) == []
