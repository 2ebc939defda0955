"""Fabric planner: domain numbers worked out from first principles, rendering, errors."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from support.fabric_sim import PROD_SMS, STORAGE_GUID, cluster, prod_spec

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
from components.planning.fabric.bom import physical_cables
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
    # The SM hosts hang off leaf ports of the (last, here only) SU in one reserved slot (DGX
    # SuperPOD's UFM slot; ftree installs no routes between spines, so an SM on a spine could
    # not reach the other spines): the SU's leaves are laid out for 8 + 1 = 9 slots.
    slots = 8 + 1
    # Rails per leaf: at most 8/2 = 4 (two leaves at least); 4 rails x 9 slots = 36 > 32 down
    # ports, 2 rails x 9 = 18 fit. Each rail owns a block of 32/2 = 16 ports.
    rails_per_leaf = 2
    assert 4 * slots > HALF >= rails_per_leaf * slots
    leaves = RAILS // rails_per_leaf  # 4
    uplinks = leaves * HALF  # 128: every leaf keeps 32 uplinks whatever its fill (1:1 when full)
    spines = 2  # 1 is no redundancy; 2 x 64 ports take 4 leaves x 16 cables exactly
    assert spines * RADIX == uplinks
    assert plan.tiers == 2
    assert (plan.count("leaf"), plan.count("spine"), plan.count("core")) == (leaves, spines, 0)
    assert plan.rails_per_leaf[1] == rails_per_leaf
    assert [s.name for s in plan.switches] == ["leaf-su1-r0-1", "leaf-su1-r2-3", "leaf-su1-r4-5",
                                               "leaf-su1-r6-7", "spine-01", "spine-02"]
    assert len(plan.cables_of("hca")) == hcas
    assert len(plan.cables_of("leaf-spine")) == uplinks
    assert len(plan.cables_of("sm")) == 2
    assert len(plan.cables) == hcas + uplinks + 2 == 194
    assert plan.bisection_tbps == hcas * LINK_GBPS / 2 / 1000 == 12.8  # the HCA cut is narrowest
    # Busiest leaf: 2 rails x 8 nodes + one SM host on 32 uplinks, well under 1:1.
    assert plan.oversubscription == round((rails_per_leaf * 8 + 1) / HALF, 4) < 1
    # Media (tests/test_fabric_bom.py has the whole BOM): a DGX H100 cage carries two rails to
    # two switch cages, so every compute link is a fiber (r01 or not); sm-02 is in r02 (fiber),
    # sm-01 in r01 (splitter DAC); leaf-spine stays in r01 (twin-port DACs, 2 links each).
    fibers = hcas + 1
    assert bom_qty(plan, "MQM9700-NS2F") == leaves + spines == 6
    assert bom_qty(plan, "MFP7E10-Nxxx") == fibers  # one fiber per optical link
    assert bom_qty(plan, "MMA4Z00-NS-FLT") == 8 * RAILS // 2  # one per DGX cage
    assert bom_qty(plan, "MMA4Z00-NS") == hcas // 2 + 1  # leaf down cages + sm-02's leaf cage
    assert bom_qty(plan, "MMA4Z00-NS400") == 1  # sm-02's single-port adapter
    assert bom_qty(plan, "MCP7Y00-N00x") == 1  # sm-01
    assert bom_qty(plan, "MCP4Y10-N00x") == uplinks // 2 == 64
    # 64 HCA links + 128 uplinks (every leaf's up half) + 2 SM links = 194 400G links on
    # 130 physical cables (twin-port DACs carry two uplinks each).
    assert {k: len(plan.cables_of(k)) for k in ("hca", "leaf-spine", "sm")} == {
        "hca": 64, "leaf-spine": 128, "sm": 2}
    assert physical_cables(plan.bom) == fibers + 1 + uplinks // 2 == 130


def test_prod_rails_land_on_rail_leaves_with_fixed_ports() -> None:
    plan = plan_fabric(cluster(8), PROD_SMS, prod_spec())
    n3 = plan.placement("gpu-node-03")
    # leaf port = 1 + (rail mod 2) x 16 + slot: rail a of a leaf on ports 1-16, rail b 17-32
    assert [(r.rail, r.hca, r.leaf, r.leaf_port) for r in n3.rails[:5]] == [
        (0, "mlx5_0", "leaf-su1-r0-1", 4), (1, "mlx5_3", "leaf-su1-r0-1", 20),
        (2, "mlx5_4", "leaf-su1-r2-3", 4), (3, "mlx5_5", "leaf-su1-r2-3", 20),
        (4, "mlx5_6", "leaf-su1-r4-5", 4)]
    assert n3.leaves == ("leaf-su1-r0-1", "leaf-su1-r2-3", "leaf-su1-r4-5", "leaf-su1-r6-7")
    assert plan.su_members() == {1: tuple(f"gpu-node-{i:02d}" for i in range(8))}
    # Master and standby on different leaves of the SU, in the reserved slot: the last of the
    # first rail block (slot 15, port 16), never a spine.
    sms = [(s.hostname, s.switch, s.port) for s in plan.sm]
    assert sms == [("sm-01", "leaf-su1-r0-1", 16), ("sm-02", "leaf-su1-r2-3", 16)]
    # Slots 8..14 can still be filled (15 nodes + the SM slot = 16 = one rail block): nothing
    # already cabled moves, and no node takes the SM port.
    grown = plan_fabric(cluster(15), PROD_SMS, prod_spec())
    assert grown.placement("gpu-node-03") == n3
    assert [(s.hostname, s.switch, s.port) for s in grown.sm] == sms


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
    # With SM hosts the (first) SU keeps one slot for them: a full SU is 31 DGX + the UFM slot
    # (DGX SuperPOD). Slot 31 is port 32 of every rail leaf; master and standby take it on the
    # rail-0 and rail-1 leaves. The spines are unchanged (4, full).
    with pytest.raises(PlanError, match="fills all 32 slots.*leave slot 31 of SU 1 free"):
        plan_fabric(cluster(32), PROD_SMS, FabricSpec())
    with_sm = plan_fabric(cluster(31), PROD_SMS, FabricSpec())
    assert (with_sm.rails_per_leaf[1], with_sm.count("leaf")) == (1, leaves)
    assert with_sm.count("spine") == uplinks // RADIX == 4
    assert [(s.switch, s.port) for s in with_sm.sm] == [("leaf-su1-r0", 32), ("leaf-su1-r1", 32)]
    assert len(with_sm.cables) == 31 * RAILS + 2 + uplinks


def test_256_nodes_is_the_two_tier_limit() -> None:
    hcas = 256 * RAILS  # 2048 = 64 leaves x 32
    leaves = hcas // HALF
    spines = leaves * HALF // RADIX
    plan = plan_fabric(cluster(256), (), FabricSpec())
    assert plan.tiers == 2
    assert (plan.count("leaf"), plan.count("spine")) == (leaves, spines) == (64, 32)
    assert len(plan.cables) == 2 * hcas
    assert plan.bisection_tbps == hcas * LINK_GBPS / 2 / 1000 == 409.6
    # Every leaf down port is a node's: the SM hosts need a slot, the last of the first SU
    # (DGX SuperPOD keeps one slot for UFM; the first SU is the one a growing site never
    # re-plans); a free slot elsewhere does not do.
    with pytest.raises(PlanError, match="fills all 32 slots.*leave slot 31 of SU 1 free"):
        plan_fabric(cluster(256), PROD_SMS, FabricSpec())
    with pytest.raises(PlanError, match="leave slot 31 of SU 1 free"):
        plan_fabric(cluster(255), PROD_SMS, FabricSpec())
    freed = plan_fabric([n for n in cluster(256) if (n.su, n.slot) != (1, 31)], PROD_SMS,
                        FabricSpec())
    assert (freed.tiers, freed.count("leaf"), freed.count("spine")) == (2, leaves, spines)
    assert {(s.switch, s.port) for s in freed.sm} == {("leaf-su1-r0", 32), ("leaf-su1-r1", 32)}


def test_1024_nodes_three_tiers() -> None:
    plan = plan_fabric(cluster(1024), (), FabricSpec())  # its time: `make bench`
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
    assert plan.placeholders.switch_guids == 4 + 2 - 1  # 4 leaves + 2 spines, spine-01 given
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
    assert len(files["fabric/cabling.csv"].splitlines()) == 1 + 64 + 128 + 2  # header, links
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
    assert "Default=0x7fff, ipoib, mtu=5 :" in lines
    assert "compute=0x0a01, indx0, ipoib, mtu=5, defmember=full :" in lines
    tenant = text.split("tenant=")[1].split(";")[0]
    assert tenant.count("0x946") + tenant.count("0x0201") == 16  # 2 hosts x 8 rails
    storage = text.split("storage=")[1].split(";")[0]
    assert "defmember=limited" in storage and f"{STORAGE_GUID}=full" in storage
    with pytest.raises(PlanError, match="0x7fff"):
        render_partitions(plan, (Partition("x", 0x7FFF, data_path=True),))
    with pytest.raises(PlanError, match="already used"):
        render_partitions(plan, (Partition("x", 1, data_path=True), Partition("y", 1)))


def test_summary_counts_switches_links_and_bandwidth() -> None:
    s = summary(plan_fabric(cluster(8), PROD_SMS, prod_spec()))
    assert s["switches"] == {"leaf": 4, "spine": 2, "core": 0}  # 2 rails x (8 + 1 SM) slots
    assert s["links"] == {"hca": 64, "sm": 2, "leaf-spine": 4 * 32, "spine-core": 0}
    assert s["bisection_tbps"] == 12.8
