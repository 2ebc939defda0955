"""The rendered fabric on the real tools: ibsim simulates topology.net, opensm routes it with
the rendered opensm.conf, infiniband-diags read it back (recipe: shared/ibsim.md).

`SUBNET UP` proves nothing (opensm falls back from ftree silently), so every run asserts the
engine, the absence of ERR lines, an LFT walk from every switch to every CA LID, the pkeys on
the HCAs, and that the verifier finds the simulated fabric identical to the plan.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fabric_sim import (
    PROD_SMS,
    Faults,
    SimFabric,
    cluster,
    prod_spec,
    sim_limits,
    skip_reason,
    write_fabric,
)

from components.planning.fabric import (
    FabricNode,
    FabricPlan,
    FabricSpec,
    parse_ibnetdiscover,
    plan_fabric,
    render_topology_net,
    verify_plan,
)

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

FULL = 0x8000


def _sim_host(plan: FabricPlan) -> str:
    """The SM runs on the master SM host's HCA, or on a compute HCA (ftree does not route
    between root switches, so an SM on a spine loses some paths; see ibsim.md)."""
    if plan.sm:
        return f"{plan.sm[0].hostname} {plan.sm[0].hca}"
    n = plan.nodes[0]
    return f"{n.hostname} {n.rails[0].hca}"


def _lids_on_block_edge() -> FabricPlan:
    """16 nodes, 6 of them missing a rail: 122 CAs + 6 switches = 128 LIDs, so the top LID
    opens a new 64-LID LFT block (the case infiniband-diags prints one short)."""
    nodes = [FabricNode(n.hostname, n.su, n.slot, n.rack, n.ports[:-1] if i < 6 else n.ports)
             for i, n in enumerate(cluster(16))]
    plan = plan_fabric(nodes, (), FabricSpec())
    assert plan.hca_ports + len(plan.switches) == 128
    return plan


CASES = {
    "prod-8": lambda: plan_fabric(cluster(8), PROD_SMS, prod_spec()),
    "su-32": lambda: plan_fabric(cluster(32), PROD_SMS, prod_spec()),
    "two-tier-max-256": lambda: plan_fabric(cluster(256), (), FabricSpec()),
    # The core tier, small enough for ibsim: two pods (4 full SUs + 1 node), SM hosts on cores.
    "top-lid-128": _lids_on_block_edge,
    "three-tier-2-pods": lambda: plan_fabric(cluster(129), PROD_SMS, FabricSpec(tiers=3)),
}


# 1024 nodes (8 pods, 128 cores, 8832 LIDs) routes with ftree too, in about a minute on
# 2 cores (opensm ~20 s, dump_fts ~20 s): opt in with FABRIC_SIM_1024=1.
CASES["three-tier-1024"] = lambda: plan_fabric(cluster(1024), (), FabricSpec())
_SLOW = pytest.mark.skipif(os.environ.get("FABRIC_SIM_1024") != "1",
                           reason="1024-node simulation takes ~1 min; set FABRIC_SIM_1024=1")


@pytest.mark.parametrize("case", [pytest.param(c, marks=_SLOW) if c.endswith("1024") else c
                                  for c in CASES])
def test_opensm_routes_the_rendered_fabric(case: str, tmp_path: Path) -> None:
    plan = CASES[case]()
    conf = write_fabric(plan, tmp_path)
    net = (tmp_path / "topology.net").read_text()
    cas = plan.hca_ports + len(plan.sm)
    with SimFabric(tmp_path, net, sim_host=_sim_host(plan), **sim_limits(plan)) as sim:
        run = sim.opensm(conf)
        assert run.rc == 0, run.log[-3000:]
        assert run.engine == "ftree", f"routed with {run.engine}: " + "\n".join(run.errors)
        assert "ftree tables configured on all switches" in run.log
        assert run.errors == []
        assert f"Fabric has {cas} CAs, {cas} CA ports ({plan.hca_ports} of them CNs)" in run.log
        discovered = sim.ibnetdiscover()
        report = verify_plan(plan, discovered)
        assert report.ok, report.text()
        topo = parse_ibnetdiscover(discovered)
        lids = {n.desc: n.lid for n in topo.nodes.values() if n.kind == "ca"}
        assert len(lids) == cas and all(lids.values())
        assert sim.route_check(topo) == []
        _check_pkeys(sim, plan, lids)


def _check_pkeys(sim: SimFabric, plan: FabricPlan, lids: dict[str, int]) -> None:
    by_pkey = {p.name: p.pkey for p in plan.spec.partitions}
    tenants = {h for p in plan.spec.partitions if p.hosts for h in p.hosts}
    nodes = plan.nodes if len(plan.nodes) <= 8 else (plan.nodes[0], plan.nodes[-1])
    for n in nodes:
        for r in n.rails:
            if f"{n.hostname} {r.hca}" == sim.sim_host:
                continue  # the SM's own port is a full Default member (SELF=full)
            pkeys = set(sim.pkeys(lids[f"{n.hostname} {r.hca}"]))
            assert 0x7FFF in pkeys and 0xFFFF not in pkeys  # Default: limited only
            if "training" in by_pkey:
                assert FULL | by_pkey["training"] in pkeys
            if "storage" in by_pkey:  # storage clients are limited members
                assert by_pkey["storage"] in pkeys and FULL | by_pkey["storage"] not in pkeys
            if "inference" in by_pkey:
                assert (FULL | by_pkey["inference"] in pkeys) == (n.hostname in tenants)
    for s in plan.sm:
        assert 0xFFFF in sim.pkeys(lids[f"{s.hostname} {s.hca}"])


# ---------------------------------------------------------------- faults in the simulator


@pytest.fixture(scope="module")
def prod() -> FabricPlan:
    return plan_fabric(cluster(8), PROD_SMS, prod_spec())


def _discover(tmp_path: Path, net: str, plan: FabricPlan | None = None) -> tuple[str, str | None]:
    """ibnetdiscover of the simulated net; with a plan, opensm routes it first (the engine
    it ends up with is returned: shape-preserving miswires still route with ftree)."""
    with SimFabric(tmp_path, net, sim_host="gpu-node-01 mlx5_0") as sim:
        engine = sim.opensm(write_fabric(plan, tmp_path / "etc")).engine if plan else None
        return sim.ibnetdiscover(), engine


def _faulted(plan: FabricPlan) -> Faults:
    return Faults(parse_ibnetdiscover(render_topology_net(plan)))


def test_sim_clean_fabric_reports_nothing(prod: FabricPlan, tmp_path: Path) -> None:
    discovered, engine = _discover(tmp_path, render_topology_net(prod), prod)
    assert engine == "ftree"
    assert verify_plan(prod, discovered).ok


# fault: (edit, finding kinds, text in each finding, engine opensm ends up with)
FAULTS = {
    "rails-swapped": (lambda f: f.swap(("leaf-su1-r0-3", 3), ("leaf-su1-r0-3", 11)),
                      ["MISWIRE", "MISWIRE"],
                      ["leaf-su1-r0-3 port 3 <-> gpu-node-02 rail 1 (mlx5_3)",
                       "leaf-su1-r0-3 port 11 <-> gpu-node-02 rail 0 (mlx5_0)"], "ftree"),
    "uplinks-swapped": (lambda f: f.swap(("leaf-su1-r4-7", 33), ("leaf-su1-r4-7", 49)),
                        ["MISWIRE", "MISWIRE"],
                        ["leaf-su1-r4-7 port 33 <-> spine-02 port 17",
                         "leaf-su1-r4-7 port 49 <-> spine-01 port 17"], "ftree"),
    "uplink-missing": (lambda f: f.drop(("leaf-su1-r0-3", 40)), ["MISSING_CABLE"],
                       ["leaf-su1-r0-3 port 40 <-> spine-01 port 8"], "ftree"),
    "hca-on-spine": (lambda f: f.drop(("leaf-su1-r4-7", 9))
                     .add(("gpu-node-00 mlx5_9", 1), ("spine-02", 50)),
                     ["MISWIRE"], ["spine-02 port 50 <-> gpu-node-00 rail 5 (mlx5_9)"],
                     "updn"),  # a compute HCA on a root: not a fat tree any more
    "node-missing": (lambda f: f.remove_host("gpu-node-05"), ["MISSING_NODE"],
                     ["8 of 8 HCA ports not discovered (host down or not cabled)"], "ftree"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_sim_fault_is_reported_precisely(fault: str, prod: FabricPlan, tmp_path: Path) -> None:
    edit, expected_kinds, found, engine = FAULTS[fault]
    discovered, used = _discover(tmp_path, edit(_faulted(prod)).net(), prod)
    assert used == engine
    report = verify_plan(prod, discovered)
    assert [f.kind for f in report.findings] == expected_kinds, report.text()
    for finding, text in zip(report.findings, found, strict=True):
        assert text in finding.text(), report.text()


def test_sim_leaf_to_leaf_cross_link(tmp_path: Path) -> None:
    plan = plan_fabric(cluster(7), PROD_SMS, prod_spec())  # slot 7 free on both leaves
    net = _faulted(plan).add(("leaf-su1-r0-3", 8), ("leaf-su1-r4-7", 16)).net()
    report = verify_plan(plan, _discover(tmp_path, net)[0])
    assert [(f.kind, f.found) for f in report.findings] == [
        ("EXTRA_CABLE", "leaf-su1-r0-3 port 8 <-> leaf-su1-r4-7 port 16")], report.text()
