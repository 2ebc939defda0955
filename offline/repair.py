"""`python -m offline repair <node>`: what a technician does for a node the health checks found
unfit, from the node's live conditions and the stack's plan (docs/health.md, "From fault to
repair").

The node comes from `--node-json` (what `kubectl get node <node> -o json` printed) or, with
`--kubeconfig`, from the cluster. Each True condition node-problem-detector set gives its steps:
a rail names the leaf switch port, the cable and the node's cage and port the fabric plan put
there; a fix the stack already writes a runbook for (an HCA swap, a board swap) says which
inventory edit makes the preview print it. The last step always releases the node."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Rail:
    """One rail of the node as planned (health.rails_files' row)."""

    rail: int
    hca: str
    switch: str
    port: str
    cable: str
    node_port: str

    def where(self) -> str:
        return (f"rail {self.rail} ({self.hca}): {self.switch} port {self.port}, cable "
                f"{self.cable}, node port {self.node_port}")


def rails(text: str) -> dict[int, Rail]:
    out = {}
    for line in text.splitlines():
        rail, hca, switch, port, cable, node_port = line.split("\t")
        out[int(rail)] = Rail(int(rail), hca, switch, port, cable, node_port)
    return out


_RAIL = re.compile(r"\brail (\d+)\b")


def _named_rails(message: str, planned: Mapping[int, Rail]) -> list[Rail]:
    """The rails a condition's message names (every planned rail when it names none)."""
    named = sorted({int(m) for m in _RAIL.findall(message)} & set(planned))
    return [planned[r] for r in named] or list(planned.values())


def _board(node: str) -> str:
    return (f"if it comes back after that: replace the GPU baseboard (board swap, RMA). Put the "
            f"new board's management MAC and host key in the inventory row of {node} and run "
            "`make preview`: its runbook gives the board swap's steps (drain, power off, swap, "
            "re-seat every cable where it was, `pulumi up`)")


def _rail_steps(node: str, condition: str, message: str, planned: Mapping[int, Rail],
                gbps: int) -> list[str]:
    steps = []
    for r in _named_rails(message, planned):
        steps.append(f"{r.where()}: re-seat the cable at both ends (the switch port and the "
                     f"node's cage), then check the port on the node (`ibstat {r.hca}`: State "
                     f"Active, Physical state LinkUp, Rate {gbps})")
        steps.append(f"  if it stays {'down' if condition == 'InfinibandRailDown' else 'so'}: "
                     f"replace cable {r.cable} (the bill of materials names its part), then "
                     f"the transceivers; if the node's port is at fault, replace {r.hca}: put "
                     f"the new card's port GUID in the inventory row of {node}, rail {r.rail}, "
                     "and run `make preview`: its runbook gives the HCA swap's steps and the "
                     "subnet managers' files that change")
    steps.append("then `make verify-fabric` checks every link against the plan")
    return steps


STEPS: dict[str, str] = {
    "GPUFallenOffBus": "restart the node (NVIDIA's Xid 79 action: RESTART_BM); check its GPUs "
                       "with `nvidia-smi` after the boot",
    "GPUNeedsReset": "reset the GPU (`nvidia-smi -r -i <gpu>` with nothing running on it) or "
                     "restart the node; a row remap failure (Xid 64) is an RMA of that GPU",
    "GPUHealthFailure": "read DCGM's finding (`dcgmi health -c -g <group>`), then run its "
                        "diagnostic (`dcgmi diag -r 3`) and act on the failed test",
    "NVLinkDown": "restart nvidia-fabricmanager, then the node; check "
                  "`nvidia-smi nvlink --status` shows every link active",
    "NVSwitchFabricNotReady": "restart nvidia-fabricmanager (`systemctl restart "
                              "nvidia-fabricmanager`), then check `nvidia-smi -q` shows each "
                              "GPU's fabric state Completed",
    "RAIDDegraded": "replace the failed NVMe drive (the message names the array; `mdadm "
                    "--detail` the member); `pulumi up` re-runs the node's preparation, which "
                    "builds the scratch array again, empty (checkpoints and datasets are on "
                    "Lustre and are not affected)",
}
BOARD_AFTER = {"GPUFallenOffBus", "GPUNeedsReset", "NVLinkDown", "NVSwitchFabricNotReady"}
RAIL_CONDITIONS = ("InfinibandRailDown", "InfinibandRailDegraded", "InfinibandRailErrors")


def repair_steps(node: Mapping[str, Any], planned: Mapping[int, Rail], gbps: int,
                 taint: str) -> list[str]:
    """For each True condition the quarantine acts on, a step (indented lines: its parts),
    then the release (`taint`: the quarantine's). No True condition: nothing to repair."""
    name = node["metadata"]["name"]
    found = [c for c in node.get("status", {}).get("conditions", [])
             if c.get("status") == "True" and (c["type"] in STEPS or c["type"] in RAIL_CONDITIONS)]
    steps: list[str] = []
    for c in found:
        head = f"{c['type']} ({c.get('reason', '')}): {c.get('message', '')}".strip()
        steps.append(head)
        if c["type"] in RAIL_CONDITIONS:
            steps += [f"  {s}" for s in _rail_steps(name, c["type"], c.get("message", ""),
                                                    planned, gbps)]
            continue
        steps.append(f"  {STEPS[c['type']]}")
        if c["type"] in BOARD_AFTER:
            steps.append(f"  {_board(name)}")
    if not found:
        return []
    tainted = any(t.get("key") == taint for t in node.get("spec", {}).get("taints") or [])
    steps.append(f"release {name} once the conditions above read False (the checks clear on "
                 "their next run; the kernel's after the restart): "
                 + (f"`kubectl taint node {name} {taint}-`" if tainted else
                    "it carries no quarantine taint")
                 + (f" and `kubectl uncordon {name}`" if node.get("spec", {}).get(
                     "unschedulable") else ""))
    return steps


def _node(name: str, node_json: str | None, kubeconfig: str | None) -> dict[str, Any]:
    if node_json is not None:
        return dict(json.loads(Path(node_json).read_text()))
    out = subprocess.run(["kubectl", *([f"--kubeconfig={kubeconfig}"] if kubeconfig else []),
                          "get", "node", name, "-o", "json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise ValueError(f"kubectl get node {name}: {out.stderr.strip()}")
    return dict(json.loads(out.stdout))


def main(project: Path, stack: str, name: str, node_json: str | None,
         kubeconfig: str | None) -> int:
    # Imported here: the program's own `components` package is the first this process imports.
    from components.model.fields import ConfigError
    from components.planning import health
    from components.planning.quarantine import TAINT
    from components.wiring.loading import validate_cluster

    from .stackconfig import load_stack_config

    try:
        raw = json.loads(load_stack_config(project, stack).config["gpu-cluster:cluster"])
        cluster = validate_cluster(raw, project)
        node = _node(name, node_json, kubeconfig)
    except (ConfigError, ValueError, OSError) as err:
        print(f"repair: {err}", file=sys.stderr)
        return 2
    if node.get("metadata", {}).get("name") != name:
        print(f"repair: the node object is {node.get('metadata', {}).get('name')!r}, not "
              f"{name!r}", file=sys.stderr)
        return 2
    planned = rails(health.rails_files(cluster).get(name, ""))
    steps = repair_steps(node, planned, cluster.gpu_nodes.template.link_gbps, TAINT)
    if not steps:
        print(f"{name}: no condition the quarantine acts on is True: nothing to repair")
        return 0
    print(f"Repair of {name}:")
    number = 0
    for step in steps:
        if not step.startswith("  "):
            number += 1
        print(step if step.startswith("  ") else f"{number}. {step}")
    return 0
