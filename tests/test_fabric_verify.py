"""Plan-vs-discovered verifier on edited topologies (no simulator needed) and its CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fabric_sim import PROD_SMS, Faults, cluster, prod_spec

from components.planning.fabric import (
    FabricPlan,
    Report,
    parse_ibnetdiscover,
    plan_fabric,
    render_fabric_files,
    render_topology_net,
    verify_plan,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def prod() -> FabricPlan:
    return plan_fabric(cluster(8), PROD_SMS, prod_spec())


@pytest.fixture(scope="module")
def prod7() -> FabricPlan:
    """prod with slot 7 empty: free leaf ports for a stray cable."""
    return plan_fabric(cluster(7), PROD_SMS, prod_spec())


def faults(plan: FabricPlan) -> Faults:
    return Faults(parse_ibnetdiscover(render_topology_net(plan)))


def kinds(report: Report) -> list[str]:
    return [f.kind for f in report.findings]


def test_clean_fabric(prod: FabricPlan) -> None:
    report = verify_plan(prod, faults(prod).net())
    assert report.ok, report.text()
    assert "fabric matches the plan" in report.text()
    assert (report.planned_links, report.discovered_links) == (130, 130)


def test_rails_swapped_on_one_node(prod: FabricPlan) -> None:
    r0, r1 = prod.placement("gpu-node-02").rails[:2]
    net = faults(prod).swap((r0.leaf, r0.leaf_port), (r1.leaf, r1.leaf_port)).net()
    report = verify_plan(prod, net)
    assert kinds(report) == ["MISWIRE", "MISWIRE"]
    texts = report.text()
    assert "leaf-su1-r0-3 port 3: found leaf-su1-r0-3 port 3 <-> gpu-node-02 rail 1 (mlx5_3)" \
        in texts
    assert "plan: leaf-su1-r0-3 port 3 <-> gpu-node-02 rail 0 (mlx5_0)" in texts


def test_uplinks_swapped(prod: FabricPlan) -> None:
    net = faults(prod).swap(("leaf-su1-r0-3", 33), ("leaf-su1-r0-3", 49)).net()
    report = verify_plan(prod, net)
    assert kinds(report) == ["MISWIRE", "MISWIRE"]
    assert {f.where for f in report.findings} == {"leaf-su1-r0-3 port 33",
                                                  "leaf-su1-r0-3 port 49"}
    assert "leaf-su1-r0-3 port 33 <-> spine-02 port 1" in report.findings[0].found


def test_uplink_missing(prod: FabricPlan) -> None:
    report = verify_plan(prod, faults(prod).drop(("leaf-su1-r4-7", 64)).net())
    assert kinds(report) == ["MISSING_CABLE"]
    assert report.findings[0].expected == "leaf-su1-r4-7 port 64 <-> spine-02 port 32"


def test_leaf_to_leaf_cross_link_on_free_ports(prod7: FabricPlan) -> None:
    net = faults(prod7).add(("leaf-su1-r0-3", 8), ("leaf-su1-r4-7", 8)).net()
    report = verify_plan(prod7, net)
    assert kinds(report) == ["EXTRA_CABLE"]
    assert report.findings[0].found == "leaf-su1-r0-3 port 8 <-> leaf-su1-r4-7 port 8"


def test_leaf_uplinks_cabled_to_each_other(prod: FabricPlan) -> None:
    f = faults(prod).drop(("leaf-su1-r0-3", 64)).drop(("leaf-su1-r4-7", 64))
    report = verify_plan(prod, f.add(("leaf-su1-r0-3", 64), ("leaf-su1-r4-7", 64)).net())
    assert kinds(report) == ["MISWIRE"]
    assert report.findings[0].expected == ("leaf-su1-r0-3 port 64 <-> spine-02 port 16; "
                                           "leaf-su1-r4-7 port 64 <-> spine-02 port 32")


def test_hca_cabled_to_a_spine(prod: FabricPlan) -> None:
    f = faults(prod).drop(("leaf-su1-r0-3", 1)).add(("gpu-node-00 mlx5_0", 1), ("spine-01", 40))
    report = verify_plan(prod, f.net())
    assert kinds(report) == ["MISWIRE"]
    finding = report.findings[0]
    assert finding.where == "spine-01 port 40"
    assert finding.found == "spine-01 port 40 <-> gpu-node-00 rail 0 (mlx5_0)"
    assert "gpu-node-00 rail 0 (mlx5_0) <-> leaf-su1-r0-3 port 1" in finding.expected


def test_missing_node(prod: FabricPlan) -> None:
    report = verify_plan(prod, faults(prod).remove_host("gpu-node-05").net())
    assert kinds(report) == ["MISSING_NODE"]
    assert report.findings[0].where == "gpu-node-05"
    assert "8 of 8 HCA ports" in report.findings[0].found
    assert "gpu-node-05 rail 7 (mlx5_11) on leaf-su1-r4-7 port 30" in report.findings[0].expected


def test_unexpected_node_and_placeholder_matching(prod: FabricPlan) -> None:
    # Real GUIDs differ from the plan's placeholders: nodes are matched by description.
    real = plan_fabric(cluster(8, real_guids=True), PROD_SMS, prod_spec())
    assert verify_plan(prod, render_topology_net(real)).ok
    bigger = plan_fabric(cluster(8) + [cluster(9)[8]], PROD_SMS, prod_spec())
    report = verify_plan(prod, render_topology_net(bigger))
    assert "UNEXPECTED_NODE" in kinds(report)


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
    ok = subprocess.run(cli + ["--plan", str(tmp_path / "fabric"), "--discovered", str(good)],
                        capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    nok = subprocess.run(cli + ["--plan", str(tmp_path / "fabric" / "topology.net"),
                                "--discovered", str(bad)],
                         capture_output=True, text=True, check=False)
    assert nok.returncode == 1
    assert "2 MISWIRE" in nok.stdout and "gpu-node-00 rail 1 (mlx5_3)" in nok.stdout
    missing = subprocess.run(cli + ["--plan", str(tmp_path), "--discovered", str(good)],
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 2
