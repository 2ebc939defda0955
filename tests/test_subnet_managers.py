"""Subnet-manager changes reach the hosts one at a time: the standby first, the master last.

Restarting master and standby together leaves the fabric without a subnet manager: no sweeps,
no trap handling, no path records for new connections until one comes back. The real opensm
and sminfo show the handover and the waits (`tests/test_fabric_sim.py`); these tests hold the
plan `pulumi up` executes and the scripts it runs to that order.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.project import REPO, prod_raw

from components.planning import placement
from components.planning.subnet_manager import sm_apply_script, sm_restart_order
from components.wiring.loading import validate_cluster

FILES = {"/etc/opensm/opensm.conf": "sm_priority 15\n"}


def _plan(build: Path) -> dict[str, dict]:
    return {r["name"]: r for r in json.loads((build / "plan.json").read_text())["resources"]}


def test_pulumi_up_restarts_the_standby_before_the_master(build: Path) -> None:
    plan = _plan(build)
    master, standby = plan["sm-01-opensm"], plan["sm-02-opensm"]
    assert standby["urn"] in master["options"]["dependsOn"]
    assert master["urn"] not in standby["options"]["dependsOn"]
    sms = {s.hostname: s.priority for s in
           placement.plan(validate_cluster(prod_raw(), REPO)).sm}
    assert sms == {"sm-01": 15, "sm-02": 14}  # opensm: the highest priority is master
    assert sm_restart_order(sms) == ["sm-02", "sm-01"]


def test_each_script_waits_for_its_own_role_after_a_restart(build: Path) -> None:
    master = (build / "scripts/sm-01/apply-opensm.sh").read_text()
    standby = (build / "scripts/sm-02/apply-opensm.sh").read_text()
    for text in (master, standby):
        restart = text.index("systemctl restart opensm")
        wait = text.index("sminfo -C mlx5_0 -P 1 -D 0")
        clear = text.index("rm -f /var/lib/gpu-cluster/opensm-restart-pending", restart)
        assert restart < wait < clear  # the restart is done only once the role is back
    assert 'case "$state" in SMINFO_MASTER) break' in master
    assert 'case "$state" in SMINFO_STANDBY|SMINFO_MASTER) break' in standby


def test_without_a_restart_nothing_waits() -> None:
    """A run that installs nothing new restarts nothing and so waits for nothing: the wait
    sits inside the restart branch."""
    text = sm_apply_script(FILES, "mlx5_0", master=True)
    branch = text[text.index("if [ -e /var/lib/gpu-cluster/opensm-restart-pending ]"):
                  text.index("systemctl is-enabled")]
    assert "sminfo" in branch and text.count("sminfo") == 1
