"""A flapping rail, from the simulated fabric to node-problem-detector: ibsim runs prod's fabric
(the rendered topology.net), opensm from sm-01 brings every port up, and the link of one node's
rail is unlinked and linked again on ibsim's console, a few times. What the simulated HCA port
shows, read as on the node (`smpquery portinfo` and `perfquery` through the umad2sim preload,
attached at that HCA), is written where the kernel shows it
(/sys/class/infiniband/<hca>/ports/1: `state`, `phys_state`, `counters/`) in the node's stand-in
host (twin/node_health.py), and the real node-problem-detector runs the planned checks over
it every second.

What ibsim 0.10 does, seen here and in its source (ibsim/sim_cmd.c, unlink_port): `Unlink`
puts both ends of the link Down/Polling; `ReLink` brings them to Initialize/LinkUp, where they
stay until the subnet manager's next sweep makes them Active. It counts nothing on the way:
LinkDownedCounter stays 0 (no code path of ibsim increments it; only the PMA's clear and the
console's `PerformanceSet` change it). A ConnectX port's PMA counts every link-down, so at each
`Unlink` the test sets the count the HCA would have with ibsim's own `PerformanceSet`, and
reads it back through `perfquery` like every other value. The rate stays the planned one:
ibsim 0.10 knows no NDR (its links run 4xHDR, ibsim.md), so it has nothing to say about it.

The detector must report `InfinibandRailDown` (RailPortDown) for each flap while the port is
down and until the SM has made it Active again, and `InfinibandRailErrors`
(RailErrorCountersRising, "link_downed rose by 1") for each link-down counted (its next check,
while the port is still down: the counter rises when the link goes), each message naming the
rail's planned leaf port and cable; once the flapping stops, both clear."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from support.fabric_sim import SimFabric, skip_reason, write_fabric
from support.node_health import Detector, detector, npd_binary
from support.project import REPO, prod_raw

from components.planning import placement
from components.planning.fabric import parse_ibnetdiscover
from components.wiring.loading import validate_cluster
from twin.node_health import FixtureNode, lay_out_host

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]

NODE, RAIL, FLAPS = "gpu-node-03", 5, 3
WAIT_S = 60  # for the detector to run a check and change a condition, on a loaded machine
# smpquery's names for the port's states -> the kernel's sysfs text
# (drivers/infiniband/core/sysfs.c: state_show, phys_state_show).
LINK_STATES = {"Down": "1: DOWN", "Initialize": "2: INIT", "Armed": "3: ARMED",
               "Active": "4: ACTIVE"}
PHYS_STATES = {"Sleep": "1: Sleep", "Polling": "2: Polling", "Disabled": "3: Disabled",
               "PortConfigurationTraining": "4: PortConfigurationTraining",
               "LinkUp": "5: LinkUp", "LinkErrorRecovery": "6: LinkErrorRecovery",
               "PhyTest": "7: Phy Test"}
# perfquery's PortCounters -> the kernel's counters/ files.
COUNTERS = {"SymbolErrorCounter": "symbol_error", "LinkDownedCounter": "link_downed",
            "LocalLinkIntegrityErrors": "local_link_integrity_errors",
            "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors"}
_FIELD = re.compile(r"^(\w+):\.+(.*)$", re.M)
_CHANGE = re.compile(r'Node condition (\w+) is now: (\w+), reason: (\w+), message: "(.*?)"')


class Bridge:
    """The simulated HCA port as the node's kernel shows it: each `sync` reads the port
    through ibsim and writes it into the stand-in host's sysfs."""

    def __init__(self, sim: SimFabric, desc: str, fixture: FixtureNode, hca: str) -> None:
        self.sim, self.desc, self.fixture, self.hca = sim, desc, fixture, hca

    def read(self) -> dict[str, str]:
        """PortInfo of the port (a directed route to itself) and its PortCounters."""
        out = {}
        for args in (["smpquery", "-D", "portinfo", "0", "1"], ["perfquery"]):
            res = self.sim.run_on(self.desc, args, 30)
            assert res.returncode == 0, f"{' '.join(args)}: {res.stderr[-500:]}"
            out |= dict(_FIELD.findall(res.stdout))
        return out

    def sync(self) -> dict[str, str]:
        seen = self.read()
        self.fixture.port_state(self.hca, LINK_STATES[seen["LinkState"]],
                                PHYS_STATES[seen["PhysLinkState"]])
        for field, counter in COUNTERS.items():
            self.fixture.set_counter(self.hca, counter, int(seen[field]))
        return {k: seen[k] for k in ("LinkState", "PhysLinkState", *COUNTERS)}

    def until(self, state: str, phys: str) -> dict[str, str]:
        """Synced once ibsim shows the port `state`/`phys` (a console command has run)."""
        deadline = time.monotonic() + 30
        while (seen := self.sync())["LinkState"] != state or seen["PhysLinkState"] != phys:
            assert time.monotonic() < deadline, f"ibsim shows {seen}, not {state}/{phys}"
            time.sleep(0.1)
        return seen


def _gauge(npd: Detector, reason: str, condition: str) -> float | None:
    return npd.problems().get(("problem_gauge", reason, condition))


def _changes(npd: Detector) -> list[tuple[str, str, str, str]]:
    """Each condition change the detector logged: (type, status, reason, message)."""
    return _CHANGE.findall(npd.log_text())


def _raised(npd: Detector, condition: str) -> list[str]:
    return [m for t, s, _, m in _changes(npd) if t == condition and s == "True"]


def test_a_flapping_rail_is_down_while_down_and_each_link_down_is_counted(tmp_path: Path) -> None:
    cluster = validate_cluster(prod_raw(), REPO)
    plan = placement.plan(cluster)
    conf = write_fabric(plan, tmp_path / "fabric")
    net = (tmp_path / "fabric" / "topology.net").read_text()
    host = lay_out_host(cluster, NODE, tmp_path / NODE, interval_s=1)
    hca = host.rails()[RAIL]
    desc = f"{NODE} {hca}"
    nodeid = next(n.nodeid for n in parse_ibnetdiscover(net).nodes.values() if n.desc == desc)
    leaf, port, cable, node_port = next(
        row.split("\t")[2:] for row in (host.config / "rails" / NODE).read_text().splitlines()
        if row.startswith(f"{RAIL}\t"))
    where = f"({leaf} port {port}, cable {cable}, node port {node_port})"
    sm = f"{plan.sm[0].hostname} {plan.sm[0].hca}"
    env = {**host.fixture.env(NODE, os.environ["PATH"]), "HOME": str(host.config)}
    kernel, custom = host.monitors()
    binary = npd_binary()
    with SimFabric(tmp_path / "fabric", net, sim_host=sm, console=True) as sim:
        assert sim.opensm(conf).engine == "ftree"
        bridge = Bridge(sim, desc, host.fixture, hca)
        assert bridge.sync() == {"LinkState": "Active", "PhysLinkState": "LinkUp",
                                 **dict.fromkeys(COUNTERS, "0")}
        with detector(binary, [kernel], custom, NODE, env, tmp_path / "npd.log",
                      limit_s=300) as npd:
            npd.wait_for(lambda p: _gauge(npd, "RailPortDown", "InfinibandRailDown") == 0
                         and _gauge(npd, "RailErrorCountersRising", "InfinibandRailErrors") == 0,
                         WAIT_S)
            assert _raised(npd, "InfinibandRailDown") == []
            for flap in range(1, FLAPS + 1):
                _flap(sim, bridge, npd, nodeid, flap, conf)
            # The flapping stopped: the counter stays, and both conditions clear.
            npd.wait_for(lambda p: _gauge(npd, "RailErrorCountersRising",
                                          "InfinibandRailErrors") == 0, WAIT_S)
            assert _gauge(npd, "RailPortDown", "InfinibandRailDown") == 0
            down, errors = _raised(npd, "InfinibandRailDown"), _raised(npd, "InfinibandRailErrors")
    assert down == [f"rail {RAIL} {hca}: port DOWN, Polling {where}"] * FLAPS
    assert errors == [f"rail {RAIL} {hca}: link_downed rose by 1 {where}"] * FLAPS


def _flap(sim: SimFabric, bridge: Bridge, npd: Detector, nodeid: str, flap: int,
          conf: Path) -> None:
    """One flap: the link goes (the HCA counts a link-down), the detector finds the rail
    down; it comes back to LinkUp, still no rail until the SM's sweep makes it Active; then
    the detector finds it up again."""
    sim.console(f'Unlink "{nodeid}"[1]')
    sim.console(f'PerformanceSet "{nodeid}"[1] PortCounters.LinkDownedCounter={flap}')
    assert bridge.until("Down", "Polling")["LinkDownedCounter"] in (str(flap - 1), str(flap))
    deadline = time.monotonic() + 30
    while bridge.sync()["LinkDownedCounter"] != str(flap):
        assert time.monotonic() < deadline, "PerformanceSet did not take"
        time.sleep(0.1)
    npd.wait_for(lambda p: _gauge(npd, "RailPortDown", "InfinibandRailDown") == 1, WAIT_S)
    assert _gauge(npd, "RailPortDown", "InfinibandRailDown") == 1, npd.log_text()[-2000:]
    sim.console(f'ReLink "{nodeid}"[1]')
    bridge.until("Initialize", "LinkUp")
    time.sleep(2.5)  # two runs of the checks over a port at LinkUp but not Active
    assert _gauge(npd, "RailPortDown", "InfinibandRailDown") == 1
    assert sim.opensm(conf).engine == "ftree"  # the SM's sweep
    bridge.until("Active", "LinkUp")
    npd.wait_for(lambda p: _gauge(npd, "RailPortDown", "InfinibandRailDown") == 0, WAIT_S)
    assert _gauge(npd, "RailPortDown", "InfinibandRailDown") == 0, npd.log_text()[-2000:]
