"""The e2e stack and the hard rule. The e2e stack is prod's cluster with every endpoint the
engine dials on this machine: its plan has prod's resources, and every SSH host and BMC URL in
it is a loopback address whose host key is the one its simulated sshd serves. The guard the e2e
runs before the engine refuses prod, naming every address it would dial, and anything that is
not an IPv4 address in 127.0.0.0/8."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.datacentre import e2e_project
from support.project import run_offline

from e2e.guard import endpoints, is_local, outside
from e2e.stack import STACK

# The management and BMC addresses of prod's hosts, nodes and switches (Pulumi.prod.yaml).
PROD_SSH = {"10.10.0.10", "10.10.0.11", "10.10.0.12", "10.10.0.13", "10.10.0.14",
            *(f"10.10.1.{100 + i}" for i in range(8)),
            "10.10.2.1", "10.10.2.2", "10.10.2.11", "10.10.2.12", "10.10.2.13", "10.10.2.14"}
PROD_BMC = {"10.11.0.10", "10.11.0.11", "10.11.0.12", "10.11.0.13", "10.11.0.14",
            *(f"10.11.1.{100 + i}" for i in range(8))}


def plan_of(project: Path, stack: str) -> dict[str, Any]:
    return dict(json.loads((project / "build" / stack / "plan.json").read_text()))


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    project, keys = e2e_project(tmp_path_factory.mktemp("e2e"))
    proc = run_offline(project, "preview", "--stack", STACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return project, keys


def test_the_e2e_stack_is_prods_cluster_with_every_endpoint_on_this_machine(
        e2e: tuple[Path, Any], build: Path) -> None:
    project, keys = e2e
    plan = plan_of(project, STACK)
    prod = json.loads((build / "plan.json").read_text())
    shape = {(r["type"], r["name"]) for r in prod["resources"]}
    assert {(r["type"], r["name"]) for r in plan["resources"]} == shape
    found = list(endpoints(plan))
    assert len(found) == len(list(endpoints(prod))) > 100
    assert outside(plan) == []
    assert {e.address for e in found if e.via == "ssh"} == {
        "127.77." + a.split(".", 2)[2] for a in PROD_SSH}
    assert {e.address for e in found if e.via == "url"} == {
        "127.78." + a.split(".", 2)[2] for a in PROD_BMC}
    # Each connection pins the key that host's simulated sshd serves.
    by_address = {}
    for r in plan["resources"]:
        conn = (r.get("inputs") or {}).get("connection") or {}
        if r["type"] == "command:remote:Command":
            by_address.setdefault(conn["host"], set()).add(conn["hostKey"])
    assert all(len(k) == 1 for k in by_address.values())
    assert set().union(*by_address.values()) == set(keys.host_keys.values())


def test_the_guard_refuses_prod_naming_every_address_it_would_dial(build: Path) -> None:
    prod = json.loads((build / "plan.json").read_text())
    refused = outside(prod)
    assert {e.address for e in refused if e.via == "ssh"} == PROD_SSH
    assert {e.address for e in refused if e.via == "url"} == PROD_BMC
    assert len(refused) == len(list(endpoints(prod)))


@pytest.mark.parametrize("address,local", [
    ("127.0.0.1", True), ("127.77.1.100", True), ("127.255.255.254", True),
    ("10.10.0.10", False), ("0.0.0.0", False), ("::1", False), ("::ffff:127.0.0.1", False),
    ("localhost", False), ("mgmt-01", False), ("128.0.0.1", False)])
def test_only_ipv4_loopback_is_local(address: str, local: bool) -> None:
    assert is_local(address) is local


def test_a_hostname_or_a_jump_host_outside_is_refused() -> None:
    plan = {"resources": [
        {"urn": "a", "type": "command:remote:Command",
         "inputs": {"connection": {"host": "127.77.0.10",
                                   "proxy": {"host": "bastion.example.net"}}}},
        {"urn": "b", "type": "command:local:Command",
         "inputs": {"create": "curl -X PATCH https://bmc-07.example.net/redfish/v1/Systems/1"}},
        {"urn": "c", "type": "command:local:Command",
         "inputs": {"create": "curl https://127.78.0.10/redfish/v1/Systems/1"}},
    ]}
    assert [(e.urn, e.via, e.address) for e in outside(plan)] == [
        ("a", "ssh proxy", "bastion.example.net"), ("b", "url", "bmc-07.example.net")]
