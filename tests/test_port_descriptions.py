"""The switch port description is written once and read back by one parser: what a switch is
configured with is what the fabric's published facts, the pack's cabling rules and the
preview's runbook see."""

from __future__ import annotations

import re

from support.sandbox import prod_cluster

from components.planning import placement
from components.planning.facts import fabric_facts
from components.planning.port_descriptions import (
    hca_peer,
    port_descriptions,
    split_cable,
    switch_peer,
)
from components.planning.switch_config import port_maps, switch_cli

# MLNX-OS: `interface ib 1/<port> description "<text>"`, or the `no` form that clears it.
MLNX_PORT_LINE = re.compile(r'^(interface ib 1/\d+ description "[^"]*"|no interface ib 1/\d+ '
                            r"description)$")


def test_every_cable_reads_back_as_planned() -> None:
    plan = placement.plan(prod_cluster())
    maps = port_maps(plan)
    seen = 0
    for sw in plan.switches:
        cli = switch_cli(sw.name, maps[sw.name], host_sm=True, radix=64)
        assert all(MLNX_PORT_LINE.match(line) for line in cli.splitlines()
                   if "interface ib" in line)
        assert port_descriptions(cli) == maps[sw.name]
    for cable in plan.cables:
        for here, there in ((cable.a, cable.b), (cable.b, cable.a)):
            if not here.is_switch:
                continue
            peer, media = split_cable(maps[here.device][here.port])
            assert media == f"{cable.media} {cable.length_class}"
            if there.is_switch:
                assert switch_peer(peer) == (there.device, there.port)
            elif there.rail is not None:
                assert hca_peer(peer) == (there.device, there.rail, there.hca)
                seen += 1
            else:  # a subnet-manager host's HCA: neither a switch nor a compute rail
                assert hca_peer(peer) is None and switch_peer(peer) is None
    nodes = prod_cluster().nodes
    assert seen == sum(len(n.rails) for n in nodes)


def test_published_facts_follow_the_switch_commands() -> None:
    """A cable moved in a switch's commands moves in the facts the pack reads."""
    plan = placement.plan(prod_cluster())
    maps = port_maps(plan)
    clis = {sw.name: switch_cli(sw.name, maps[sw.name], True, 64) for sw in plan.switches}
    facts = fabric_facts(clis, {})
    assert facts["rails"]["gpu-node-00"]["4"] == {"hcas": ["mlx5_6"],
                                                   "switches": ["leaf-su1-r4-5"]}
    # Re-cable gpu-node-00's rail 4 onto rail 0's leaf: one description moves between switches.
    port = next(p for p, d in maps["leaf-su1-r4-5"].items()
                if d.startswith("gpu-node-00 rail 4 "))
    free = next(p for p in range(1, 65) if p not in maps["leaf-su1-r0-1"])
    moved = {**maps["leaf-su1-r0-1"], free: maps["leaf-su1-r4-5"][port]}
    left = {p: d for p, d in maps["leaf-su1-r4-5"].items() if p != port}
    clis["leaf-su1-r0-1"] = switch_cli("leaf-su1-r0-1", moved, True, 64)
    clis["leaf-su1-r4-5"] = switch_cli("leaf-su1-r4-5", left, True, 64)
    facts = fabric_facts(clis, {})
    assert facts["rails"]["gpu-node-00"]["4"]["switches"] == ["leaf-su1-r0-1"]
