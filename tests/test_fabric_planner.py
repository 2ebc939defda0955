"""Fabric planner: domain numbers worked out from first principles, rendering, errors."""

from __future__ import annotations

import math
import time
import xml.etree.ElementTree as ET

import pytest
from fabric_sim import PROD_SMS, STORAGE_GUID, cluster, prod_spec

from components.planning.fabric import (
    FabricNode,
    FabricSpec,
    HcaPort,
    Partition,
    PlanError,
    SmHost,
    plan_fabric,
    render_fabric_files,
    summary,
)
from components.planning.fabric.guids import is_placeholder
from components.planning.fabric.sm_files import render_partitions

RADIX, LINK_GBPS, RAILS = 64, 400, 8
HALF = RADIX // 2  # 1:1: half the ports down, half up


def bom_qty(plan, part: str) -> int:
    return sum(b.quantity for b in plan.bom if b.part == part)


# ---------------------------------------------------------------- domain numbers


def test_prod_8_nodes_from_first_principles() -> None:
    plan = plan_fabric(cluster(8), PROD_SMS, prod_spec())
    hcas = 8 * RAILS  # 64
    leaves = math.ceil(hcas / HALF)  # 2: four rails x eight slots fill 32 down ports
    uplinks = leaves * HALF  # 64, as many as the down ports
    spines = max(2, math.ceil(uplinks / RADIX))  # 1 would carry them; 2 for redundancy
    assert plan.tiers == 2
    assert (plan.count("leaf"), plan.count("spine"), plan.count("core")) == (leaves, spines, 0)
    assert plan.rails_per_leaf[1] == HALF // 8 == 4
    assert [s.name for s in plan.switches] == ["leaf-su1-r0-3", "leaf-su1-r4-7", "spine-01",
                                               "spine-02"]
    assert len(plan.cables_of("hca")) == hcas
    assert len(plan.cables_of("leaf-spine")) == uplinks
    assert len(plan.cables_of("sm")) == 2
    assert len(plan.cables) == hcas + uplinks + 2 == 130
    assert plan.bisection_tbps == hcas * LINK_GBPS / 2 / 1000 == 12.8
    assert plan.oversubscription == 1.0
    # Media: nodes 00-03 share rack r01 with the switches (copper), 04-07 and sm-02 are in r02.
    optical_hca = 4 * RAILS + 1  # + sm-02
    assert bom_qty(plan, "MMA4Z00-NS400") == optical_hca  # one SR4 per optical HCA port
    assert bom_qty(plan, "MFP7E10-Nxxx") == optical_hca  # one fiber per optical link
    # Switch cages hold two ports: slots (4,5) and (6,7) of each 8-slot rail block, + sm-02.
    assert bom_qty(plan, "MMA4Z00-NS") == 2 * RAILS + 1
    assert bom_qty(plan, "MCP7Y00-N00x") == 2 * RAILS + 1  # splitters: slots (0,1), (2,3), sm-01
    assert bom_qty(plan, "MCP4Y10-N00x") == uplinks // 2  # leaf-spine twin DACs, 2 links each
    sc = plan.seeds_check
    assert (sc.seed_leaves, sc.seed_spines, sc.seed_cables) == (2, 2, 80)
    assert (sc.hca_links, sc.uplink_links, sc.sm_links) == (64, 64, 2)
    assert sc.seed_oversubscription == "64:16 = 4:1"
    assert sc.physical_cables == optical_hca + (2 * RAILS + 1) + uplinks // 2 == 82
    assert "130 400G links" in sc.verdict and "not ~80" in sc.verdict


def test_prod_rails_land_on_rail_leaves_with_fixed_ports() -> None:
    plan = plan_fabric(cluster(8), PROD_SMS, prod_spec())
    n3 = plan.placement("gpu-node-03")
    assert [(r.rail, r.hca, r.leaf, r.leaf_port) for r in n3.rails[:5]] == [
        (0, "mlx5_0", "leaf-su1-r0-3", 4), (1, "mlx5_3", "leaf-su1-r0-3", 12),
        (2, "mlx5_4", "leaf-su1-r0-3", 20), (3, "mlx5_5", "leaf-su1-r0-3", 28),
        (4, "mlx5_6", "leaf-su1-r4-7", 4)]
    assert n3.leaves == ("leaf-su1-r0-3", "leaf-su1-r4-7")
    assert plan.su_members() == {1: tuple(f"gpu-node-{i:02d}" for i in range(8))}
    # master and standby on different switches, spare spine ports from the top
    assert [(s.hostname, s.switch, s.port) for s in plan.sm] == [
        ("sm-01", "spine-01", 64), ("sm-02", "spine-02", 64)]


def test_full_su_32_nodes() -> None:
    hcas = 32 * RAILS
    leaves = RAILS  # one leaf per rail: 32 slots fill the 32 down ports
    uplinks = leaves * HALF
    plan = plan_fabric(cluster(32), (), FabricSpec())
    assert plan.rails_per_leaf[1] == 1
    assert plan.count("leaf") == leaves
    assert plan.count("spine") == uplinks // RADIX == 4  # 4 x 64 ports, 8 cables per pair
    assert len(plan.cables) == hcas + uplinks == 512
    assert plan.switch("leaf-su1-r5").rails == (5,)
    # With two SM hosts the 4 spines are full: the planner takes 8 (4 cables per pair) rather
    # than put an SM host on a node slot.
    with_sm = plan_fabric(cluster(32), PROD_SMS, FabricSpec())
    assert with_sm.count("spine") == 8
    assert {s.switch for s in with_sm.sm} == {"spine-01", "spine-02"}


def test_256_nodes_is_the_two_tier_limit() -> None:
    hcas = 256 * RAILS  # 2048 = 64 leaves x 32
    leaves = hcas // HALF
    spines = leaves * HALF // RADIX
    plan = plan_fabric(cluster(256), (), FabricSpec())
    assert plan.tiers == 2
    assert (plan.count("leaf"), plan.count("spine")) == (leaves, spines) == (64, 32)
    assert len(plan.cables) == 2 * hcas
    assert plan.bisection_tbps == hcas * LINK_GBPS / 2 / 1000 == 409.6
    # every spine port is used: SM hosts need a free slot here
    with pytest.raises(PlanError, match="no free switch port"):
        plan_fabric(cluster(256), PROD_SMS, FabricSpec())
    freed = plan_fabric(cluster(255), PROD_SMS, FabricSpec())
    assert {(s.switch, s.port) for s in freed.sm} == {("leaf-su8-r0", 32), ("leaf-su8-r1", 32)}


def test_1024_nodes_three_tiers_fast() -> None:
    nodes = cluster(1024)
    t = time.perf_counter()
    plan = plan_fabric(nodes, (), FabricSpec())
    elapsed = time.perf_counter() - t
    hcas = 1024 * RAILS
    leaves = hcas // HALF  # 256
    pods = leaves // HALF  # 8 pods of 32 leaves (4 SUs)
    spines = pods * HALF  # 32 per pod, ports split 32 down / 32 up
    cores = spines * HALF // RADIX  # 128
    assert plan.tiers == 3
    assert (plan.count("leaf"), plan.count("spine"), plan.count("core")) == (leaves, spines,
                                                                               cores)
    assert len(plan.cables) == 3 * hcas
    assert plan.bisection_tbps == hcas * LINK_GBPS / 2 / 1000
    assert plan.oversubscription == 1.0
    assert plan.placement("gpu-node-0900").pod == 900 // 128 + 1
    assert elapsed < 1.0, f"planning 1024 nodes took {elapsed:.2f}s"


def test_tiers_follow_the_leaf_count() -> None:
    assert plan_fabric(cluster(256), (), FabricSpec()).tiers == 2
    assert plan_fabric(cluster(257), (), FabricSpec()).tiers == 3
    with pytest.raises(PlanError, match="two-tier"):
        plan_fabric(cluster(257), (), FabricSpec(tiers=2))


# ---------------------------------------------------------------- GUIDs


def test_placeholders_are_counted_and_distinct() -> None:
    spec = prod_spec(
        switch_guids={"spine-01": "0x0002C90300A00100", "spine-09": "0x0002c90300a00109"})
    plan = plan_fabric(cluster(8), PROD_SMS, spec)
    assert plan.placeholders.hca_guids == 64
    assert plan.placeholders.sm_guids == 0
    assert plan.placeholders.switch_guids == 3
    assert "64 HCA GUIDs" in plan.placeholders.message()
    assert plan.switch("spine-01").guid == "0x0002c90300a00100"  # normalised
    assert any("spine-09" in w for w in plan.warnings)
    guids = [r.port_guid for n in plan.nodes for r in n.rails]
    assert len(set(guids)) == 64 and all(is_placeholder(g) for g in guids)
    assert all(int(g, 16) & 1 for g in guids)  # odd: the sim node GUID (port - 1) stays free
    assert plan_fabric(list(reversed(cluster(8))), PROD_SMS[::-1], spec) == plan


def test_real_guids_are_kept_and_duplicates_rejected() -> None:
    plan = plan_fabric(cluster(8, real_guids=True), PROD_SMS, prod_spec())
    assert plan.placeholders.hca_guids == 0
    assert plan.placement("gpu-node-01").rails[2].port_guid == "0x946dae0300000104"
    nodes = cluster(2, real_guids=True)
    dup = FabricNode("gpu-node-09", 1, 9, "r03",
                     (HcaPort(0, "mlx5_0", nodes[0].ports[0].port_guid),))
    with pytest.raises(PlanError, match=r"nodes\.gpu-node-0[09]\.rails\[0\]\.portGuid.*already"):
        plan_fabric(nodes + [dup], (), FabricSpec())
    with pytest.raises(PlanError, match="not a GUID"):
        plan_fabric([FabricNode("a", 1, 0, "r", (HcaPort(0, "mlx5_0", "0x12"),))])


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(("nodes", "message"), [
    ([FabricNode("a", 1, 32, "r", ())], r"nodes\.a\.slot: is outside 0\.\.31 \(got 32\)"),
    ([FabricNode("a", 0, 0, "r", ())], r"nodes\.a\.su: is below 1 \(got 0\)"),
    ([FabricNode("a", 1, 0, "r", ()), FabricNode("b", 1, 0, "r", ())], "slot 0 is already a"),
    ([FabricNode("a", 1, 0, "r", (HcaPort(8, "mlx5_0"),))], r"rail outside 0\.\.7 \(got 8\)"),
    ([FabricNode("a", 1, 0, "r", (HcaPort(0, "mlx5_0"), HcaPort(1, "mlx5_0")))], "used twice"),
])
def test_invalid_inputs_name_the_key(nodes, message) -> None:
    with pytest.raises(PlanError, match=message):
        plan_fabric(nodes, (), FabricSpec())


def test_sm_priorities_and_spine_override() -> None:
    with pytest.raises(PlanError, match="priorities are not distinct"):
        plan_fabric(cluster(2), (SmHost("a", 1, "r"), SmHost("b", 1, "r")))
    with pytest.raises(PlanError, match=r"fabric.spines: .* \(got 3\)"):
        plan_fabric(cluster(8), (), FabricSpec(spines=3))
    pinned = plan_fabric(cluster(8), (), FabricSpec(spines=8))
    assert pinned.count("spine") == 8  # pinned for growth: 4 cables per leaf-spine pair


def test_missing_rail_is_allowed() -> None:
    nodes = cluster(3)
    broken = FabricNode(nodes[2].hostname, 1, 2, "r01", nodes[2].ports[:7])
    plan = plan_fabric(nodes[:2] + [broken], (), FabricSpec())
    assert plan.hca_ports == 23
    assert len(plan.placement(broken.hostname).rails) == 7


# ---------------------------------------------------------------- rendering


def test_rendered_files_deterministic_and_complete() -> None:
    plan = plan_fabric(cluster(8), PROD_SMS, prod_spec())
    files = render_fabric_files(plan)
    assert files == render_fabric_files(plan_fabric(cluster(8), PROD_SMS, prod_spec()))
    for name in ("topology.net", "cabling.csv", "bom.csv", "opensm.conf", "partitions.conf",
                 "root_guids.conf", "cn_guids.conf", "node-name-map", "fabric.svg",
                 "io_guids.conf", "sm/sm-01/opensm.conf", "sm/sm-02/opensm.default"):
        assert f"fabric/{name}" in files
    assert files["fabric/root_guids.conf"].split() == [s.guid for s in plan.switches
                                                       if s.role == "spine"]
    assert len(files["fabric/cn_guids.conf"].split()) == 64
    assert len(files["fabric/cabling.csv"].splitlines()) == 1 + 130
    assert "sm_priority 15" in files["fabric/sm/sm-01/opensm.conf"]
    assert "sm_priority 0" in files["fabric/opensm.conf"]
    assert "routing_engine ftree,updn" in files["fabric/opensm.conf"]
    assert files["fabric/sm/sm-02/opensm.default"].endswith('PORTS="0xb83fd20300f20002"\n')
    assert '"gpu-node-03/rail5/mlx5_9"' in files["fabric/node-name-map"]
    ET.fromstring(files["fabric/fabric.svg"])  # well-formed
    big = render_fabric_files(plan_fabric(cluster(300), (), FabricSpec()))
    svg = ET.fromstring(big["fabric/fabric.svg"])
    assert "pod3" in ET.tostring(svg, encoding="unicode")
    assert "io_guids.conf" not in " ".join(big)  # no SM hosts: no (empty) io file


def test_partitions_syntax() -> None:
    plan = plan_fabric(cluster(8), PROD_SMS, prod_spec())
    text, warnings = render_partitions(plan)
    assert not warnings
    lines = text.splitlines()
    assert not any(line.strip() == ";" for line in lines)  # opensm 3.3.23 parse error
    assert "Default=0x7fff, ipoib :" in lines
    assert "training=0x0a01, ipoib, defmember=full :" in lines
    inference = text.split("inference=")[1].split(";")[0]
    assert inference.count("0x946") + inference.count("0x0201") == 16  # 2 hosts x 8 rails
    storage = text.split("storage=")[1].split(";")[0]
    assert "defmember=limited" in storage and f"{STORAGE_GUID}=full" in storage
    with pytest.raises(PlanError, match="0x7fff"):
        render_partitions(plan, (Partition("x", 0x7FFF),))
    with pytest.raises(PlanError, match="already used"):
        render_partitions(plan, (Partition("x", 1), Partition("y", 1)))


def test_summary_quotes_the_seeds() -> None:
    s = summary(plan_fabric(cluster(8), PROD_SMS, prod_spec()))
    assert s["switches"] == {"leaf": 2, "spine": 2, "core": 0}
    assert s["links"] == {"hca": 64, "sm": 2, "leaf-spine": 64, "spine-core": 0}
    assert s["seeds_check"]["seed"] == "2 leaf + 2 core, ~80 cables"
    assert s["bisection_tbps"] == 12.8
