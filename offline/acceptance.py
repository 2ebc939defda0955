"""What the NCCL acceptance gate does in a change (pure): which nodes its run needs and what it
waits for. The gate chooses at apply time (components/planning/acceptance_run.py): the nodes
that come back untested with one node of their SU that passed, two such nodes when only the
test changed, nothing when every node has passed this test."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .conventions import span
from .diff import Change

GATE = "-acceptance"  # the gate command: <test>-acceptance, in the workloads layer
# The gate's own words for how long it waits for its run's GPUs (scripts/acceptance/gate.sh).
WAIT = re.compile(r"were not free within (\d+) minutes")
UNTESTED = "gpucluster.io/untested"  # components/planning/labels.py UNTESTED_LABEL


def gate_change(changes: Iterable[Change]) -> Change | None:
    return next((c for c in changes if c.type == "command:remote:Command"
                 and c.layer == "workloads" and c.name.endswith(GATE)), None)


def gate_urn(new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str | None:
    return next((u for u in new_inputs or {}
                 if u.endswith(GATE) and "command:remote:Command::" in u), None)


def gpu_nodes(new_inputs: Mapping[str, Mapping[str, Any]] | None) -> set[str]:
    """The GPU nodes the gate may test (its --gpu-nodes host=su list)."""
    stdin = str((new_inputs or {}).get(gate_urn(new_inputs) or "", {}).get("stdin", ""))
    m = re.search(r"--gpu-nodes '?([\w.-]+=[^' \\]+)", stdin)
    return {pair.split("=")[0] for pair in m.group(1).split(",")} if m else set()


def _wait(gate: Change, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    m = WAIT.search(str((new_inputs or {}).get(gate.urn, {}).get("stdin", "")))
    return f"{m.group(1)} min" if m else "the test's timeout"


def acceptance_line(changes: Sequence[Change], new_inputs: Mapping[str, Mapping[str, Any]] | None,
                    untested: Sequence[str]) -> str | None:
    """The impact's line for the gate's run, if the change runs the gate. `untested`: the GPU
    nodes that join (or re-join on a new board) carrying the untested label."""
    gate = gate_change(changes)
    if gate is None or gate.action == "delete":
        return None
    if gate.action == "create":
        return ("  acceptance test: a first run, on every GPU node: all their GPUs; work lands "
                "on a node only once it passed")
    wait = _wait(gate, new_inputs)
    if untested:
        them, they = ("it", "it stays") if len(untested) == 1 else ("them", "they stay")
        return (f"  acceptance test: {span(untested, 3)} untested (no training or serving lands "
                f"there) until a run passes on {them} with one GPU node of each SU that passed "
                f"before (a free one if any): up to {wait} for its GPUs, else `pulumi up` fails "
                f"and {they} closed to work")
    if any("--definition " in line for line in gate.text_diffs.get("stdin", [])):
        return ("  acceptance test: the test changed: a run on two GPU nodes of one SU that "
                f"passed before (free ones if any), up to {wait} for their GPUs; every node "
                "again is a maintenance window (docs/acceptance.md)")
    return "  acceptance test: re-checked, nothing to run (every GPU node has passed this test)"


def retest_step(host: str, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    """How to put a drained node back through the gate (a re-seated HCA): marked untested
    before it is uncordoned, so no new work lands there until a run passed on it."""
    urn = gate_urn(new_inputs)
    rerun = f"pulumi up --replace '{urn}'" if urn else "re-run the acceptance gate"
    return (f"kubectl label node {host} {UNTESTED}=true, then kubectl uncordon {host} and "
            f"`{rerun}`: the gate tests {host} with a node that passed before and opens it to "
            "work")
