"""`python -m offline repair <node>`: from a sick node's conditions to the technician's steps.
The ports and cables it names are where prod's committed switch configuration says the rail
lands (its port descriptions), not read back from the code; the runbooks it points to are the
ones the day-2 scenarios check (an HCA swap, a board swap)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from support.project import REPO, run_offline

NODE = "gpu-node-03"


def _switch_port(node: str, rail: int) -> tuple[str, str, str]:
    """(switch, port, HCA) the committed switch configuration describes for the rail."""
    for path in sorted((REPO / "rendered/prod/fabric").rglob("*-config.yaml")):
        m = re.search(rf'interface ib 1/(\d+) description "{node} rail {rail} \((mlx5_\d+)\)',
                      path.read_text())
        if m:
            return path.name.removesuffix("-config.yaml"), m[1], m[2]
    raise AssertionError(f"no port describes {node} rail {rail}")


def _node(tmp: Path, *conditions: dict[str, Any], tainted: bool = True) -> Path:
    taints = [{"key": "gpucluster.io/quarantine", "value": "x", "effect": "NoSchedule"}]
    obj = {"metadata": {"name": NODE},
           "spec": {"unschedulable": True, **({"taints": taints} if tainted else {})},
           "status": {"conditions": list(conditions)}}
    path = tmp / "node.json"
    path.write_text(json.dumps(obj))
    return path


def _condition(kind: str, reason: str, message: str, status: str = "True") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def _repair(node_json: Path, node: str = NODE) -> tuple[int, str, str]:
    out = run_offline(REPO, "repair", node, "--node-json", str(node_json))
    return out.returncode, out.stdout, out.stderr


def test_a_rail_down_names_the_planned_port_and_cable_and_the_hca_swap(tmp_path: Path) -> None:
    switch, port, hca = _switch_port(NODE, 3)
    code, out, err = _repair(_node(tmp_path, _condition(
        "InfinibandRailDown", "RailPortDown", f"rail 3 {hca}: port DOWN, Disabled")))
    assert code == 0, err
    assert f"rail 3 ({hca}): {switch} port {port}, cable {switch}:{port}" in out
    assert f"`ibstat {hca}`: State Active, Physical state LinkUp, Rate 400" in out
    assert f"replace {hca}: put the new card's port GUID in the inventory row of {NODE}" in out
    assert "rail 2 " not in out  # only the rail the message names
    assert out.rstrip().endswith(f"`kubectl taint node {NODE} gpucluster.io/quarantine-` and "
                                 f"`kubectl uncordon {NODE}`")


def test_a_gpu_off_the_bus_is_a_restart_then_a_board_swap(tmp_path: Path) -> None:
    code, out, _ = _repair(_node(tmp_path, _condition(
        "GPUFallenOffBus", "GPUFellOffBus", "NVRM: Xid (PCI:0000:18:00): 79, pid=1")))
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"Repair of {NODE}:"
    assert lines[1].startswith("1. GPUFallenOffBus (GPUFellOffBus)")
    assert "restart the node (NVIDIA's Xid 79 action: RESTART_BM)" in lines[2]
    assert "replace the GPU baseboard (board swap, RMA)" in lines[3]
    assert lines[4].startswith(f"2. release {NODE}")


def test_a_healthy_node_has_nothing_to_repair(tmp_path: Path) -> None:
    code, out, _ = _repair(_node(tmp_path, _condition(
        "InfinibandRailDown", "RailsUp", "every rail is ACTIVE", status="False"),
        tainted=False))
    assert code == 0
    assert out.strip() == f"{NODE}: no condition the quarantine acts on is True: nothing to repair"


def test_the_wrong_node_object_is_refused(tmp_path: Path) -> None:
    code, _, err = _repair(_node(tmp_path), node="gpu-node-04")
    assert code == 2
    assert "repair: the node object is 'gpu-node-03', not 'gpu-node-04'" in err
