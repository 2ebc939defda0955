"""The quarantine in the twin: a node running a training rank turns sick (the condition
node-problem-detector sets on hardware), the control planes' quarantine program runs as its
own identity, and the real Training Operator and Volcano do the rest. The gang must stop whole
and come back whole, away from the sick node; nothing of it may run split meanwhile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from components.planning import quarantine
from components.planning.quarantine_setup import QUARANTINE_USER, quarantine_rbac
from twin.controlplane import TOKEN, ControlPlane

PROGRAM = Path(quarantine.__file__)
WAIT_S = 240  # for the operator to stop every rank, and for Volcano to place the gang again


def _ranks(cp: ControlPlane, namespace: str, job: str) -> dict[str, str]:
    """Each live rank of the job and its node ("" while unscheduled)."""
    items = cp.get("pods", "-n", namespace, "-l", f"{quarantine.JOB_NAME}={job}")["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in items
            if not p["metadata"].get("deletionTimestamp")}


def _running(cp: ControlPlane, namespace: str, job: str) -> dict[str, str]:
    items = cp.get("pods", "-n", namespace, "-l", f"{quarantine.JOB_NAME}={job}")["items"]
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in items
            if p.get("status", {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")}


def _pass(cp: ControlPlane, policy: Mapping[str, Any], work: Path
          ) -> subprocess.CompletedProcess[str]:
    """One pass of the program with the quarantine's own identity."""
    config = json.loads(cp.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": TOKEN, "as": QUARANTINE_USER}
    (work / "quarantine.conf").write_text(json.dumps(config))
    (work / "quarantine-policy.json").write_text(json.dumps(policy))
    env = {**os.environ, "PATH": f"{cp.bin}:{os.environ['PATH']}"}
    return subprocess.run([sys.executable, str(PROGRAM), str(work / "quarantine-policy.json"),
                           str(work / "quarantine.conf")], capture_output=True, text=True,
                          timeout=300, env=env)


def _lines(out: str) -> str:
    """A pass's lines as one report line (a pass that waited on its drain may have resumed
    the job already)."""
    return "; ".join(ln for ln in out.strip().splitlines())[:600]


def _until(check: Any, timeout: float = WAIT_S) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(2)
    return False


def gang_kept_whole(cp: ControlPlane, policy: Mapping[str, Any], condition: str,
                    job: tuple[str, str], work: Path, seen: list[str]) -> Iterator[str]:
    """`job` (namespace, name) is running; one of its nodes gets `condition` (a class the
    policy drains). The job is suspended whole, every rank stops, it resumes and every rank
    runs again on nodes other than the sick one."""
    namespace, name = job
    before = _running(cp, namespace, name)
    if not before:
        yield f"quarantine: {namespace}/{name} has no running rank to begin with"
        return
    sick = sorted(before.values())[0]
    cp.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(d) for d in quarantine_rbac()))
    stamp = "2026-01-01T00:00:00Z"
    cp.kubectl("patch", "node", sick, "--subresource=status", "--type=strategic", "-p",
               json.dumps({"status": {"conditions": [{
                   "type": condition, "status": "True", "reason": "Injected",
                   "message": "injected by the twin", "lastTransitionTime": stamp,
                   "lastHeartbeatTime": stamp}]}}))
    first = _pass(cp, policy, work)
    seen.append(f"quarantine {sick} ({condition}): {_lines(first.stdout)}")
    if not _until(lambda: not _ranks(cp, namespace, name)):
        yield (f"quarantine: {namespace}/{name} was suspended but ranks are left "
               f"{_ranks(cp, namespace, name)}: the gang was split")
        return
    second = _pass(cp, policy, work)
    seen.append(f"quarantine, next pass: {_lines(second.stdout) or 'nothing left to do'}")
    if not _until(lambda: len(_running(cp, namespace, name)) == len(before)):
        yield (f"quarantine: {namespace}/{name} did not run whole again: "
               f"{_ranks(cp, namespace, name)} ({second.stdout}{second.stderr})"[:600])
        return
    after = _running(cp, namespace, name)
    seen.append(f"quarantine: {namespace}/{name} runs again on {sorted(set(after.values()))}")
    if sick in after.values():
        yield f"quarantine: a rank of {namespace}/{name} came back on the sick node {sick}"
