"""The cluster twin's outputs and exit status, without its control plane: whatever the API
objects hold, the twin writes every output (report.json last, each file whole) and its checks
read them; an object it cannot fully describe is reported, and a twin that breaks exits 2, which
no test takes for a verdict (0: every check holds, 1: it found a failure)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.project import REPO

import twin.__main__ as twin_main
from twin import checks
from twin.controlplane import ControlPlaneError
from twin.run import TwinReport, write

GOOD_EVENT = {"metadata": {"name": "e1", "namespace": "training"},
              "involvedObject": {"kind": "Pod", "name": "worker-0"},
              "reason": "Scheduled", "message": "assigned training/worker-0 to gpu-node-00"}
# What core/v1 allows an Event to lack (reason, involvedObject.kind), one without even a
# namespace or an involved object, one whose message spans lines, and one that is no object.
BARE_EVENTS: list[Any] = [
    {"metadata": {"name": "e2", "namespace": "training"},
     "involvedObject": {"name": "llama-70b-pretrain"}, "message": "no reason"},
    {"metadata": {"name": "e3"}, "involvedObject": None, "reason": "Started"},
    {"metadata": {"name": "e4", "namespace": "kube-system"},
     "involvedObject": {"kind": "Node", "name": "mgmt-01"}, "reason": "Multi",
     "message": "line one\nline\ttwo"},
    "not an object",
]


def _state(events: list[Any]) -> dict[str, list[Any]]:
    return {"pods": [], "nodes": [], "podgroups": [], "jobs": [], "events": events}


def test_write_describes_events_without_optional_fields_and_reports_them(
        tmp_path: Path) -> None:
    report = TwinReport(failures=["a failure found before"])
    write(tmp_path, _state([GOOD_EVENT, *BARE_EVENTS]), report)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "events.txt", "jobs.json", "nodes.json", "podgroups.json", "pods.json", "report.json"]
    assert (tmp_path / "events.txt").read_text().splitlines() == [
        "training\tPod/worker-0\tScheduled\tassigned training/worker-0 to gpu-node-00",
        "training\t-/llama-70b-pretrain\t-\tno reason",
        "-\t-/-\tStarted\t-",
        "kube-system\tNode/mgmt-01\tMulti\tline one\\nline\\ttwo",
        "-\t-/-\t-\t-",
    ]
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["failures"] == ["a failure found before"]
    assert written["incomplete"] == report.incomplete == [
        "Event training/e2 (-/llama-70b-pretrain): no involvedObject.kind, reason",
        "Event -/e3 (-/-): no metadata.namespace, involvedObject.kind, involvedObject.name",
        "Event -/(no name) (-/-): no metadata.namespace, involvedObject.kind, "
        "involvedObject.name, reason",
    ]
    # Reported, not a failure of the stack.
    assert report.ok is False and report.failures == ["a failure found before"]
    assert TwinReport(incomplete=["Event -/e3 (-/-): no reason"]).ok


def test_write_replaces_each_file_whole(tmp_path: Path) -> None:
    write(tmp_path, _state([GOOD_EVENT]), TwinReport(failures=["first"]))
    write(tmp_path, _state([]), TwinReport())
    assert json.loads((tmp_path / "report.json").read_text())["failures"] == []
    assert (tmp_path / "events.txt").read_text() == ""
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_checks_read_objects_without_optional_fields() -> None:
    bare_pg = {"metadata": {"name": "g", "namespace": "training"}}
    assert list(checks.podgroups_running([bare_pg])) == [
        "PodGroup training/g (queue None, minMember None) is none: no reason"]

    worker = {"metadata": {"name": "w-0", "namespace": "training",
                           "labels": {checks.JOB_LABEL: "job"}},
              "spec": {"nodeName": "gpu-node-00", "containers": [
                  {"name": "c", "resources": {"requests": {checks.GPU: "8"}}}]},
              "status": {"phase": "Running"}}
    bare_node = {"metadata": {"name": "gpu-node-00"}}
    assert list(checks.training_on_whole_nodes_of_one_su([worker], [bare_node], "su", 4)) == [
        "job training/job: pod w-0 takes part of a node"]

    bare_pod = {"metadata": {"name": "p", "namespace": "kube-system"},
                "spec": {"nodeName": "gpu-node-00"}}
    assert list(checks.replicas_on_distinct_nodes([bare_pod])) == []
    notes: list[str] = []
    assert list(checks.system_pods_outrank_workloads([bare_pod], [bare_node], ["training"],
                                                     100000, notes)) == []
    assert notes == ["kube-system/p: priority 0 (no class) on gpu-node-00, where no "
                     "workload runs"]
    assert list(checks.node_agents_on_every_node(
        [{"metadata": {"name": "ds", "namespace": "monitoring"}}], [bare_pod], [bare_node],
        "agent")) == []


def test_the_gate_check_takes_the_completion_time_when_a_condition_has_none() -> None:
    def job(status: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": "nccl", "namespace": "training"}, "status": status}
    done = {"type": "Succeeded", "status": "True"}
    early = {"metadata": {"name": "pretrain", "namespace": "training",
                          "creationTimestamp": "2025-01-01T00:00:00Z"}}
    timed = job({"conditions": [done], "completionTime": "2025-01-01T00:01:00Z"})
    assert list(checks.gate_ran_alone([timed], [early], ["training/nccl"])) == [
        "PodGroup training/pretrain was created at 00:00:00, before the acceptance test "
        "finished at 00:01:00"]
    assert list(checks.gate_ran_alone([job({"conditions": [done]})], [early],
                                      ["training/nccl"])) == [
        "acceptance job training/nccl finished at no recorded time: whether it ran alone "
        "cannot be told"]
    assert list(checks.gate_ran_alone([job({})], [], ["training/nccl"])) == [
        "acceptance job training/nccl never finished"]


def test_pod_security_names_a_refused_pod_whatever_its_event_lacks() -> None:
    refused = {"metadata": {"name": "e"}, "involvedObject": {"name": "worker"},
               "reason": "FailedCreate", "message": 'violates PodSecurity "baseline:latest"'}
    assert list(checks.pod_security([refused, *BARE_EVENTS])) == [
        '- -/worker: violates PodSecurity "baseline:latest"']


@pytest.mark.parametrize(("error", "said"), [
    (KeyError("reason"), "KeyError: 'reason'"),
    (ControlPlaneError("kube-apiserver exited with 1"), "twin: kube-apiserver exited with 1"),
])
def test_a_twin_that_breaks_exits_2(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str], error: Exception,
                                    said: str) -> None:
    def broken(_argv: list[str] | None) -> int:
        raise error
    monkeypatch.setattr(twin_main, "_run", broken)
    assert twin_main.main([]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.slow  # a subprocess that loads the stack: seconds
def test_a_twin_that_cannot_start_exits_2_and_leaves_no_old_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text('{"failures": []}\n')  # an earlier run's
    (tmp_path / "bin").mkdir()
    proc = subprocess.run([sys.executable, "-m", "twin", "--bin", str(tmp_path / "bin"),
                           "--rendering", str(tmp_path), "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "holds no versions.json" in proc.stderr
    assert not (out / "report.json").exists()
