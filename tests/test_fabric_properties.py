"""Property tests of the fabric planner over many cluster shapes (1..1024 nodes, gappy SUs)."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fabric_sim import DGX_HCAS

from components.planning.fabric import (
    FabricNode,
    FabricPlan,
    FabricSpec,
    HcaPort,
    SmHost,
    plan_fabric,
    render_fabric_files,
)
from components.planning.fabric.bom import PARTS, cable_parts, cage_use

SPEC = FabricSpec()
# database=None: no .hypothesis/ directory in the work tree; failures print their example.
SLOW = settings(deadline=None, max_examples=30, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _nodes(su_masks: list[int], missing: set[int]) -> list[FabricNode]:
    """One SU per mask; bit s set = a node in slot s. `missing`: node ordinals without rail 3."""
    nodes = []
    for su, mask in enumerate(su_masks, start=1):
        for slot in range(32):
            if mask >> slot & 1:
                i = len(nodes)
                ports = tuple(HcaPort(r, DGX_HCAS[r]) for r in range(8)
                              if not (i in missing and r == 3))
                nodes.append(FabricNode(f"n{su:02d}s{slot:02d}", su, slot, f"r{su}-{slot // 4}",
                                        ports))
    return nodes


# Mostly small clusters, some up to 32 full SUs (1024 nodes); masks leave gaps in slots.
masks = st.one_of(
    st.lists(st.integers(1, 2**8 - 1), min_size=1, max_size=3),
    st.lists(st.integers(1, 2**32 - 1), min_size=1, max_size=12),
    st.lists(st.sampled_from([2**32 - 1, 2**32 - 1, 2**31 - 1, 0xFFFF0FFF]), min_size=9,
             max_size=32),
)
sm_count = st.integers(0, 2)


def _sms(k: int) -> tuple[SmHost, ...]:
    return tuple(SmHost(f"sm{i}", 15 - i, "net") for i in range(k))


def _plan(m: list[int], k: int, missing: set[int] | None = None) -> FabricPlan | None:
    from components.planning.fabric import PlanError

    try:
        return plan_fabric(_nodes(m, missing or set()), _sms(k), SPEC)
    except PlanError as e:  # SM hosts are refused only when the first SU uses its last slot,
        # the one it keeps for them (DGX SuperPOD: 31 DGX and the UFM slot in that SU)
        assert k and m[0] >> 31 & 1, str(e)
        assert "fills all 32 slots of SU 1" in str(e)
        return None


def _check_structure(plan: FabricPlan, nodes: list[FabricNode]) -> None:
    radix, half = SPEC.radix, SPEC.half
    seen: set[tuple[str, int]] = set()
    down: dict[str, int] = {}
    up: dict[str, int] = {}
    sw = {s.name: s for s in plan.switches}
    for c in plan.cables:
        for e in (c.a, c.b):
            key = (e.device, e.port) if e.is_switch else (e.device, -1 - (e.rail or 0))
            assert key not in seen, f"port used twice: {key}"
            seen.add(key)
            if e.is_switch:
                assert 1 <= e.port <= radix
        lower = sw[c.a.device]
        if c.kind in ("hca", "sm") and lower.role == "leaf":
            down[lower.name] = down.get(lower.name, 0) + 1
        if c.kind == "leaf-spine":
            up[lower.name] = up.get(lower.name, 0) + 1
            assert c.a.port > half  # uplinks on the upper half
    for leaf in (s for s in plan.switches if s.role == "leaf"):
        assert down.get(leaf.name, 0) <= half
        assert up.get(leaf.name, 0) >= down.get(leaf.name, 0)
        assert up[leaf.name] == half
    by_host = {n.hostname: n for n in nodes}
    for p in plan.nodes:
        for r in p.rails:
            leaf = sw[r.leaf]
            assert leaf.su == by_host[p.hostname].su and r.rail in leaf.rails
    assert plan.hca_ports == sum(len(n.ports) for n in nodes)
    assert plan.oversubscription <= 1
    # SM hosts on leaves of the first SU (never a spine or core: ftree routes nothing between
    # its roots; a new SU never moves them), master and standby on different leaves, on ports
    # no node can take.
    first_su = min(n.su for n in nodes)
    assert all(sw[s.switch].role == "leaf" and sw[s.switch].su == first_su for s in plan.sm)
    assert len({s.switch for s in plan.sm}) == len(plan.sm)


def _check_reachability(plan: FabricPlan) -> None:
    """Every leaf reaches every other leaf in 2 x (tiers - 1) switch hops, so any two HCAs
    are at most 2 x tiers links apart. BFS from all leaves (a sample beyond 64 leaves)."""
    adj: dict[str, set[str]] = {}
    for c in plan.cables:
        if c.kind in ("leaf-spine", "spine-core"):
            adj.setdefault(c.a.device, set()).add(c.b.device)
            adj.setdefault(c.b.device, set()).add(c.a.device)
    leaves = [s.name for s in plan.switches if s.role == "leaf"]
    limit = 2 * (plan.tiers - 1)
    starts = leaves if len(leaves) <= 64 else leaves[:: max(1, len(leaves) // 16)]
    for start in starts:
        dist = {start: 0}
        q = deque([start])
        while q:
            cur = q.popleft()
            if dist[cur] == limit:
                continue
            for nxt in adj.get(cur, ()):
                if nxt not in dist:
                    dist[nxt] = dist[cur] + 1
                    q.append(nxt)
        assert all(leaf in dist for leaf in leaves), f"{start} cannot reach every leaf"


def _check_cages(plan: FabricPlan) -> None:
    """Cages and BOM add up (bom.py): a twin-port cage holds at most two links and either one
    transceiver or one DAC end; every DGX H100 link is a fiber (its cage's rails never share a
    switch cage); the BOM counts one transceiver per optical cage and one fiber per link."""
    parts = cable_parts(plan.cables)
    links: dict[object, int] = {}
    optical: set[object] = set()
    copper: set[object] = set()
    for p in parts:
        for c in (p.a_cage, p.b_cage):
            links[c] = links.get(c, 0) + 1
            (optical if p.media == "optical" else copper).add(c)
        if p.b_cage.kind == "dgx":
            assert (p.media, p.a_module, p.b_module) == ("optical", PARTS["twin_sr8"],
                                                         PARTS["twin_sr8_flat"])
    assert all(n <= (1 if c.kind == "adapter" else 2) for c, n in links.items())  # type: ignore[attr-defined]
    assert not optical & copper
    use = cage_use(plan.cables)
    qty = {part: sum(b.quantity for b in plan.bom if b.part == part) for part in PARTS.values()}
    assert qty[PARTS["fiber"]] == use.fibers == sum(p.media == "optical" for p in parts)
    assert qty[PARTS["twin_sr8"]] + qty[PARTS["twin_sr8_flat"]] + qty[PARTS["sr4_flat"]] == len(
        optical)
    assert qty[PARTS["twin_sr8_flat"]] == use.dgx_cages == use.dgx_optical
    assert sum(b.quantity for b in plan.bom if b.category == "cable") == use.physical_cables


@pytest.mark.slow
@SLOW
@given(masks, sm_count, st.sets(st.integers(0, 40), max_size=3))
def test_structure_reachability_determinism(m: list[int], k: int, missing: set[int]) -> None:
    nodes = _nodes(m, missing)
    plan = _plan(m, k, missing)
    if plan is None:
        return
    _check_structure(plan, nodes)
    _check_reachability(plan)
    _check_cages(plan)
    assert plan.tiers == (2 if plan.count("leaf") <= SPEC.radix else 3)
    # deterministic, whatever the input order
    assert plan_fabric(list(reversed(nodes)), _sms(k)[::-1], SPEC) == plan


@settings(deadline=None, max_examples=15, database=None)
@given(st.lists(st.integers(1, 2**32 - 1), min_size=1, max_size=3), sm_count)
def test_rendering_is_deterministic(m: list[int], k: int) -> None:
    plan = _plan(m, k)
    if plan is not None:
        assert render_fabric_files(plan) == render_fabric_files(_plan(m, k))  # type: ignore[arg-type]


def _port_maps(plan: FabricPlan) -> dict[str, dict[int, str]]:
    maps: dict[str, dict[int, str]] = {}
    for c in plan.cables:
        maps.setdefault(c.a.device, {})[c.a.port] = c.b.label()
        if c.b.is_switch:
            maps.setdefault(c.b.device, {})[c.b.port] = c.a.label()
    return maps


@pytest.mark.slow
@SLOW
@given(masks, st.data())
def test_adding_a_node_only_adds_its_own_cables(m: list[int], data: st.DataObject) -> None:
    """A node added in a free slot of an existing SU that keeps the SU's rails-per-leaf (any
    gap, or a higher slot within the same leaf grouping) adds its own cables; every other
    cable and every other switch's port map stays."""

    def grouping(slots: int) -> int:  # rails per leaf: 4 rails x 8 slots, 2 x 16, 1 x 32
        return max(d for d in (1, 2, 4) if d * slots <= 32 or d == 1)

    candidates = [(su, s) for su, mask in enumerate(m, start=1) for s in range(32)
                  if not mask >> s & 1
                  and grouping(max(s + 1, mask.bit_length())) == grouping(mask.bit_length())]
    if not candidates:
        return
    su, slot = data.draw(st.sampled_from(candidates))
    before = plan_fabric(_nodes(m, set()), (), SPEC)
    grown = list(m)
    grown[su - 1] |= 1 << slot
    after = plan_fabric(_nodes(grown, set()), (), SPEC)
    new_host = f"n{su:02d}s{slot:02d}"
    old, new = set(before.cables), set(after.cables)
    assert old <= new
    added = new - old
    assert {c.b.device for c in added} == {new_host} and len(added) == 8
    leaves = {c.a.device for c in added}
    b_maps, a_maps = _port_maps(before), _port_maps(after)
    for name in set(b_maps) | set(a_maps):
        if name not in leaves:
            assert b_maps.get(name) == a_maps.get(name), name
        else:
            changed = {p for p in a_maps[name] if b_maps.get(name, {}).get(p) != a_maps[name][p]}
            assert changed == {c.a.port for c in added if c.a.device == name}
    assert [s for s in before.switches] == [s for s in after.switches]
