"""Node health in the twin, from a node's files to its repair: node-problem-detector runs as a
process per GPU node (twin/node_health.py), a fault is written into a node's stand-in host, the
detector sets its condition on the Node, the control planes' quarantine program runs as its
own identity, and the real Training Operator and Volcano do the rest.

An Xid 79 in the kernel log of a node running a training rank: `GPUFallenOffBus`, a drain; the
gang must stop whole and come back whole, away from the sick node, and nothing of it may run
split meanwhile. A rail at 1X on another node of the gang: `InfinibandRailDegraded`, a taint
only; its ranks keep running. For both, `python -m offline repair` with the twin's kubeconfig
must name the fix: the planned leaf port and cable of the rail, the restart and the board swap
for the GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any

from components.planning import quarantine
from components.planning.quarantine_setup import QUARANTINE_USER, quarantine_rbac

from .controlplane import TOKEN, ControlPlane
from .node_health import DETECT_S, Detectors, SimulatedHost

PROGRAM = Path(quarantine.__file__)
REPO = Path(__file__).resolve().parent.parent
WAIT_S = 240  # for the operator to stop every rank, and for Volcano to place the gang again
PASS_S = 300  # for one pass of the program (a drain waits at most drainTimeoutSeconds)
# The faults: NVRM's line for GPU 1 of a DGX H100 (bus 2A) falling off the bus, and rail 5 left
# with one lane of four.
XID_79 = ("NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
          "off the bus.")
RAIL = 5
ONE_LANE = "100 Gb/sec (1X NDR)"


def _pods(cp: ControlPlane, namespace: str, job: str) -> dict[str, tuple[str, str, str]]:
    """Each live pod of the job (not being deleted), by UID: (name, node, phase). A rank the
    operator creates again keeps its name, not its UID."""
    items = cp.get("pods", "-n", namespace, "-l", f"{quarantine.JOB_NAME}={job}")["items"]
    return {p["metadata"]["uid"]: (p["metadata"]["name"], p["spec"].get("nodeName", ""),
                                   p.get("status", {}).get("phase", ""))
            for p in items if not p["metadata"].get("deletionTimestamp")}


def _running(cp: ControlPlane, namespace: str, job: str) -> dict[str, str]:
    """Each running rank of the job, by UID: its node."""
    return {uid: node for uid, (_, node, phase) in _pods(cp, namespace, job).items()
            if phase == "Running"}


def _start_pass(cp: ControlPlane, policy: Mapping[str, Any], work: Path
                ) -> subprocess.Popen[str]:
    """One pass of the program with the quarantine's own identity, started."""
    config = json.loads(cp.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": TOKEN, "as": QUARANTINE_USER}
    (work / "quarantine.conf").write_text(json.dumps(config))
    (work / "quarantine-policy.json").write_text(json.dumps(policy))
    env = {**os.environ, "PATH": f"{cp.bin}:{os.environ['PATH']}"}
    return subprocess.Popen([sys.executable, str(PROGRAM), str(work / "quarantine-policy.json"),
                             str(work / "quarantine.conf")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _finished(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    try:
        out, err = proc.communicate(timeout=PASS_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _pass(cp: ControlPlane, policy: Mapping[str, Any], work: Path
          ) -> subprocess.CompletedProcess[str]:
    return _finished(_start_pass(cp, policy, work))


def _stopped_whole(cp: ControlPlane, policy: Mapping[str, Any], job: tuple[str, str],
                   ranks: set[str]) -> tuple[subprocess.CompletedProcess[str], str | None]:
    """One pass, the job's pods watched while it runs (it may resume the job before it ends):
    every rank of `ranks` (UIDs) must stop, and none may still run once a rank created again
    runs (the gang split). The pass, and what went wrong."""
    namespace, name = job
    proc, end = _start_pass(cp, policy, cp.work), time.monotonic() + WAIT_S
    split: set[str] = set()
    while True:
        pods = _pods(cp, namespace, name)
        left = ranks & pods.keys()
        if left and any(u not in ranks and phase == "Running"
                        for u, (_, _, phase) in pods.items()):
            split |= {pods[u][0] for u in left}
        if proc.poll() is not None and not left or time.monotonic() > end:
            break
        time.sleep(1)
    done = _finished(proc)
    if split:
        return done, (f"quarantine: {namespace}/{name}'s ranks {sorted(split)} ran on while "
                      "ranks created again ran: the gang was split")
    if left:
        return done, (f"quarantine: {namespace}/{name} was suspended but ranks are left "
                      f"{sorted(pods[u][:2] for u in left)} after {WAIT_S}s")
    return done, None


def _lines(out: str) -> str:
    """A pass's lines as one report line (a pass that waited on its drain may have resumed
    the job already)."""
    return "; ".join(ln for ln in out.strip().splitlines())[:600]


def _until(check: Any, timeout: float = WAIT_S, every: float = 2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(every)
    return False


def _quarantine_taints(node: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    return [(t["key"], t.get("value", ""), t["effect"])
            for t in node["spec"].get("taints") or [] if t["key"] == quarantine.TAINT]


# ---------------------------------------------------------------- detection


def detectors_report(detectors: Detectors, seen: list[str]) -> Iterator[str]:
    """Every detector reached the API server as the stack's identity and set every condition
    of docs/health.md False on its own node."""
    nodes = sorted(detectors.hosts)
    if not _until(lambda: all(detectors.all_false(n) for n in nodes) or detectors.exited(),
                  DETECT_S, every=1):
        late = [n for n in nodes if not detectors.all_false(n)]
        yield (f"node health: no healthy report from the detectors of {late} in {DETECT_S}s: "
               f"{late[0]} has {detectors.conditions(late[0])}; {detectors.tail(late[0])}"[:900])
        return
    if gone := detectors.exited():
        yield f"node health: node-problem-detector exited on {gone}: {detectors.tail(min(gone))}"
        return
    seen.append(f"node health: node-problem-detector on {len(nodes)} GPU nodes "
                f"({nodes[0]} .. {nodes[-1]}), each over its stand-in host, as the "
                f"ServiceAccount kube-system/node-problem-detector: all "
                f"{len(detectors.kinds)} conditions False on each")


def fall_ill(detectors: Detectors, node: str, fault: str,
             inject: Callable[[SimulatedHost], None], condition: str, reason: str,
             seen: list[str]) -> str | None:
    """`inject` the fault into `node`'s host; None once its detector set `condition` True
    for `reason` on the Node, else what went wrong."""
    started = time.monotonic()
    inject(detectors.hosts[node])
    if not _until(lambda: detectors.conditions(node).get(condition) == ("True", reason),
                  DETECT_S, every=0.5):
        return (f"node health {node}: {fault} did not become {condition} ({reason}) in "
                f"{DETECT_S}s: {detectors.conditions(node)} {detectors.tail(node)}")[:900]
    message = detectors.condition(node, condition).get("message", "")
    seen.append(f"node health {node}: {fault} -> {condition} ({reason}) set by "
                f"node-problem-detector in {time.monotonic() - started:.0f}s: {message}"[:600])
    return None


# ---------------------------------------------------------------- the quarantine


def gang_kept_whole(cp: ControlPlane, policy: Mapping[str, Any], detectors: Detectors,
                    job: tuple[str, str], stack: str, seen: list[str]) -> Iterator[str]:
    """`job` (namespace, name) is running; an Xid 79 is logged on one of its nodes, whose
    detector sets `GPUFallenOffBus` (a class the policy drains). The job is suspended whole,
    every rank stops, it resumes and every rank runs again on nodes other than the sick one.
    Then a rail of another of its nodes drops to 1X: that node is only tainted, and its ranks
    keep running. Last, the repair of both."""
    namespace, name = job
    work = cp.work
    before = _running(cp, namespace, name)
    watched = sorted(set(before.values()) & set(detectors.hosts))
    if not watched:
        yield (f"quarantine: {namespace}/{name} has no running rank on a node with a detector "
               f"to begin with ({before})")
        return
    sick = watched[0]
    cp.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(d) for d in quarantine_rbac()))
    failure = fall_ill(detectors, sick, "Xid 79 in its kernel log", lambda h: h.kernel(XID_79),
                       "GPUFallenOffBus", "GPUFellOffBus", seen)
    if failure:
        yield failure
        return
    first, failure = _stopped_whole(cp, policy, job, set(before))
    seen.append(f"quarantine {sick} (GPUFallenOffBus): {_lines(first.stdout)}")
    if failure:
        yield failure
        return
    seen.append(f"quarantine: all {len(before)} ranks of {namespace}/{name} stopped, none "
                "running beside a rank created again")
    second = _pass(cp, policy, work)
    seen.append(f"quarantine, next pass: {_lines(second.stdout) or 'nothing left to do'}")
    if not _until(lambda: len(_running(cp, namespace, name).keys() - before) == len(before)):
        yield (f"quarantine: {namespace}/{name} did not run whole again: "
               f"{_pods(cp, namespace, name)} ({second.stdout}{second.stderr})"[:600])
        return
    after = _running(cp, namespace, name)
    seen.append(f"quarantine: {namespace}/{name} runs again on {sorted(set(after.values()))}")
    if sick in after.values():
        yield f"quarantine: a rank of {namespace}/{name} came back on the sick node {sick}"
        return
    degraded = yield from rail_only_tainted(cp, policy, detectors, job, work, seen)
    if degraded:
        yield from repairs_name_the_fix(cp, detectors, stack, (sick, degraded), seen)


def rail_only_tainted(cp: ControlPlane, policy: Mapping[str, Any], detectors: Detectors,
                      job: tuple[str, str], work: Path, seen: list[str]
                      ) -> Generator[str, None, str | None]:
    """Rail RAIL of a node running a rank of `job` drops to one lane: its detector sets
    `InfinibandRailDegraded`, and the quarantine taints the node NoSchedule and nothing more:
    not cordoned, the job not suspended, its ranks there still running. Returns the node
    (None when a check failed)."""
    namespace, name = job
    ranks = _running(cp, namespace, name)
    watched = sorted(set(ranks.values()) & set(detectors.hosts))
    if not watched:
        yield f"quarantine: no rank of {namespace}/{name} runs on a node with a detector"
        return None
    node = watched[0]
    hca = detectors.hosts[node].rails()[RAIL]
    failure = fall_ill(detectors, node, f"rail {RAIL} ({hca}) at {ONE_LANE}",
                       lambda h: h.fixture.rail_rate(hca, ONE_LANE),
                       "InfinibandRailDegraded", "RailBelowPlannedRate", seen)
    if failure:
        yield failure
        return None
    out = _pass(cp, policy, work)
    seen.append(f"quarantine {node} (InfinibandRailDegraded): {_lines(out.stdout)}")
    obj, now = cp.get("node", node), _pods(cp, namespace, name)
    there = {uid for uid, n in ranks.items() if n == node}
    kept = {uid for uid in there if uid in now and now[uid][2] == "Running"}
    suspended = cp.get("pytorchjob", "-n", namespace, name)["spec"].get(
        "runPolicy", {}).get("suspend")
    wrong = [w for w, bad in (
        (f"taints {_quarantine_taints(obj)}",
         _quarantine_taints(obj) != [(quarantine.TAINT, "InfinibandRailDegraded",
                                      "NoSchedule")]),
        ("cordoned", bool(obj["spec"].get("unschedulable"))),
        (f"{namespace}/{name} suspended", bool(suspended)),
        (f"{len(there - kept)} of its ranks stopped", there != kept)) if bad]
    if wrong:
        yield (f"quarantine {node} (InfinibandRailDegraded): a taint only was due, found "
               f"{'; '.join(wrong)} ({out.stdout.strip()}{out.stderr.strip()})"[:600])
        return None
    seen.append(f"quarantine {node}: tainted {quarantine.TAINT}=InfinibandRailDegraded:"
                f"NoSchedule, not drained; its ranks {sorted(now[u][0] for u in kept)} keep "
                "running")
    return node


# ---------------------------------------------------------------- the repair


def _repair(cp: ControlPlane, stack: str, node: str) -> subprocess.CompletedProcess[str]:
    """`python -m offline repair <node>` against the twin's API server."""
    env = {**os.environ, "PATH": f"{cp.bin}:{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-m", "offline", "repair", node, "--stack", stack,
                           "--project-dir", str(REPO), "--kubeconfig", str(cp.kubeconfig)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def repairs_name_the_fix(cp: ControlPlane, detectors: Detectors, stack: str,
                         nodes: tuple[str, str], seen: list[str]) -> Iterator[str]:
    """The repair of the node off the bus says restart it (Xid 79: RESTART_BM), then swap its
    board, then release it; the repair of the degraded node names rail RAIL's planned leaf
    port and cable (its rails file, from the fabric plan), then releases it (a taint only)."""
    sick, degraded = nodes
    rail = next(row.split("\t") for row in (detectors.hosts[degraded].config / "rails" /
                                            degraded).read_text().splitlines()
                if row.split("\t")[0] == str(RAIL))
    _, hca, leaf, port, cable, node_port = rail
    want = {
        sick: ["GPUFallenOffBus (GPUFellOffBus): NVRM: Xid (PCI:0000:2a:00): 79",
               "restart the node (NVIDIA's Xid 79 action: RESTART_BM)",
               "replace the GPU baseboard (board swap, RMA)",
               f"`kubectl taint node {sick} {quarantine.TAINT}-` and `kubectl uncordon {sick}`"],
        degraded: [f"InfinibandRailDegraded (RailBelowPlannedRate): rail {RAIL} {hca}: "
                   f"{ONE_LANE}, planned",
                   f"rail {RAIL} ({hca}): {leaf} port {port}, cable {cable}, node port "
                   f"{node_port}: re-seat the cable at both ends",
                   f"replace cable {cable}",
                   f"`kubectl taint node {degraded} {quarantine.TAINT}-`\n"]}
    for node, phrases in want.items():
        out = _repair(cp, stack, node)
        text = out.stdout + "\n"
        missing = [p for p in phrases if p not in text]
        if out.returncode != 0 or missing:
            yield (f"repair {node}: exit {out.returncode}, does not say {missing}: "
                   f"{text.strip()} {out.stderr.strip()}"[:900])
            continue
        seen.append(f"repair {node} says: " + " | ".join(p.strip() for p in phrases))
