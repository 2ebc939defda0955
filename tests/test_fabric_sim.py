"""The rendered fabric on the real tools: ibsim simulates topology.net, opensm routes it with
the rendered opensm.conf, infiniband-diags read it back (recipe: shared/ibsim.md).

`SUBNET UP` proves nothing (opensm falls back from ftree silently), so every run asserts the
engine, the absence of ERR lines, an LFT walk from every switch to every CA LID, the pkeys on
the HCAs, and that the verifier finds the simulated fabric identical to the plan.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from support.fabric_sim import (
    PROD_SMS,
    Faults,
    SimFabric,
    cluster,
    prod_spec,
    sim_limits,
    skip_reason,
    write_fabric,
)
from support.project import REPO, prod_raw

from components.planning import placement
from components.planning.fabric import (
    FabricNode,
    FabricPlan,
    FabricSpec,
    StorageServer,
    parse_ibnetdiscover,
    plan_fabric,
    render_topology_net,
    verify_plan,
)
from components.planning.fabric.sm_files import render_opensm_conf
from components.planning.subnet_manager import sm_keys_conf, sm_restart_order, sm_role_wait
from components.wiring.loading import validate_cluster

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]

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


# Two storage servers on the compute rails, two ports each (prod's Lustre pair).
STORAGE = (StorageServer("lustre-01", "r02", ("0x0c42a10300b10001", "0x0c42a10300b10002")),
           StorageServer("lustre-02", "r02", ("0x0c42a10300b20001", "0x0c42a10300b20002")))

CASES = {
    "prod-8": lambda: plan_fabric(cluster(8), PROD_SMS, prod_spec()),
    # Their ports are I/O nodes to ftree, routed from every switch like the rails.
    "prod-8-storage": lambda: plan_fabric(cluster(8), PROD_SMS,
                                          prod_spec(storage_servers=STORAGE)),
    # A full SU as DGX SuperPOD builds it: 31 nodes and the slot the SM hosts take.
    "su-31-and-sms": lambda: plan_fabric(cluster(31, per_su=31), PROD_SMS, prod_spec()),
    "two-tier-max-256": lambda: plan_fabric(cluster(256), (), FabricSpec()),
    # The core tier, small enough for ibsim: two pods (4 full SUs + 1 node), SM hosts in SU 1.
    "top-lid-128": _lids_on_block_edge,
    "three-tier-2-pods": lambda: plan_fabric(cluster(125, per_su=31), PROD_SMS,
                                             FabricSpec(tiers=3)),
}


# 1024 nodes (8 pods, 128 cores, 8832 LIDs) routes with ftree too, in about a minute on
# 2 cores (opensm ~20 s, dump_fts ~20 s): opt in with FABRIC_SIM_1024=1.
CASES["three-tier-1024"] = lambda: plan_fabric(cluster(1024), (), FabricSpec())
_OPT_IN_1024 = pytest.mark.skipif(os.environ.get("FABRIC_SIM_1024") != "1",
                           reason="1024-node simulation takes ~1 min; set FABRIC_SIM_1024=1")


@pytest.mark.parametrize("case", [pytest.param(c, marks=_OPT_IN_1024) if c.endswith("1024") else c
                                  for c in CASES])
def test_opensm_routes_the_rendered_fabric(case: str, tmp_path: Path) -> None:
    plan = CASES[case]()
    conf = write_fabric(plan, tmp_path)
    net = (tmp_path / "topology.net").read_text()
    cas = plan.hca_ports + len(plan.sm) + len(plan.storage)
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
        for st in plan.storage:  # full members of the data path, at index 0
            assert sim.pkey_table(lids[f"{st.hostname} {st.hca}"])[0] == FULL | next(
                p.pkey for p in plan.spec.partitions if p.data_path)


def _check_pkeys(sim: SimFabric, plan: FabricPlan, lids: dict[str, int]) -> None:
    """What opensm wrote into each port's P_Key table (`smpquery pkeys`): the data path's
    P_Key, full, at index 0 of every compute port (NCCL_IB_PKEY defaults to index 0, an IPoIB
    parent interface uses index 0); the Default partition limited; tenants and storage as
    their member types say."""
    parts = {p.name: p for p in plan.spec.partitions}
    data_path = next(p for p in plan.spec.partitions if p.data_path)
    tenants = {h for p in plan.spec.partitions if p.hosts for h in p.hosts}
    nodes = plan.nodes if len(plan.nodes) <= 8 else (plan.nodes[0], plan.nodes[-1])
    for n in nodes:
        for r in n.rails:
            if f"{n.hostname} {r.hca}" == sim.sim_host:
                continue  # the SM's own port is a full Default member (SELF=full)
            table = sim.pkey_table(lids[f"{n.hostname} {r.hca}"])
            assert table[0] == FULL | data_path.pkey, (n.hostname, r.hca, table[:4])
            assert 0x7FFF in table and 0xFFFF not in table  # Default: limited only
            if "storage" in parts:  # storage clients are limited members
                pkey = parts["storage"].pkey
                assert pkey in table and FULL | pkey not in table
            if "tenant" in parts:
                assert (FULL | parts["tenant"].pkey in table) == (n.hostname in tenants)
    for s in plan.sm:
        assert sim.pkey_table(lids[f"{s.hostname} {s.hca}"])[0] == 0xFFFF


def _prod_plan() -> FabricPlan:
    cluster_ = validate_cluster(prod_raw(), REPO)
    return placement.plan(cluster_)


def test_prod_partitions_carry_the_data_path_and_isolate_the_rest(tmp_path: Path) -> None:
    """The prod rendering on the real tools, with its Lustre servers (fabric.storageServers,
    cabled as planned) and a stray host that is in no partition cabled to a leaf (gpu-node-07
    unplugged for the ports). Who can talk to whom is what the SA answers: a path record
    exists only over a P_Key both ports hold with at least one of them a full member."""
    plan = _prod_plan()
    data_path = next(p for p in plan.spec.partitions if p.data_path)
    leaf = next(s for s in plan.switches if s.tier == 1).name
    net = (_faulted(plan).remove_host("gpu-node-07")
           .attach_ca("stray-01 mlx5_0", "0x0c42a10300c10001", leaf).net())
    conf = write_fabric(plan, tmp_path)
    with SimFabric(tmp_path, net, sim_host=_sim_host(plan)) as sim, sim.running_opensm(conf):
        lids = {n.desc: n.lid for n in parse_ibnetdiscover(sim.ibnetdiscover()).nodes.values()
                if n.kind == "ca"}
        a, b = lids["gpu-node-00 mlx5_0"], lids["gpu-node-05 mlx5_11"]
        oss, stray, sm2 = lids["lustre-01 port0"], lids["stray-01 mlx5_0"], lids[
            "sm-02 mlx5_0"]
        compute = FULL | data_path.pkey
        # Index 0 of every compute port and of the server holds the data path, full.
        for desc, lid in lids.items():
            if desc.startswith("gpu-node-") or desc.startswith("lustre-"):
                assert sim.pkey_table(lid)[0] == compute, desc
        assert sim.pkey_table(stray)[:2] == [0x7FFF, 0]  # only a limited Default member
        # NCCL between nodes, a client to the Lustre server: over the data path.
        assert sim.path_pkey(a, b) == compute
        assert sim.path_pkey(a, oss) == compute
        # A stray port reaches nobody but the subnet managers (Default: limited to full).
        assert sim.path_pkey(a, stray) is None
        assert sim.path_pkey(oss, stray) is None
        assert sim.path_pkey(stray, sm2) == 0x7FFF
        # The IPoIB broadcast group of the data path (what ib0, the pods' attachment and
        # LNet join) at MTU code 5: 4096 bytes.
        assert sim.ipoib_groups("gpu-node-00 mlx5_0")[compute] == 5


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
    # prod-like: 8 nodes and the SM slot, 4 leaves of 2 rails x 16 slots, 2 spines.
    "rails-swapped": (lambda f: f.swap(("leaf-su1-r0-1", 3), ("leaf-su1-r0-1", 19)),
                      ["MISWIRE", "MISWIRE"],
                      ["leaf-su1-r0-1 port 3 <-> gpu-node-02 rail 1 (mlx5_3)",
                       "leaf-su1-r0-1 port 19 <-> gpu-node-02 rail 0 (mlx5_0)"], "ftree"),
    "uplinks-swapped": (lambda f: f.swap(("leaf-su1-r4-5", 33), ("leaf-su1-r4-5", 49)),
                        ["MISWIRE", "MISWIRE"],
                        ["leaf-su1-r4-5 port 33 <-> spine-02 port 33",
                         "leaf-su1-r4-5 port 49 <-> spine-01 port 33"], "ftree"),
    "uplink-missing": (lambda f: f.drop(("leaf-su1-r0-1", 40)), ["MISSING_CABLE"],
                       ["leaf-su1-r0-1 port 40 <-> spine-01 port 8"], "ftree"),
    "hca-on-spine": (lambda f: f.drop(("leaf-su1-r4-5", 17)).drop(("spine-02", 64))
                     .add(("gpu-node-00 mlx5_9", 1), ("spine-02", 64)),
                     ["MISWIRE"], ["spine-02 port 64 <-> gpu-node-00 rail 5 (mlx5_9)"],
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
    # 7 nodes and the SM slot (slot 7): its rail-0 ports hold the SM hosts, the rest is free.
    plan = plan_fabric(cluster(7), PROD_SMS, prod_spec())
    net = _faulted(plan).add(("leaf-su1-r0-3", 16), ("leaf-su1-r4-7", 24)).net()
    report = verify_plan(plan, _discover(tmp_path, net)[0])
    assert [(f.kind, f.found) for f in report.findings] == [
        ("EXTRA_CABLE", "leaf-su1-r0-3 port 16 <-> leaf-su1-r4-7 port 24")], report.text()


def test_every_sm_host_reaches_every_switch_and_the_other_sm_by_lid(tmp_path: Path) -> None:
    """The SM hosts sit on leaves of the first SU (ftree routes no traffic between its root
    switches, so an SM host on a spine could not reach the other spines by LID): from each SM
    host, a LID-routed PMA query (perfquery) answers from every switch, and the LID route to
    the other SM (ibtracert, hop by hop through the switches' forwarding tables) ends at it.
    (ibsim's CAs do not answer PMA queries, so the SM-to-SM check walks the route.)"""
    plan = _prod_plan()
    assert {s.switch for s in plan.sm} == {"leaf-su1-r0-1", "leaf-su1-r2-3"}
    conf = write_fabric(plan, tmp_path)
    with SimFabric(tmp_path, (tmp_path / "topology.net").read_text(),
                   sim_host=_sim_host(plan)) as sim:
        run = sim.opensm(conf)
        assert run.rc == 0 and run.engine == "ftree" and run.errors == [], run.log[-2000:]
        topo = parse_ibnetdiscover(sim.ibnetdiscover())
        lids = {n.desc: n.lid for n in topo.nodes.values()}
        switches = {d: lid for d, lid in lids.items() if d.startswith("MF0;")}
        assert len(switches) == len(plan.switches)
        for sm in plan.sm:
            me = f"{sm.hostname} {sm.hca}"
            unreachable = [d for d, lid in sorted(switches.items())
                           if sim.run_on(me, ["perfquery", str(lid)], 20).returncode != 0]
            assert unreachable == [], (sm.hostname, unreachable)
            for other in (f"{o.hostname} {o.hca}" for o in plan.sm if o is not sm):
                trace = sim.run_on(me, ["ibtracert", str(lids[me]), str(lids[other])], 20)
                assert trace.returncode == 0, trace.stderr[-500:]
                assert trace.stdout.strip().splitlines()[-1].endswith(f'"{other}"'), trace.stdout


# ---------------------------------------------------------------- subnet-manager restarts


def _role_wait(sim: SimFabric, host: str, master: bool, seconds: int
               ) -> subprocess.CompletedProcess[str]:
    """The wait the rendered apply-opensm.sh runs after its restart, with the real sminfo
    (umad2sim names every simulated HCA ibsim0; on the host it is the SM's mlx5_N)."""
    script = "set -euo pipefail\n" + "\n".join(sm_role_wait("ibsim0", master, seconds)) + "\n"
    return sim.run_on(host, ["bash", "-c", script], seconds + 30)


def test_subnet_managers_restart_one_at_a_time_standby_first(tmp_path: Path) -> None:
    """The order `pulumi up` applies the prod SM hosts in, on two real opensm daemons: the
    standby first, back in its role before the master restarts; the fabric always has a
    master. At first bring-up the standby is alone (MASTER) until the master takes over."""
    plan = _prod_plan()
    write_fabric(plan, tmp_path)
    sms = {s.hostname: s for s in plan.sm}
    order = sm_restart_order({h: s.priority for h, s in sms.items()})
    assert order == ["sm-02", "sm-01"]  # priority 14 (standby), then 15 (master)
    confs = {}
    for h, s in sms.items():
        confs[h] = tmp_path / f"{h}.conf"
        confs[h].write_text(render_opensm_conf(plan, priority=s.priority, etc_dir=str(tmp_path),
                                               log_file=str(tmp_path / f"{h}.log")))
    port = {h: f"{h} {s.hca}" for h, s in sms.items()}
    net = (tmp_path / "topology.net").read_text()
    with SimFabric(tmp_path, net, sim_host=port["sm-01"]) as sim:
        procs = {}
        try:
            # First bring-up, in that order.
            for h in order:
                procs[h] = sim.start_opensm(confs[h], port[h])
                run = _role_wait(sim, port[h], h == "sm-01", 60)
                assert run.returncode == 0, run.stderr[-1000:]
                assert "is back: SMINFO_MASTER" in run.stdout  # sm-02 alone, then sm-01
            deadline = time.monotonic() + 60
            while sim.sm_state(port["sm-02"]) != "SMINFO_STANDBY":
                assert time.monotonic() < deadline, "sm-02 never handed over to sm-01"
                time.sleep(1)
            # A change: the standby restarts first and comes back STANDBY under the master.
            sim.stop(procs["sm-02"])
            procs["sm-02"] = sim.start_opensm(confs["sm-02"], port["sm-02"])
            run = _role_wait(sim, port["sm-02"], False, 60)
            assert run.returncode == 0 and "is back: SMINFO_STANDBY" in run.stdout, run
            assert sim.sm_state(port["sm-01"]) == "SMINFO_MASTER"
            # The master's wait is strict: a standby never passes it.
            run = _role_wait(sim, port["sm-02"], True, 10)
            assert run.returncode == 1
            assert "is SMINFO_STANDBY 10 s after its restart, not MASTER" in run.stderr
        finally:
            for proc in procs.values():
                sim.stop(proc)


# ---------------------------------------------------------------- management keys

# Test values only; a stack's keys are the fabricMKey/fabricSmKey/fabricSaKey secrets.
KEYS = ("0x9e3779b97f4a7c15", "0x6a09e667f3bcc908", "0xbb67ae8584caa73b")


def _keyed_conf(plan: FabricPlan, path: Path, keys: tuple[str, ...], priority: int) -> Path:
    """The SM host's opensm.conf as `pulumi up` installs it: the rendering plus the keys."""
    path.write_text(render_opensm_conf(plan, priority=priority, etc_dir=str(path.parent),
                                       log_file=str(path) + ".log")
                    + sm_keys_conf(keys) + "\n"
                    + "force_log_flush TRUE\n")  # the test reads the log while opensm runs
    return path


def _wait_log(log: Path, needle: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while needle not in log.read_text():
        assert time.monotonic() < deadline, f"{needle!r} never in {log.name}"
        time.sleep(0.5)


def _wait_state(sim: SimFabric, port: str, want: str, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while (state := sim.sm_state(port)) != want and time.monotonic() < deadline:
        time.sleep(1)
    return state


def test_management_keys_on_the_real_subnet_manager(tmp_path: Path) -> None:
    """The rendered opensm.conf with the keys appended, on opensm in ibsim: it routes with
    ftree and logs no error; an SA query carrying a wrong SA_Key is dropped (ERR 1A04) while
    one with the SA_Key, or with none, is answered; and an SM on a compute HCA (what a pod
    with the HCA's umad could start) at the highest priority and a lower GUID wins the
    election only when it holds the SM_Key: with another key the master ignores it (ERR 2F18)
    and stays master. ibsim 0.10's SMA has no M_Key check, so the port-side refusal of Sets
    without the M_Key is the hardware's (IBA 14.2.4); here opensm is shown to load level 2."""
    plan = _prod_plan()
    write_fabric(plan, tmp_path)
    master = f"{plan.sm[0].hostname} {plan.sm[0].hca}"
    tenant = f"{plan.nodes[2].hostname} {plan.nodes[2].rails[0].hca}"
    conf = _keyed_conf(plan, tmp_path / "sm-01.conf", KEYS, 15)
    assert "m_key_protection_level 2\n" in conf.read_text()
    with SimFabric(tmp_path, (tmp_path / "topology.net").read_text(), sim_host=master) as sim:
        with sim.running_opensm(conf):
            log = Path(str(conf) + ".log")
            _wait_log(log, "SUBNET UP", 60)
            assert "ftree tables configured on all switches" in log.read_text()
            assert [ln for ln in log.read_text().splitlines() if " ERR " in ln] == []
            lids = {n.desc: n.lid for n in parse_ibnetdiscover(sim.ibnetdiscover()).nodes.values()}
            query = ["saquery", "PIR", str(lids[tenant])]
            assert sim.run_on(tenant, query, 20).returncode == 0  # untrusted, answered
            assert sim.run_on(tenant, [*query, "--smkey", KEYS[2]], 20).returncode == 0
            assert sim.run_on(tenant, [*query, "--smkey", "0x1"], 20).returncode != 0
            assert f"ERR 1A04: Non-Zero MAD SM_Key: 0x1 != SM_Key: {KEYS[2]}" in log.read_text()

            # A rogue SM with another SM_Key: ignored, the master stays master.
            rogue = sim.start_opensm(_keyed_conf(plan, tmp_path / "rogue.conf",
                                                 ("0x2", "0x3", "0x4"), 15), tenant)
            try:
                _wait_log(log, "ERR 2F18", 30)
                time.sleep(plan.spec.sm_sweep_interval + 2)  # a full sweep later
                assert sim.sm_state(master) == "SMINFO_MASTER"
            finally:
                sim.stop(rogue)
            # The same SM holding the SM_Key wins (the GUID breaks the tie): the key decides.
            peer = sim.start_opensm(_keyed_conf(plan, tmp_path / "peer.conf", KEYS, 15), tenant)
            try:
                assert _wait_state(sim, master, "SMINFO_STANDBY", 60) == "SMINFO_STANDBY"
            finally:
                sim.stop(peer)


def test_an_sm_key_rotation_never_has_two_masters(tmp_path: Path) -> None:
    """Two real opensm on the prod fabric: sm-01 (priority 15) MASTER and sm-02 (14) STANDBY,
    both holding the keys. Restarted first with a new SM_Key, as a plain change restarts it,
    the standby ignores the old-key master (ERR 2F18 on both sides) and makes itself MASTER
    beside it. The order `pulumi up` takes for a new SM_Key (the standby's apply stops it, the
    master restarts with the new keys, the standby's rejoin starts it): one MASTER at each
    step, the standby back as STANDBY."""
    plan = _prod_plan()
    write_fabric(plan, tmp_path)
    sms = {s.hostname: s for s in plan.sm}
    port = {h: f"{h} {s.hca}" for h, s in sms.items()}
    new = (KEYS[0], "0x243f6a8885a308d3", KEYS[2])  # a new SM_Key; M_Key and SA_Key kept

    def conf(host: str, keys: tuple[str, ...], tag: str) -> Path:
        return _keyed_conf(plan, tmp_path / f"{host}-{tag}.conf", keys, sms[host].priority)

    def masters() -> list[str]:
        return sorted(h for h in sms if sim.sm_state(port[h]) == "SMINFO_MASTER")

    with SimFabric(tmp_path, (tmp_path / "topology.net").read_text(),
                   sim_host=port["sm-01"]) as sim:
        procs = {"sm-01": sim.start_opensm(conf("sm-01", KEYS, "old"), port["sm-01"])}
        try:
            assert _wait_state(sim, port["sm-01"], "SMINFO_MASTER", 60) == "SMINFO_MASTER"
            procs["sm-02"] = sim.start_opensm(conf("sm-02", KEYS, "old"), port["sm-02"])
            assert _wait_state(sim, port["sm-02"], "SMINFO_STANDBY", 60) == "SMINFO_STANDBY"
            assert masters() == ["sm-01"]

            # The hazard: the standby restarted first with the new SM_Key.
            sim.stop(procs["sm-02"])
            procs["sm-02"] = sim.start_opensm(conf("sm-02", new, "early"), port["sm-02"])
            assert _wait_state(sim, port["sm-02"], "SMINFO_MASTER", 90) == "SMINFO_MASTER"
            assert masters() == ["sm-01", "sm-02"]
            _wait_log(tmp_path / "sm-02-early.conf.log", "ERR 2F18", 30)

            # The stack's order: stop the standby ...
            sim.stop(procs.pop("sm-02"))
            assert masters() == ["sm-01"]
            # ... restart the master with the new keys (alone: MASTER, as its wait requires) ...
            sim.stop(procs["sm-01"])
            procs["sm-01"] = sim.start_opensm(conf("sm-01", new, "new"), port["sm-01"])
            run = _role_wait(sim, port["sm-01"], True, 60)
            assert run.returncode == 0 and "is back: SMINFO_MASTER" in run.stdout, run.stderr
            assert masters() == ["sm-01"]
            # ... then start the standby with them: the rejoin's wait accepts only STANDBY.
            procs["sm-02"] = sim.start_opensm(conf("sm-02", new, "new"), port["sm-02"])
            script = "set -euo pipefail\n" + "\n".join(
                sm_role_wait("ibsim0", False, 60, standby_only=True)) + "\n"
            run = sim.run_on(port["sm-02"], ["bash", "-c", script], 90)
            assert run.returncode == 0 and "is back: SMINFO_STANDBY" in run.stdout, run.stderr
            time.sleep(plan.spec.sm_sweep_interval + 2)  # a full sweep later: still one master
            assert masters() == ["sm-01"]
        finally:
            for proc in procs.values():
                sim.stop(proc)
