"""Plan-vs-discovered verifier on edited topologies (no simulator needed) and its CLI."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from support.fabric_sim import PROD_SMS, Faults, cluster, prod_spec
from support.project import copy_repo

from components.planning.fabric import (
    FabricPlan,
    PlanError,
    Report,
    StorageServer,
    parse_ibnetdiscover,
    plan_fabric,
    render_fabric_files,
    render_topology_net,
    verify_plan,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def prod() -> FabricPlan:
    """8 nodes and the SM slot: 4 leaves of 2 rails x 16 slots (rail a on ports 1-16, rail b
    on 17-32; nodes in slots 0-7, the SM hosts on port 16 of leaf-su1-r0-1 and -r2-3), each
    leaf with 32 uplinks (ports 33-64), 16 to each of the 2 spines (spine port =
    1 + leaf index x 16 + k): the spines are full."""
    return plan_fabric(cluster(8), PROD_SMS, prod_spec())


def faults(plan: FabricPlan) -> Faults:
    return Faults(parse_ibnetdiscover(render_topology_net(plan)))


def kinds(report: Report) -> list[str]:
    return [f.kind for f in report.findings]


def test_clean_fabric(prod: FabricPlan) -> None:
    report = verify_plan(prod, faults(prod).net())
    assert report.ok, report.text()
    assert "fabric matches the plan" in report.text()
    links = 8 * 8 + 4 * 32 + 2  # HCA links + leaf uplinks + SM hosts
    assert (report.planned_links, report.discovered_links) == (links, links) == (194, 194)


def test_rails_swapped_on_one_node(prod: FabricPlan) -> None:
    r0, r1 = prod.placement("gpu-node-02").rails[:2]
    net = faults(prod).swap((r0.leaf, r0.leaf_port), (r1.leaf, r1.leaf_port)).net()
    report = verify_plan(prod, net)
    assert kinds(report) == ["MISWIRE", "MISWIRE"]
    texts = report.text()
    # slot 2: rail 0 on port 1 + 2, rail 1 on port 1 + 16 + 2 of the same leaf
    assert (r0.leaf, r0.leaf_port, r1.leaf, r1.leaf_port) == ("leaf-su1-r0-1", 3,
                                                              "leaf-su1-r0-1", 19)
    assert "leaf-su1-r0-1 port 3: found leaf-su1-r0-1 port 3 <-> gpu-node-02 rail 1 (mlx5_3)" \
        in texts
    assert "plan: leaf-su1-r0-1 port 3 <-> gpu-node-02 rail 0 (mlx5_0)" in texts


def test_uplinks_swapped(prod: FabricPlan) -> None:
    # uplink 0 (port 33) goes to spine-01 port 1, uplink 16 (port 49) to spine-02 port 1
    net = faults(prod).swap(("leaf-su1-r0-1", 33), ("leaf-su1-r0-1", 49)).net()
    report = verify_plan(prod, net)
    assert kinds(report) == ["MISWIRE", "MISWIRE"]
    assert {f.where for f in report.findings} == {"leaf-su1-r0-1 port 33",
                                                  "leaf-su1-r0-1 port 49"}
    assert "leaf-su1-r0-1 port 33 <-> spine-02 port 1" in report.findings[0].found


def test_uplink_missing(prod: FabricPlan) -> None:
    # the last uplink of the last (4th) leaf: spine-02 port 1 + 3 x 16 + 15, its last port
    report = verify_plan(prod, faults(prod).drop(("leaf-su1-r6-7", 64)).net())
    assert kinds(report) == ["MISSING_CABLE"]
    assert report.findings[0].expected == "leaf-su1-r6-7 port 64 <-> spine-02 port 64"


def test_leaf_to_leaf_cross_link_on_free_ports(prod: FabricPlan) -> None:
    # slots 8-14 are free in every rail block: port 9 (rail a, slot 8), port 25 (rail b, slot 8)
    net = faults(prod).add(("leaf-su1-r0-1", 9), ("leaf-su1-r6-7", 25)).net()
    report = verify_plan(prod, net)
    assert kinds(report) == ["EXTRA_CABLE"]
    assert report.findings[0].found == "leaf-su1-r0-1 port 9 <-> leaf-su1-r6-7 port 25"


def test_leaf_uplinks_cabled_to_each_other(prod: FabricPlan) -> None:
    f = faults(prod).drop(("leaf-su1-r0-1", 64)).drop(("leaf-su1-r6-7", 64))
    report = verify_plan(prod, f.add(("leaf-su1-r0-1", 64), ("leaf-su1-r6-7", 64)).net())
    assert kinds(report) == ["MISWIRE"]
    # uplink 31 of leaf 0 and of leaf 3: spine-02 ports 1 + 0 x 16 + 15 and 1 + 3 x 16 + 15
    assert report.findings[0].expected == ("leaf-su1-r0-1 port 64 <-> spine-02 port 16; "
                                           "leaf-su1-r6-7 port 64 <-> spine-02 port 64")


def test_hca_cabled_to_a_spine(prod: FabricPlan) -> None:
    # The spines are full: the stray HCA cable takes the place of an uplink (spine-01 port 40 =
    # 1 + 2 x 16 + 7: uplink 7 of the third leaf, leaf-su1-r4-5 port 40).
    f = (faults(prod).drop(("leaf-su1-r0-1", 1)).drop(("spine-01", 40))
         .add(("gpu-node-00 mlx5_0", 1), ("spine-01", 40)))
    report = verify_plan(prod, f.net())
    assert kinds(report) == ["MISWIRE"]
    finding = report.findings[0]
    assert finding.where == "spine-01 port 40"
    assert finding.found == "spine-01 port 40 <-> gpu-node-00 rail 0 (mlx5_0)"
    assert "gpu-node-00 rail 0 (mlx5_0) <-> leaf-su1-r0-1 port 1" in finding.expected
    assert "spine-01 port 40 <-> leaf-su1-r4-5 port 40" in finding.expected


def test_missing_node(prod: FabricPlan) -> None:
    report = verify_plan(prod, faults(prod).remove_host("gpu-node-05").net())
    assert kinds(report) == ["MISSING_NODE"]
    assert report.findings[0].where == "gpu-node-05"
    assert "8 of 8 HCA ports" in report.findings[0].found
    # rail 7 is rail b of leaf-su1-r6-7: port 1 + 16 + slot 5
    assert "gpu-node-05 rail 7 (mlx5_11) on leaf-su1-r6-7 port 22" in report.findings[0].expected


def test_unexpected_node_and_placeholder_matching(prod: FabricPlan) -> None:
    # Real GUIDs differ from the plan's placeholders: nodes are matched by description.
    real = plan_fabric(cluster(8, real_guids=True), PROD_SMS, prod_spec())
    assert verify_plan(prod, render_topology_net(real)).ok
    bigger = plan_fabric(cluster(8) + [cluster(9)[8]], PROD_SMS, prod_spec())
    report = verify_plan(prod, render_topology_net(bigger))
    assert "UNEXPECTED_NODE" in kinds(report)


def test_a_replaced_hca_and_a_replaced_spine_are_named_with_the_fix() -> None:
    """A plan with real GUIDs (as read from the hardware) against a fabric where one HCA and
    one spine were replaced: cabled as planned, so found by name, but with new GUIDs the SM
    files do not know (opensm would miss the spine as a root: ERR AB24). Each is named, with
    the key to update."""
    spine_guid = "0xfc6a1c0300a10002"
    planned = plan_fabric(cluster(8, real_guids=True), PROD_SMS,
                          prod_spec(switch_guids={"spine-02": spine_guid}))
    nodes = cluster(8, real_guids=True)
    new_hca = "0x946dae0300ee0004"
    nodes[3] = dataclasses.replace(nodes[3], ports=tuple(
        dataclasses.replace(p, port_guid=new_hca) if p.rail == 2 else p for p in nodes[3].ports))
    live = plan_fabric(nodes, PROD_SMS, prod_spec(switch_guids={"spine-02": "0xfc6a1c0300a1ee02"}))
    report = verify_plan(planned, render_topology_net(live))
    assert kinds(report) == ["GUID", "GUID"], report.text()
    hca, spine = sorted(report.findings, key=lambda f: f.where)
    assert hca.where == "gpu-node-03 rail 2 (mlx5_4)"
    assert hca.expected == "GUID 0x946dae0300000304"
    assert hca.found.startswith(f"GUID {new_hca} (replaced?); set the inventory's portGuid of "
                                f"gpu-node-03 rail 2 to {new_hca}")
    assert spine.where == "spine-02" and spine.expected == f"GUID {spine_guid}"
    assert "set fabric.switchGuids.spine-02 (or the inventory) to 0xfc6a1c0300a1ee02" in \
        spine.found
    assert "fabric matches the plan" not in report.text()


def test_rate_check(prod: FabricPlan) -> None:
    net = render_topology_net(prod)
    assert verify_plan(prod, net, rate="4xHDR").ok
    first = next(line for line in net.splitlines() if line.startswith("[1]\t"))
    report = verify_plan(prod, net.replace(first, first.replace("4xHDR", "4xSDR")),
                         rate="4xHDR")
    assert kinds(report) == ["RATE"]


def test_cli(tmp_path: Path, prod: FabricPlan) -> None:
    for rel, text in render_fabric_files(prod).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    good = tmp_path / "good.txt"
    good.write_text(render_topology_net(prod))
    bad = tmp_path / "bad.txt"
    r0, r1 = prod.placement("gpu-node-00").rails[:2]
    bad.write_text(faults(prod).swap((r0.leaf, r0.leaf_port), (r1.leaf, r1.leaf_port)).net())
    cli = [sys.executable, str(ROOT / "tools" / "verify_fabric.py")]
    # The dump is ibsim's format, trained at 4xHDR (ibsim knows no NDR): by default every link
    # below the 4xNDR a ConnectX-7/QM9700 fabric trains at is reported.
    slow = subprocess.run(cli + ["--plan", str(tmp_path / "fabric"), "--discovered", str(good)],
                          capture_output=True, text=True, check=False)
    assert slow.returncode == 1 and "194 RATE" in slow.stdout, slow.stdout
    ok = subprocess.run(cli + ["--plan", str(tmp_path / "fabric"), "--discovered", str(good),
                               "--rate", "4xHDR"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    nok = subprocess.run(cli + ["--plan", str(tmp_path / "fabric" / "topology.net"),
                                "--discovered", str(bad), "--rate", "any"],
                         capture_output=True, text=True, check=False)
    assert nok.returncode == 1
    assert "2 MISWIRE" in nok.stdout and "gpu-node-00 rail 1 (mlx5_3)" in nok.stdout
    missing = subprocess.run(cli + ["--plan", str(tmp_path), "--discovered", str(good)],
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 2


@pytest.mark.slow
def test_make_verify_fabric_refuses_a_stale_plan(tmp_path: Path) -> None:
    """`make verify-fabric` previews first; when the config does not preview, build/ holds an
    older plan, and comparing the fabric with it would be wrong: it stops (exit 2) and says so.
    With a good config the plan's own topology (ibsim format, 4xHDR) matches at RATE=4xHDR."""
    project = copy_repo(tmp_path / "repo")
    (project / ".venv").symlink_to(ROOT / ".venv")
    make = ["make", "-s", "-o", ".venv/.installed", "verify-fabric"]
    proc = subprocess.run(make + ["DISCOVERED=build/prod/fabric/topology.net", "RATE=4xHDR"],
                          cwd=project, capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "fabric matches the plan" in proc.stdout, (
        proc.stdout + proc.stderr)
    stack = project / "Pulumi.prod.yaml"
    stack.write_text(stack.read_text().replace("sshUser: ubuntu", "sshUser: root"))  # refused
    stale = subprocess.run(make + ["DISCOVERED=build/prod/fabric/topology.net"], cwd=project,
                           capture_output=True, text=True, check=False)
    assert stale.returncode == 2, stale.stdout + stale.stderr
    assert "the preview of prod failed (exit 2)" in stale.stderr
    assert "fabric matches the plan" not in stale.stdout


def test_every_hca_port_line_names_its_port_guid(prod: FabricPlan) -> None:
    """In ibnetdiscover's format an HCA's port line is `[1](<port GUID, hex>)` followed by the
    switch port it is cabled to: each must carry the port GUID the plan gives that HCA."""
    import re

    text = render_topology_net(prod)
    port_guids = {int(r.port_guid, 16) for n in prod.nodes for r in n.rails}
    port_guids |= {int(s.port_guid, 16) for s in prod.sm}
    lines = re.findall(r"^\[1\]\(([^)]*)\)\t\"S-", text, re.M)
    assert len(lines) == len(port_guids)
    assert all(re.fullmatch(r"[0-9a-f]{1,16}", g) for g in lines), lines[:3]
    assert {int(g, 16) for g in lines} == port_guids


@pytest.mark.slow
def test_make_verify_fabric_names_the_core_stack_for_a_split_part(tmp_path: Path) -> None:
    """A nodes part of a split site renders no fabric (the core plans it): the check says where
    the plan is instead of failing for a missing file."""
    import yaml

    project = copy_repo(tmp_path / "repo")
    (project / ".venv").symlink_to(ROOT / ".venv")
    doc = yaml.safe_load((project / "Pulumi.prod.yaml").read_text())
    doc["config"]["gpu-cluster:cluster"]["split"] = {
        "part": "core", "parts": {"site-su1": {"part": "nodes", "sus": [1]}}}
    (project / "Pulumi.site-core.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    del doc["config"]["gpu-cluster:cluster"]
    doc["config"]["gpu-cluster:site"] = "organization/gpu-cluster/site-core"
    (project / "Pulumi.site-su1.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = subprocess.run(["make", "-s", "-o", ".venv/.installed", "verify-fabric",
                           "STACK=site-su1", "DISCOVERED=/dev/null"], cwd=project,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "site-su1 plans no fabric (a split site's fabric is its core part's)" in proc.stderr


# ---------------------------------------------------------------- storage on the compute rails
STORAGE = (StorageServer("lustre-01", "r02", ("0x0c42a10300b10001", "0x0c42a10300b10002")),
           StorageServer("lustre-02", "r02", ("0x0c42a10300b20001", "0x0c42a10300b20002")))


def test_storage_ports_are_planned_on_the_kept_slots_one_leaf_each_and_verified() -> None:
    """Each storage port takes a first-SU port that no node ever takes (the last slot of a
    leaf's rail block, after the subnet managers'), a server's ports on different leaves so one
    leaf lost leaves it reachable; cabled as planned, the verifier finds nothing, and a port
    moved to another leaf port is named as the server's port, not an unknown extra link."""
    plan = plan_fabric(cluster(8), PROD_SMS, prod_spec(storage_servers=STORAGE,
                                                       rails_per_leaf=2))
    ports = {(s.hostname, s.hca): (s.switch, s.port) for s in plan.storage}
    sm_ports = {(s.switch, s.port) for s in plan.sm}
    node_ports = {(r.leaf, r.leaf_port) for n in plan.nodes for r in n.rails}
    assert len(set(ports.values())) == 4 and not set(ports.values()) & (sm_ports | node_ports)
    # 16-slot rail blocks: the kept slot of a leaf is port 16 (rail a) or 32 (rail b).
    assert all(port in (16, 32) for _, port in ports.values())
    for server in ("lustre-01", "lustre-02"):
        assert ports[(server, "port0")][0] != ports[(server, "port1")][0]
    assert len(plan.cables_of("storage")) == 4
    # Grown to what 2 rails per leaf hold (prod: 15 nodes, slots 0-14) takes none of them.
    grown = plan_fabric(cluster(15), PROD_SMS, prod_spec(storage_servers=STORAGE,
                                                         rails_per_leaf=2))
    assert {(s.hostname, s.hca): (s.switch, s.port) for s in grown.storage} == ports

    report = verify_plan(plan, faults(plan).net())
    assert report.ok, report.text()
    assert report.planned_links == 194 + 4
    sw, port = ports[("lustre-02", "port1")]
    spare = next(p for p in range(1, 33) if (sw, p) not in node_ports | sm_ports
                 and p not in (16, 32))
    moved = faults(plan).drop((sw, port)).add(("lustre-02 port1", 1), (sw, spare)).net()
    report = verify_plan(plan, moved)
    assert not report.ok
    assert f"lustre-02 port1 <-> {sw} port {port}" in report.text(), report.text()


def test_no_room_for_a_storage_port_is_a_plan_error_naming_the_server() -> None:
    many = tuple(StorageServer(f"oss-{i:02d}", "r02", (f"0x0c42a10300c{i:05x}",))
                 for i in range(7))  # 8 kept ports on 4 leaves, 2 for the subnet managers
    with pytest.raises(PlanError) as info:
        plan_fabric(cluster(8), PROD_SMS, prod_spec(storage_servers=many))
    assert info.value.path == "fabric.storageServers" and info.value.value == "oss-06"
