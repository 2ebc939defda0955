"""Bill of materials and cable types of a DGX H100 + QM9700 fabric, counted from the hardware.

Facts (docs/cabling.md links the pages):
* DGX H100 user guide, network modules table: the 8 compute ConnectX-7s leave through 4 OSFP
  cages, two per cage: OSFP1 = mlx5_11 (P1) + mlx5_6 (P2), OSFP2 = mlx5_10 + mlx5_9,
  OSFP3 = mlx5_4 + mlx5_3, OSFP4 = mlx5_5 + mlx5_0. DGX SuperPOD RA: "the compute fabric
  ports ... use a two-port transceiver to access all eight GPUs".
* LinkX cable overview: the flat-top twin-port 800G OSFP is for DGX H100 Cedar7 links, the
  finned-top one for Quantum-2 switch cages, the single-port 400G flat-top one for ConnectX-7
  adapters; single-port plugs cannot go into twin-port switch cages.
* QM97X0 user manual: each OSFP cage is 2 logical InfiniBand ports (64 ports = 32 cages);
  the subnet-manager (UFM) side of a multimode link is MMA4Z00-NS400, the switch side MMA4Z00-NS.
* MMA4Z00-NS / MMA4Z00-NS400 specs: two straight MFP7E10 fibers per twin-port transceiver,
  one per 400G link; MCP4Y10 twin-port DAC (the -FLT variant has the flat top for the DGX
  H100), MCP7Y00 twin-port to 2 x single-port splitter DAC for ConnectX-7 adapters.
"""

from __future__ import annotations

from support.fabric_sim import DGX_HCAS, PROD_SMS, cluster, prod_spec

from components.planning.fabric import (
    Endpoint,
    FabricNode,
    FabricSpec,
    HcaPort,
    plan_fabric,
    render_fabric_files,
)
from components.planning.fabric.bom import (
    DGX_H100_CAGES,
    cable_parts,
    cage_use,
    link_parts,
    physical_cables,
)
from components.planning.switch_config import port_maps

NODES, RAILS, RAILS_PER_CAGE = 8, 8, 2
CAGES_PER_DGX = RAILS // RAILS_PER_CAGE  # 4 twin-port OSFP cages per DGX H100
PORTS_PER_SWITCH_CAGE = 2  # QM9700: 64 NDR ports in 32 twin-port cages


def qty(plan, part: str) -> int:
    return sum(b.quantity for b in plan.bom if b.part == part)


def prod():
    return plan_fabric(cluster(NODES), PROD_SMS, prod_spec())


def test_dgx_h100_cage_map_is_the_user_guides() -> None:
    # GPU g's HCA is rail g (DGX_HCAS[g]); the guide lists port -> (HCA, GPU).
    guide = {"OSFP1P1": 7, "OSFP1P2": 4, "OSFP2P1": 6, "OSFP2P2": 5,
             "OSFP3P1": 2, "OSFP3P2": 1, "OSFP4P1": 3, "OSFP4P2": 0}
    assert {f"OSFP{c}P{p}": DGX_HCAS.index(h) for h, (c, p) in DGX_H100_CAGES.items()} == guide
    assert sorted(DGX_H100_CAGES) == sorted(DGX_HCAS)  # exactly the 8 compute HCAs


def test_prod_bom_follows_the_dgx_h100_twin_port_cabling() -> None:
    plan = prod()
    hca_links = NODES * RAILS  # 64
    node_cages = NODES * CAGES_PER_DGX  # 32: every DGX cage carries two rails
    leaf_down_cages = hca_links // PORTS_PER_SWITCH_CAGE  # 32: same rail, slots (2k, 2k+1)
    # 8 nodes + the SM slot = 9 slots: 2 rails x 16-port blocks per leaf, 4 leaves, each with
    # 32 uplinks (ports 33-64) whatever its fill.
    leaves = 4
    uplinks = leaves * 32  # 128
    uplink_cages = 2 * (uplinks // PORTS_PER_SWITCH_CAGE)  # 64 leaf + 64 spine cages
    sm_cages = 2  # cage 8 (ports 15, 16) of leaf-su1-r0-1 and -r2-3, port 16 used (slot 15)
    use = cage_use(plan.cables)
    assert use.dgx_cages == node_cages == 32
    assert use.switch_cages == leaf_down_cages + uplink_cages + sm_cages == 162
    assert use.adapter_ports == 2  # the subnet-manager hosts' single-port ConnectX-7s
    assert qty(plan, "MQM9700-NS2F") == leaves + uplinks // 64  # 4 leaves + 2 full spines

    # A DGX cage's two rails go to two different switch cages, so no cable carries both: every
    # compute link is a fiber between a flat-top twin-port transceiver in the DGX cage and a
    # finned one in the leaf cage, in rack r01 (nodes 00-03) as across racks (04-07).
    assert qty(plan, "MMA4Z00-NS-FLT") == node_cages
    assert qty(plan, "MCP4Y10-N00x-FLT") == 0
    fibers_in_rack = 4 * RAILS  # gpu-node-00..03 share r01 with the switches
    fibers_cross = 4 * RAILS + 1  # gpu-node-04..07 and sm-02 are in r02
    by_item = {b.item: b.quantity for b in plan.bom if b.part == "MFP7E10-Nxxx"}
    assert by_item == {"NDR multimode fiber MPO-12/APC straight, in-rack": fibers_in_rack,
                       "NDR multimode fiber MPO-12/APC straight, cross-rack": fibers_cross}
    fibers = fibers_in_rack + fibers_cross  # 65: one per optical 400G link
    assert qty(plan, "MMA4Z00-NS") == leaf_down_cages + 1 == 33  # + leaf-su1-r2-3 cage 8 (sm-02)
    assert qty(plan, "MMA4Z00-NS400") == 1  # sm-02's adapter (UFM side of the QM97X0 manual)
    assert qty(plan, "MCP7Y00-N00x") == 1  # sm-01 shares r01: splitter DAC, one leg used
    twin_dacs = uplinks // 2  # leaf-spine in r01, ports 2c-1/2c to 2d-1/2d: 64 twin DACs
    assert qty(plan, "MCP4Y10-N00x") == twin_dacs

    # Every fiber ends in a transceiver port at both ends.
    used_ports = (2 * leaf_down_cages + 1) + 2 * node_cages + 1  # switch + DGX + adapter
    assert 2 * fibers == used_ports == 130
    assert use.physical_cables == fibers + twin_dacs + 1 == 130
    assert physical_cables(plan.bom) == 130
    # The single-port ConnectX-7 pattern is gone from the compute side.
    dgx_rows = [p for p in cable_parts(plan.cables) if p.b_cage.kind == "dgx"]
    assert len(dgx_rows) == hca_links
    assert {(p.cable, p.a_module, p.b_module) for p in dgx_rows} == {
        ("MFP7E10-Nxxx", "MMA4Z00-NS", "MMA4Z00-NS-FLT")}


def test_each_dgx_cage_carries_two_rails_to_two_switch_cages() -> None:
    plan = prod()
    cages: dict[tuple[str, int], set[tuple[int, str, int]]] = {}
    for c, p in zip(plan.cables, cable_parts(plan.cables), strict=True):
        if p.b_cage.kind == "dgx":
            cages.setdefault((c.b.device, p.b_cage.number), set()).add(
                (c.b.rail, c.a.device, p.a_cage.number))
    assert len(cages) == 32
    n3 = {k[1]: {r for r, _, _ in v} for k, v in cages.items() if k[0] == "gpu-node-03"}
    assert n3 == {1: {7, 4}, 2: {6, 5}, 3: {2, 1}, 4: {3, 0}}
    for links in cages.values():
        assert len(links) == RAILS_PER_CAGE
        assert len({(sw, cg) for _, sw, cg in links}) == 2  # two fibers, two switch cages


def test_full_su_dgx_cage_fans_out_to_two_rail_leaves() -> None:
    """A full SU (one leaf per rail, SuperPOD's rail alignment): each DGX cage's two fibers go
    to two different leaves, and each leaf cage's two fibers to two different nodes."""
    plan = plan_fabric(cluster(32), (), FabricSpec(default_switch_rack="r01"))
    leaves_of: dict[tuple[str, int], set[str]] = {}
    nodes_of: dict[tuple[str, int], set[str]] = {}
    for c, p in zip(plan.cables, cable_parts(plan.cables), strict=True):
        if c.kind == "hca":
            assert (p.media, p.b_module) == ("optical", "MMA4Z00-NS-FLT")  # r01 too
            leaves_of.setdefault((c.b.device, p.b_cage.number), set()).add(c.a.device)
            nodes_of.setdefault((c.a.device, p.a_cage.number), set()).add(c.b.device)
    assert len(leaves_of) == 32 * CAGES_PER_DGX
    assert all(len(v) == 2 for v in leaves_of.values())
    assert len(nodes_of) == 32 * RAILS // 2 and all(len(v) == 2 for v in nodes_of.values())
    assert qty(plan, "MMA4Z00-NS-FLT") == 128 and qty(plan, "MMA4Z00-NS") == 128
    assert qty(plan, "MFP7E10-Nxxx") == 256  # 256 compute links; leaf-spine all in r01: DACs


def test_port_descriptions_say_optical_for_every_dgx_link() -> None:
    maps = port_maps(prod())
    leaf = maps["leaf-su1-r0-1"]
    assert leaf[1] == "gpu-node-00 rail 0 (mlx5_0) [optical in-rack]"
    assert leaf[8] == "gpu-node-07 rail 0 (mlx5_0) [optical cross-rack]"
    assert leaf[17] == "gpu-node-00 rail 1 (mlx5_3) [optical in-rack]"  # rail b: 1 + 16 + slot
    assert leaf[33] == "spine-01 port 1 [dac in-rack]"
    # The SM hosts on the reserved slot (port 16) of two leaves; the spines carry only uplinks.
    assert leaf[16] == "sm-01 mlx5_0 [dac in-rack]"
    assert maps["leaf-su1-r2-3"][16] == "sm-02 mlx5_0 [optical cross-rack]"
    assert all(d.startswith("leaf-su1-") for sp in ("spine-01", "spine-02")
               for d in maps[sp].values())
    compute = [d for m in maps.values() for d in m.values() if " rail " in d]
    assert len(compute) == 64 and not [d for d in compute if "[dac" in d]


def test_cabling_csv_names_cage_ports_modules_and_cable() -> None:
    rows = render_fabric_files(prod())["fabric/cabling.csv"].splitlines()
    assert rows[0].endswith(",media,length_class,a_cage,a_module,b_cage,b_module,cable")
    assert rows[1] == ("leaf-su1-r0-1:1,hca,leaf-su1-r0-1,1,r01,gpu-node-00,,0,mlx5_0,r01,"
                       "optical,in-rack,cage 1 port 1,MMA4Z00-NS,OSFP4P2,MMA4Z00-NS-FLT,"
                       "MFP7E10-Nxxx")
    uplink = next(r for r in rows if r.startswith("leaf-su1-r0-1:33,"))
    assert uplink.endswith(",dac,in-rack,cage 17 port 1,,cage 1 port 1,,MCP4Y10-N00x")


def _dgx_link(port: int, hca: str, rail: int, rack: str = "r01"):
    return (Endpoint("leaf", port), Endpoint("dgx-a", 1, rail, hca), "r01", rack)


def test_twin_dac_only_where_a_dgx_cage_maps_onto_one_switch_cage() -> None:
    # OSFP4 = mlx5_5 (P1, rail 3) + mlx5_0 (P2, rail 0) on leaf cage 1 (ports 1, 2), in rack.
    straight = link_parts([_dgx_link(1, "mlx5_5", 3), _dgx_link(2, "mlx5_0", 0)])
    assert {(p.media, p.cable, p.a_module, p.b_module) for p in straight} == {
        ("dac", "MCP4Y10-N00x-FLT", "", "")}
    crossed = link_parts([_dgx_link(2, "mlx5_5", 3), _dgx_link(1, "mlx5_0", 0)])
    split = link_parts([_dgx_link(1, "mlx5_5", 3), _dgx_link(3, "mlx5_0", 0)])
    far = link_parts([_dgx_link(1, "mlx5_5", 3, "r02"), _dgx_link(2, "mlx5_0", 0, "r02")])
    for parts in (crossed, split, far):
        assert {(p.media, p.cable, p.b_module) for p in parts} == {
            ("optical", "MFP7E10-Nxxx", "MMA4Z00-NS-FLT")}


def test_servers_without_the_dgx_h100_hcas_keep_single_port_adapters() -> None:
    """HGX-style servers with single-port ConnectX-7 OSFP cards (HCA names mlx5_0..7)."""
    nodes = [FabricNode(f"hgx-{i}", 1, i, "r01" if i < 2 else "r02",
                        tuple(HcaPort(r, f"mlx5_{r}") for r in range(RAILS))) for i in range(4)]
    plan = plan_fabric(nodes, (), FabricSpec(default_switch_rack="r01"))
    use = cage_use(plan.cables)
    assert (use.dgx_cages, use.adapter_ports) == (0, 32)
    # slots (0, 1) share r01 with the switches: one splitter DAC per rail's leaf cage
    assert qty(plan, "MCP7Y00-N00x") == RAILS
    assert qty(plan, "MMA4Z00-NS400") == 2 * RAILS and qty(plan, "MMA4Z00-NS-FLT") == 0
