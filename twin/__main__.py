"""`python -m twin [--stack prod]`: render the stack offline, apply it to the twin, report.

Applies what `pulumi up` creates in the order it creates it: everything before the NCCL
acceptance gate, then (the gate played: its job waited for) what depends on the gate. Exit 0
when the API server accepted every object, every pod is bound, every PodGroup runs and every
check in twin/checks.py holds; 1 otherwise; 2 when the twin itself fails, which is no verdict
on the stack: it cannot start (binaries missing: `make k8s-tools`), its control plane stops or
stops answering, or it breaks (the traceback on stderr). Writes build/twin/: pods.json,
podgroups.json, jobs.json, nodes.json, events.txt, logs/ (each component's) and, last, once the
twin has finished, report.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from types import FrameType
from typing import NoReturn

from components.model.cluster import Cluster
from components.planning import quarantine_setup
from components.planning.acceptance import gpu_node_sus
from components.planning.namespaces import (
    inference_namespaces,
    priority_classes,
    training_namespaces,
)
from components.planning.nodes import planned_nodes
from components.planning.training_operator import training_operator_kustomization
from components.planning.workloads import largest_su, su_label_key
from components.wiring.loading import validate_cluster
from offline.stackconfig import load_stack_config

from . import checks, quarantine
from .controlplane import ControlPlane, ControlPlaneError
from .node_health import INTERVAL_S, NPD_VERSION, DetectorMissing, Detectors, detector_binary
from .operators import (
    host_address,
    kwok_stages,
    module_dir,
    one_twin_at_a_time,
    register_csi_drivers,
    start_training_operator,
    start_volcano,
)
from .run import (
    AGENT_LABEL,
    DNS_SERVICE,
    TwinReport,
    apply_manifests,
    apply_probes,
    gates,
    ingress_services,
    install_coredns,
    load_rendering,
    object_key,
    play_gate,
    prepare,
    settle,
    snapshot,
    training_operator_objects,
    write_report,
    write_state,
)

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    """The twin's exit status: 0 or 1, its verdict; 2, no verdict (see the module's doc)."""
    try:
        return _run(argv)
    except ControlPlaneError as err:
        print(f"twin: {err}", file=sys.stderr)
    except Exception:
        traceback.print_exc()
        print("twin: the twin failed (above); this is no verdict on the stack", file=sys.stderr)
    return 2


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m twin", description=__doc__.splitlines()[0])
    ap.add_argument("--stack", default="prod")
    ap.add_argument("--bin", type=Path, help="directory with the built binaries "
                    "(default: what tools/k8s/build.sh prints)")
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "twin")
    ap.add_argument("--rendering", type=Path, help="apply this build/<stack> directory as it "
                    "is instead of rendering the stack first")
    ap.add_argument("--gate-timeout", type=float, default=180,
                    help="seconds to wait for each acceptance job (default 180)")
    return ap


def _binaries() -> Path | None:
    """The control plane's binaries, built (or found built) by tools/k8s/build.sh."""
    built = subprocess.run(["bash", str(REPO / "tools/k8s/build.sh")], capture_output=True,
                           text=True)
    if built.returncode != 0:
        print(built.stderr[-3000:], file=sys.stderr)
        print("twin: the control plane could not be built (see above)", file=sys.stderr)
        return None
    return Path(built.stdout.strip().splitlines()[-1])


def _rendered(stack: str) -> bool:
    """Render the stack's build/<stack>/ (a mandatory finding still renders it)."""
    preview = subprocess.run([sys.executable, "-m", "offline", "preview", "--stack", stack,
                              "--quiet"], cwd=REPO, capture_output=True, text=True)
    if preview.returncode not in (0, 3):
        print(preview.stdout + preview.stderr, file=sys.stderr)
        return False
    return True


def _built_for(bin_dir: Path, cluster: Cluster) -> dict[str, str] | None:
    """The versions the binaries were built for, when they are the ones the stack pins."""
    if not (bin_dir / "versions.json").is_file():
        print(f"twin: {bin_dir} holds no versions.json: not a directory tools/k8s/build.sh made",
              file=sys.stderr)
        return None
    built: dict[str, str] = json.loads((bin_dir / "versions.json").read_text())
    pins = {"volcano": f"v{cluster.platform.volcano.version.lstrip('v')}",
            "trainingOperator": cluster.platform.training_operator.version,
            "kubernetes": f"v{cluster.kubernetes.version.lstrip('v')}"}
    wrong = {k: (v, built.get(k)) for k, v in pins.items() if built.get(k) != v}
    if wrong:
        print(f"twin: {bin_dir} was built for other versions than the stack pins "
              f"(pinned, built): {wrong}; rebuild with tools/k8s/build.sh", file=sys.stderr)
        return None
    return built


def _run(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    # What an earlier run left must not pass for this run's outputs if this one stops early.
    shutil.rmtree(args.out, ignore_errors=True)
    bin_dir = args.bin or _binaries()
    if bin_dir is None or (args.rendering is None and not _rendered(args.stack)):
        return 2
    rendering = args.rendering or REPO / "build" / args.stack
    raw = json.loads(load_stack_config(REPO, args.stack).config["gpu-cluster:cluster"])
    cluster = validate_cluster(raw, REPO)
    built = _built_for(bin_dir, cluster)
    if built is None:
        return 2
    try:  # the stack's node-problem-detector, where it runs one (health.enabled)
        detector = detector_binary(args.shared) if cluster.health.enabled else None
    except DetectorMissing as err:
        print(f"twin: node-problem-detector could not be built: {err}", file=sys.stderr)
        return 2
    report = TwinReport(stand_ins=[
        "every host: a KWOK node with the planned labels, taints and allocatable resources",
        "Volcano and the Training Operator: processes on this machine, their webhooks "
        "reached through their Services' endpoints; Volcano built against volcano.sh/apis "
        f"{built.get('volcanoApis', 'unknown')} (the module proxy serves no v1.15 API module)",
        "every acceptance gate: the twin runs its job on the nodes the gate chooses and "
        "waits for it; the launcher's mpirun is a KWOK stage that exits 0 after 5 s (no NCCL "
        "output to check)"])
    # The control plane's keys, certificates and etcd data stay in a scratch directory, never
    # under build/; only the components' logs are kept.
    work = Path(tempfile.mkdtemp(prefix="gpu-cluster-twin-"))
    try:
        _play(args, cluster, bin_dir, built, rendering, work, report, detector)
    finally:
        logs = args.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for log in work.glob("*.log"):
            shutil.copy(log, logs / log.name)
        shutil.rmtree(work, ignore_errors=True)
    write_report(args.out, report)
    for line in report.lines():
        print(line)
    print(f"Wrote {args.out}/")
    return 0 if report.ok else 1


def _play(args: argparse.Namespace, cluster: Cluster, bin_dir: Path, built: dict[str, str],
          rendering: Path, work: Path, report: TwinReport, detector: Path | None) -> None:
    """Bring up the control plane and the platform, apply the rendering as `pulumi up` would
    (the gates' jobs run, what waits for a gate only once it passed), then check what runs."""
    manifests, releases = load_rendering(rendering)
    plan_gates = gates(json.loads((rendering / "plan.json").read_text()))
    after_gates = set().union(*(g.after for g in plan_gates))
    modules = {m: module_dir(m, v, work) for m, v in (
        ("volcano.sh/volcano", built["volcano"]),
        ("github.com/kubeflow/training-operator", built["trainingOperator"]),
        ("sigs.k8s.io/kwok", built["kwok"]))}
    admission = rendering / "kubernetes/admission-config.yaml"
    authentication = rendering / "kubernetes/authentication-config.yaml"
    with one_twin_at_a_time(), ControlPlane(
            bin_dir, work, str(cluster.kubernetes.service_cidr),
            kwok_stages(modules["sigs.k8s.io/kwok"]),
            admission if admission.is_file() else None,
            authentication if authentication.is_file() else None) as cp:
        address = host_address()
        nodes = planned_nodes(cluster)
        prepare(cp, args.shared, manifests, releases, nodes)
        install_coredns(cp, nodes, str(cluster.kubernetes.service_cidr), report)
        start_volcano(cp, modules["volcano.sh/volcano"], scheduler_conf(releases), address)
        operator = training_operator_objects(
            cp, training_operator_kustomization(cluster.platform.training_operator.version),
            modules["github.com/kubeflow/training-operator"], work)
        apply_manifests(cp, operator, report)
        start_training_operator(cp, operator, address)
        apply_manifests(cp, [m for m in manifests if object_key(m) not in after_gates], report)
        apply_probes(cp, releases, report)
        register_csi_drivers(cp, manifests)
        runs = []
        sus = gpu_node_sus(cluster)
        for g in plan_gates:
            report.gates[g.name], run = play_gate(cp, g, sus, args.gate_timeout)
            runs.append(run)
        # `pulumi up` stops at a failed gate: what waits for it is never created.
        if all("Succeeded" in state for state in report.gates.values()):
            apply_manifests(cp, [m for m in manifests if object_key(m) in after_gates], report)
        state = snapshot(cp, settle(cp, report))
        write_state(args.out, state, report)
        verify(cluster, state, runs, report)
        live_checks(cp, cluster, state, manifests, releases, report, detector, args.stack)


def scheduler_conf(releases: list[dict]) -> str:
    """The scheduler configuration the Volcano release is given."""
    volcano = next(r for r in releases if r["chart"] == "volcano")
    return volcano["values"]["custom"]["scheduler_config_override"]


def live_checks(cp: ControlPlane, cluster: Cluster, state: dict[str, list[dict]],
                manifests: list[dict], releases: list[dict], report: TwinReport,
                detector: Path | None, stack: str) -> None:
    """The checks that ask the running cluster (dry runs, requests, drains), drains last:
    they move pods; then node health, from node-problem-detector on every GPU node (the
    `detector` binary; None: the stack runs none) to the quarantine and the repair."""
    report.failures += checks.pod_admission(cp, cluster, report.seen)
    report.failures += checks.anonymous_access(cp, report.seen)
    # The serving budgets on the GPU nodes; the control planes' (CoreDNS, the ingress) are
    # drained below.
    report.failures += checks.drain_honours_budget(
        cp, state["pods"], [m for m in manifests if m["kind"] == "PodDisruptionBudget"
                            and m["metadata"]["namespace"] in inference_namespaces(cluster)],
        report.seen)
    report.failures += checks.control_plane_drains(
        cp, [DNS_SERVICE, *ingress_services(releases)], report.seen)
    # Last: it stops the training job and starts it again elsewhere.
    node_health(cp, cluster, manifests, report, detector, stack)


def node_health(cp: ControlPlane, cluster: Cluster, manifests: list[dict], report: TwinReport,
                detector: Path | None, stack: str) -> None:
    """node-problem-detector on every GPU node, each reporting its node healthy; then a fault
    on a node of the training job, the quarantine and the repair (twin/quarantine.py)."""
    if detector is None:
        report.seen.append("node health: health.enabled is false: no detector, no quarantine")
        return
    detectors = Detectors(cp, cluster, detector)
    report.stand_ins.append(
        f"every GPU node's host, for node-problem-detector {NPD_VERSION} (a process per node, "
        f"as the stack's ServiceAccount, checks every {INTERVAL_S} s): a directory with its "
        "sysfs rails, md arrays and a kernel log file, and stand-in nvidia-smi, dcgmi and "
        "systemctl scripts (twin/node_health.py)")
    failures = list(quarantine.detectors_report(detectors, report.seen))
    jobs = sorted((m["metadata"]["namespace"], m["metadata"]["name"]) for m in manifests
                  if m["kind"] == "PyTorchJob")
    if jobs and not failures:
        failures += quarantine.gang_kept_whole(
            cp, quarantine_setup.policy(cluster), detectors, jobs[0], stack, report.seen)
    report.failures += failures


def verify(cluster: Cluster, state: dict[str, list[dict]], runs: list[tuple[str, str, str]],
           report: TwinReport) -> None:
    pods, podgroups = state["pods"], state["podgroups"]
    report.failures += checks.podgroups_running(podgroups)
    report.failures += checks.training_on_whole_nodes_of_one_su(
        pods, state["nodes"], su_label_key(cluster), largest_su(cluster))
    report.failures += checks.replicas_on_distinct_nodes(pods)
    report.failures += checks.gate_ran_alone(state["jobs"], podgroups,
                                             [f"{ns}/{name}" for _, ns, name in runs])
    report.failures += checks.pod_security(state["events"])
    report.failures += checks.node_agents_on_every_node(
        state["daemonsets"], pods, state["nodes"], AGENT_LABEL)
    report.failures += checks.system_pods_outrank_workloads(
        pods, state["nodes"], training_namespaces(cluster) + inference_namespaces(cluster),
        max(pc["value"] for pc in priority_classes()), report.seen)
    report.failures += [f"acceptance {k}: {v}" for k, v in report.gates.items()
                        if "Succeeded" not in v]


def _terminated(signum: int, _frame: FrameType | None) -> NoReturn:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    # SIGTERM (a test's timeout, a cancelled CI job) unwinds like an exception, so that the
    # control plane's processes, each in its own session, are stopped, not left running.
    signal.signal(signal.SIGTERM, _terminated)
    sys.exit(main())
