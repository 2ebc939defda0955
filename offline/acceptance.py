"""What the NCCL acceptance gate does in a change (pure): which nodes its run needs and what it
waits for. The gate chooses at apply time (components/planning/acceptance_run.py): the nodes
that come back untested with one node of their SU that passed, two such nodes when only the
test changed, nothing when every node has passed this test."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .conventions import facts_by_name, names, resource_name, span, subject
from .diff import Change

# What the gate's workload publishes (components/planning/facts.py gate_facts).
WAIT, DEFINITION = "gateWaitMinutes", "testDefinition"


def untested() -> str:
    """The label a GPU node carries until a run passes on it (the pack's vocabulary, as the
    stack reads it), imported on first use like the names (conventions.names)."""
    from components.planning.labels import UNTESTED_LABEL

    return UNTESTED_LABEL


def gate_change(changes: Iterable[Change]) -> Change | None:
    return next((c for c in changes if c.type == "command:remote:Command"
                 and subject(c.name, names().ACCEPTANCE, c.layer)), None)


def gate_urn(new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str | None:
    return next((u for u in new_inputs or {}
                 if "command:remote:Command::" in u
                 and subject(resource_name(u), names().ACCEPTANCE)), None)


def gpu_nodes(new_inputs: Mapping[str, Mapping[str, Any]] | None) -> set[str]:
    """The GPU nodes the gate may test: those in service (components/planning/acceptance.py
    gpu_node_sus), each placed by its labels (`<host>-placement`) and none being
    decommissioned (`<host>-decommission`)."""
    v = names()
    resources = [resource_name(urn) for urn in new_inputs or {}]
    leaving = {h for r in resources if (h := subject(r, v.DECOMMISSION))}
    return {h for r in resources if (h := subject(r, v.PLACEMENT)) and h not in leaving}


def _wait(urn: str | None, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    """How long the gate of `urn` waits for its run's GPUs, as its workload publishes it."""
    test = subject(resource_name(urn or ""), names().ACCEPTANCE) or ""
    wait = (facts_by_name(new_inputs, names().WORKLOAD_TYPE).get(test) or {}).get(WAIT)
    return f"{wait} min" if wait else "the test's timeout"


def _test_changed(changes: Sequence[Change], gate: Change) -> bool:
    """Whether the test's definition (the MPIJob the runs copy) changes with the gate."""
    test = subject(gate.name, names().ACCEPTANCE, gate.layer)
    return any(c.type == names().WORKLOAD_TYPE and c.name == test
               and f"facts.{DEFINITION}" in c.values for c in changes)


def _them(hosts: Sequence[str]) -> tuple[str, str]:
    return ("it", "it stays") if len(hosts) == 1 else ("them", "they stay")


def acceptance_line(changes: Sequence[Change], new_inputs: Mapping[str, Mapping[str, Any]] | None,
                    untested: Sequence[str], recabled: Sequence[str] = ()) -> str | None:
    """The impact's line for the gate's run, if the change runs the gate. `untested`: the GPU
    nodes that join (or re-join on a new board) carrying the untested label; `recabled`: those
    marked untested while cordoned, whose run comes after their uncordon (recabled_line)."""
    gate = gate_change(changes)
    if gate is None or gate.action == "delete":
        return None
    if gate.action == "create":
        return ("  acceptance test: a first run, on every GPU node: all their GPUs; work lands "
                "on a node only once it passed")
    wait = _wait(gate.urn, new_inputs)
    if untested:
        them, they = _them(untested)
        peers = ("together (no node that passed before is in service)"
                 if gpu_nodes(new_inputs) <= {*untested, *recabled}
                 else "with one GPU node of each SU that passed before (a free one if any)")
        return (f"  acceptance test: {span(untested, 3)} untested (no training or serving lands "
                f"there) until a run passes on {them} {peers}: up to {wait} for its GPUs, else "
                f"`pulumi up` fails and {they} closed to work")
    if _test_changed(changes, gate):
        return ("  acceptance test: the test changed: a run on two GPU nodes of one SU that "
                f"passed before (free ones if any), up to {wait} for their GPUs; every node "
                "again is a maintenance window (docs/acceptance.md)")
    if recabled:
        return None
    return "  acceptance test: re-checked, nothing to run (every GPU node has passed this test)"


def _rerun(new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    urn = gate_urn(new_inputs)
    return f"pulumi up --replace '{urn}'" if urn else "re-run the acceptance gate"


def mark_untested(hosts: Sequence[str]) -> str:
    return f"kubectl label node {' '.join(hosts)} {untested()}=true"


def retest_step(host: str, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    """How to put a drained node back through the gate (a re-seated HCA): marked untested
    before it is uncordoned, so no new work lands there until a run passed on it."""
    return (f"{mark_untested([host])}, then kubectl uncordon {host} and "
            f"`{_rerun(new_inputs)}`: the gate tests {host} with a node that passed before and "
            "opens it to work")


def _peers(hosts: Sequence[str], new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    """Whom a re-run tests them with: a passed node of each SU, or each other when none passed
    remains (every GPU node re-cabled: all their GPUs at once)."""
    if gpu_nodes(new_inputs) <= set(hosts):
        return "together (every GPU node: all their GPUs, a maintenance window)"
    return "with one GPU node of each SU that passed before (a free one if any)"


def recabled_line(hosts: Sequence[str], new_inputs: Mapping[str, Mapping[str, Any]] | None
                  ) -> str:
    """The impact's line for GPU nodes whose links are re-made in place (cables moved, a new
    switch): the runbook marks them untested at their drain and re-runs the gate after their
    uncordon, so their new links are tested before work lands there again."""
    _, they = _them(hosts)
    return (f"  acceptance test: {span(hosts, 3)} re-cabled: marked untested at the drain (no "
            f"training or serving lands there), tested after the uncordon by a re-run of the "
            f"gate {_peers(hosts, new_inputs)}: up to "
            f"{_wait(gate_urn(new_inputs), new_inputs)} for "
            f"{'its' if len(hosts) == 1 else 'their'} GPUs, else {they} closed to work")


def recabled_check(hosts: Sequence[str], new_inputs: Mapping[str, Mapping[str, Any]] | None
                   ) -> str:
    """The runbook's step that tests re-cabled nodes once they are uncordoned."""
    them, _ = _them(hosts)
    return (f"test the re-cabled {span(hosts, 3)}, uncordoned but untested: `{_rerun(new_inputs)}`"
            f" runs the acceptance gate on {them} {_peers(hosts, new_inputs)} and opens {them} "
            "to work")
