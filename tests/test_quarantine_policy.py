"""The quarantine's policy: every condition the detector can set has the action docs/health.md
gives it, and the hosts it must never touch are prod's control planes and subnet managers'
hosts (as Pulumi.prod.yaml names them)."""

from __future__ import annotations

import re

import yaml
from support.project import REPO
from support.sandbox import prod_cluster

from components.planning import health
from components.planning.quarantine_setup import ACTIONS, policy


def _documented() -> dict[str, str]:
    text = (REPO / "docs" / "health.md").read_text()
    start = text.index("## What happens automatically")
    section = text[start:text.index("## From fault to repair", start)]
    return dict(re.findall(r"^\| `(\w+)` \| (drain|taint) \|", section, re.M))


def test_every_condition_the_detector_sets_has_its_documented_action() -> None:
    cluster = prod_cluster()
    conditions = {c["type"] for c in health.kernel_monitor()["conditions"]}
    for monitor_checks in health.checks(cluster).values():
        conditions |= {c.condition for c in monitor_checks}
    assert set(ACTIONS) == conditions
    assert ACTIONS == _documented()


def test_prod_protects_its_control_planes_and_subnet_manager_hosts() -> None:
    raw = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"][
        "gpu-cluster:cluster"]
    control_planes = {h["hostname"] for h in raw["hosts"] if h["role"] == "control-plane"}
    sm_hosts = {sm["host"] for sm in raw["fabric"]["subnetManagers"]}
    sm_hosts |= {sm["host"] for sm in (raw["fabric"].get("storageFabric") or {}).get(
        "subnetManagers", [])}
    got = policy(prod_cluster())
    assert set(got["protected"]) == control_planes | sm_hosts
    assert {got["protected"][h] for h in control_planes} == {"control plane"}
    assert not set(got["protected"]) & {n.hostname for n in prod_cluster().nodes}
    assert got["maxQuarantined"] == 2 and got["drainTimeoutSeconds"] == 600
