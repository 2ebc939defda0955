"""Planned reboots of GPU nodes: what `pulumi up` runs when a node's boot settings change.

The scripts run in the sandbox (tests/support/sandbox.py): a DGX H100-shaped GPU node and a control
plane whose kubectl stub keeps Nodes and ConfigMaps. A reboot is the sandbox's power cycle: a
new boot ID, the staged kernel command line in effect, interface names assigned as udev would.
The wiring (order, triggers, connections) is read from the prod rendering.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from support.sandbox import (
    DGX_H100_HCAS,
    DGX_OS_GPU_DRIVER,
    Run,
    Sandbox,
    dgx_h100,
    ok,
    prod_cluster,
    unavailable,
)

from components.model.fields import CLUSTER_KEY
from components.planning import host_scripts, reboot

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")

CLUSTER = prod_cluster()
NODE = CLUSTER.nodes[0]
HOST = NODE.hostname
DRIVER = CLUSTER.platform.gpu_operator.host_driver  # prod: the hosts own the GPU driver
STATE = "/var/lib/gpu-cluster"


def gpu_node(tmp_path: Path, gpu_driver: str | None = DRIVER) -> Sandbox:
    """A DGX H100 (by default already on the pinned driver, so only what a test changes needs
    a boot)."""
    sb = Sandbox(tmp_path / HOST, HOST, DGX_H100_HCAS)
    dgx_h100(sb, data_array=True, gpu_driver=gpu_driver or DGX_OS_GPU_DRIVER)
    return sb


def control_plane(tmp_path: Path, *members: str) -> Sandbox:
    sb = Sandbox(tmp_path / "mgmt-01", "mgmt-01")
    sb.path("/etc/kubernetes").mkdir(parents=True)
    sb.path("/etc/kubernetes/admin.conf").write_text("apiVersion: v1\nkind: Config\n")
    for m in members:
        sb.add_node(m)
    return sb


# kubernetes.gangWaitMinutes' default, as the stack renders it.
GANG_WAIT_S = 30 * 60


def drain(cp: Sandbox, node: str, verdict: str, timeout: float = 120) -> Run:
    """The drain as `pulumi up` runs it: the script with the check's verdict as argument."""
    return cp.run(f"set -- {verdict}\n" + reboot.drain_script(node, GANG_WAIT_S),
                  timeout=timeout)


def lock(cp: Sandbox) -> dict[str, str] | None:
    d = cp.state / "cluster/configmaps" / reboot.LOCK
    return {p.name: p.read_text() for p in d.iterdir()} if d.is_dir() else None


def node_verbs(cp: Sandbox, node: str) -> list[str]:
    return (cp.state / "cluster/nodes" / node).read_text().split()


@pytest.mark.slow
def test_a_member_is_drained_rebooted_checked_and_uncordoned(tmp_path: Path) -> None:
    node, cp = gpu_node(tmp_path), control_plane(tmp_path, HOST)
    ok(node.run(host_scripts.prepare_gpu_node(CLUSTER, NODE, CLUSTER_KEY)))
    # DGX OS boots without iommu=pt: the check says so, in the line the drain acts on.
    check = ok(node.run(reboot.check_script(NODE, DRIVER)))
    assert f"{reboot.REBOOT_REQUIRED} kernel-argument:iommu=pt" in check.stdout
    assert check.changes == []

    ok(drain(cp, HOST, "reboot"))
    assert lock(cp) == {"holder": HOST, "cordoned": "false"}
    assert node_verbs(cp, HOST) == ["drain"]

    restart = ok(node.run(reboot.reboot_script(NODE, DRIVER)))
    assert restart.find("shutdown") == [(
        "shutdown", "-r", "+1", "gpu-cluster: planned reboot: kernel-argument:iommu=pt")]
    assert node.path("/run/nologin").exists()  # new logins wait for the boot

    # Reached before the host went down (a root login passes nologin): it must not pass.
    early = node.run(reboot.after_boot_script(NODE, DRIVER))
    assert early.returncode == 1 and "the planned reboot has not happened" in early.stderr

    node.reboot()
    after = ok(node.run(reboot.after_boot_script(NODE, DRIVER)))
    assert f"kernel arguments, rail interfaces and GPU driver {DRIVER} as configured" \
        in after.stdout
    assert " iommu=pt" in node.cmdline.read_text()
    assert not node.path(f"{STATE}/reboot.pending").exists()

    ok(cp.run(reboot.uncordon_script(HOST)))
    assert node_verbs(cp, HOST) == ["drain", "uncordon"] and lock(cp) is None

    # Nothing left to apply: a second pass changes nothing anywhere.
    again = ok(node.run(reboot.check_script(NODE, DRIVER)))
    assert reboot.REBOOT_REQUIRED not in again.stdout
    assert ok(drain(cp, HOST, "none")).changes == []
    assert ok(node.run(reboot.reboot_script(NODE, DRIVER))).changes == []
    assert ok(cp.run(reboot.uncordon_script(HOST))).changes == []
    assert node_verbs(cp, HOST) == ["drain", "uncordon"]


@pytest.mark.slow
def test_one_member_at_a_time(tmp_path: Path) -> None:
    """A second member waits for the lock and, when the first never finishes, stops with the
    holder's name and the fix, undrained."""
    cp = control_plane(tmp_path, "gpu-node-00", "gpu-node-01")
    ok(drain(cp, "gpu-node-00", "reboot"))
    blocked = drain(cp, "gpu-node-01", "reboot")
    assert blocked.returncode == 1
    assert f"held by gpu-node-00 after {reboot.LOCK_WAIT_S} s" in blocked.stderr
    assert f"kubectl -n kube-system delete configmap {reboot.LOCK}" in blocked.stderr
    assert blocked.find("kubectl", "drain") == [] and node_verbs(cp, "gpu-node-01") == []
    # Once the first is back, the second goes.
    ok(cp.run(reboot.uncordon_script("gpu-node-00")))
    ok(drain(cp, "gpu-node-01", "reboot"))
    assert lock(cp) == {"holder": "gpu-node-01", "cordoned": "false"}
    # The holder re-entering (a retried `pulumi up`) does not wait for itself.
    ok(drain(cp, "gpu-node-01", "reboot"))


# A 2-node PyTorchJob's pods as the API lists them: namespace, PodGroup (Volcano's
# scheduling.k8s.io/group-name), node, the Training Operator that owns it.
GANG = ("training\tllama-70b-pretrain\tgpu-node-00\tpytorchjob-controller\n"
        "training\tllama-70b-pretrain\tgpu-node-01\tpytorchjob-controller\n")
SUSPEND = ("kubectl -n training patch pytorchjob llama-70b-pretrain --type=merge -p "
           "'{\"spec\":{\"runPolicy\":{\"suspend\":true}}}'")


@pytest.mark.slow
def test_a_planned_reboot_never_splits_a_running_gang(tmp_path: Path) -> None:
    """Draining gpu-node-00 would evict one rank of a job that also runs on gpu-node-01 (the
    whole job restarts): the drain waits, a minute at a time, up to kubernetes.gangWaitMinutes,
    then fails naming the job and how to suspend it from its checkpoint, undrained and with the
    lock released for the next member."""
    cp = control_plane(tmp_path, "gpu-node-00", "gpu-node-01")
    (cp.state / "cluster/pods").write_text(GANG)
    run = drain(cp, "gpu-node-00", "reboot", timeout=300)
    assert run.returncode == 1, run.explain()
    assert "training/llama-70b-pretrain (also on gpu-node-01)" in run.stderr
    assert SUSPEND in run.stderr and "kubernetes.gangWaitMinutes" in run.stderr
    assert len(run.find("sleep")) == GANG_WAIT_S // 60
    assert run.find("kubectl", "drain") == [] and node_verbs(cp, "gpu-node-00") == []
    assert lock(cp) is None
    # The job alone on the node (or finished elsewhere) is no split: the drain goes on.
    (cp.state / "cluster/pods").write_text(GANG.splitlines()[0] + "\n")
    ok(drain(cp, "gpu-node-00", "reboot"))


@pytest.mark.slow
def test_a_node_cordoned_for_repair_stays_cordoned(tmp_path: Path) -> None:
    cp = control_plane(tmp_path, HOST)
    (cp.state / "cluster/nodes" / HOST).write_text("cordon\n")
    ok(drain(cp, HOST, "reboot"))
    assert lock(cp) == {"holder": HOST, "cordoned": "true"}
    run = ok(cp.run(reboot.uncordon_script(HOST)))
    assert "stays cordoned" in run.stdout and run.find("kubectl", "uncordon") == []
    assert lock(cp) is None


@pytest.mark.slow
def test_first_bring_up_reboots_without_drain_or_lock(tmp_path: Path) -> None:
    cp = control_plane(tmp_path)  # the node has not joined
    run = ok(drain(cp, HOST, "reboot"))
    assert "not a cluster member yet" in run.stdout
    assert run.changes == [] and lock(cp) is None


@pytest.mark.slow
def test_an_unreachable_api_server_stops_the_drain(tmp_path: Path) -> None:
    cp = control_plane(tmp_path, HOST)
    cp.api_down()
    run = drain(cp, HOST, "reboot")
    assert run.returncode != 0 and run.changes == []


@pytest.mark.slow
def test_the_boot_must_bring_every_rail_interface(tmp_path: Path) -> None:
    node = gpu_node(tmp_path)
    rails = (*NODE.rails[:-1], dataclasses.replace(NODE.rails[-1], netdev="ibp221s0"))
    run = node.run(reboot.after_boot_script(dataclasses.replace(NODE, rails=rails), DRIVER))
    assert run.returncode == 1 and "no rail interface ibp221s0" in run.stderr


# --- the wiring in the prod rendering -----------------------------------------------------------
CHAIN = ("reboot-check", "reboot-drain", "reboot", "reboot-wait", "reboot-uncordon")


@pytest.fixture(scope="module")
def commands(build: Path) -> dict[str, dict]:
    """name -> every command:remote:Command of the prod rendering (build/prod/plan.json)."""
    plan = json.loads((build / "plan.json").read_text())
    return {r["name"]: r for r in plan["resources"] if r["type"] == "command:remote:Command"}


def test_each_step_waits_for_the_one_before_and_the_join_for_the_boot(commands) -> None:
    cp_host = str(CLUSTER.control_plane[0].management_ip)
    for node in CLUSTER.nodes:
        h = node.hostname
        steps = [commands[f"{h}-{s}"] for s in CHAIN]
        previous = commands[f"{h}-prepare"]
        for step in steps:
            assert previous["urn"] in step["options"]["dependsOn"], step["name"]
            previous = step
        assert commands[f"{h}-reboot-wait"]["urn"] in \
            commands[f"{h}-kubeadm-join"]["options"]["dependsOn"]
        # Drain and uncordon on the control plane, the rest on the node.
        hosts = [s["inputs"]["connection"]["host"] for s in steps]
        assert hosts == [str(node.management_ip), cp_host, str(node.management_ip),
                         str(node.management_ip), cp_host]
        # Every step re-runs when the boot settings change (triggers force a replacement).
        for step in steps:
            assert step["inputs"]["triggers"][0] == reboot.boot_fingerprint(node, DRIVER)
            assert "triggers[*]" in step["options"]["replaceOnChanges"]
            assert "delete" not in step["inputs"]
    # The check after the boot keeps dialling while the host is down; the others do not.
    assert commands[f"{HOST}-reboot-wait"]["inputs"]["connection"]["dialErrorLimit"] \
        == reboot.BOOT_WAIT_DIALS >= 240
    assert commands[f"{HOST}-reboot"]["inputs"]["connection"]["dialErrorLimit"] == 20


def test_members_queue_for_the_lock_one_drain_per_su_at_a_time(commands) -> None:
    """A drain waiting for the lock holds one of the engine's parallel operations for as long
    as it waits (`pulumi up --parallel`: eight on a two-CPU runner). With every member's drain
    waiting at once, nine of them fill eight slots and the holder's reboot step never starts
    (seen through the real engine: docs/hosts.md). Each drain therefore starts only after the
    one before it in its SU has drained: one waiter per SU, whatever the SU's size."""
    drains = {n.hostname: commands[f"{n.hostname}-reboot-drain"] for n in CLUSTER.nodes}
    hosts = sorted(drains)
    assert not {d for d in drains[hosts[0]]["options"]["dependsOn"] if "-reboot-drain" in d}
    for before, host in zip(hosts, hosts[1:], strict=False):
        waits = {d for d in drains[host]["options"]["dependsOn"] if "-reboot-drain" in d}
        assert waits == {drains[before]["urn"]}, host
    # Lanes per SU, as the upgrade's: no chain grows with the cluster, SUs queue side by side.
    assert reboot.reboot_queue({"a-00": 1, "a-01": 1, "b-00": 2, "a-02": 1, "b-01": 2}) == {
        "a-01": "a-00", "a-02": "a-01", "b-01": "b-00"}


def test_too_few_engine_operations_for_the_reboot_queues_stop_the_program() -> None:
    # Prod (one SU) on a two-CPU runner (the engine's eight); no engine (offline): no check.
    assert reboot.engine_slots_problem(1, 8) is None
    assert reboot.engine_slots_problem(32, None) is None
    # 32 SUs, 32 operations: every one could hold a waiting drain.
    problem = reboot.engine_slots_problem(32, 32)
    assert problem is not None and "run `pulumi up --parallel 64`" in problem
    assert reboot.engine_slots_problem(32, 64) is None


def test_the_fingerprint_follows_the_kernel_command_line_and_the_host_driver_only() -> None:
    def node(**template) -> object:
        return dataclasses.replace(NODE, template=NODE.template.model_copy(update=template))

    base = reboot.boot_fingerprint(NODE, DRIVER)
    assert reboot.boot_fingerprint(node(memory_gib=1024), DRIVER) == base
    assert reboot.boot_fingerprint(node(kernel_args=("iommu=pt", "init_on_alloc=0")),
                                   DRIVER) != base
    # A new host driver release re-runs the chain; an operator-owned driver is not the boot's.
    assert reboot.boot_fingerprint(NODE, "580.105.08") != base
    assert reboot.boot_fingerprint(NODE, None) != base


# --- the host-owned GPU driver (platform.gpuOperator.driver: host) -------------------------------
FABRIC_MANAGER = "nvidia-fabricmanager"


def installs(run: Run) -> list[tuple[str, ...]]:
    return [c for c in run.calls if c[:2] == ("apt-get", "install")]


@pytest.mark.slow
def test_a_host_driver_release_is_installed_only_once_drained_then_booted_and_checked(
        tmp_path: Path) -> None:
    """DGX OS came with its own release; the pinned one is installed by the reboot step, after
    the drain (a driver's libraries replaced under running GPU pods no longer match the loaded
    module, and every new CUDA process fails with "Driver/library version mismatch"), together
    with the fabric manager and NSCQ of the same release (NVSwitch systems need both at the
    driver's exact version), then the boot loads it."""
    node, cp = gpu_node(tmp_path, gpu_driver=None), control_plane(tmp_path, HOST)
    node.cmdline.write_text(node.cmdline.read_text().rstrip("\n") + " iommu=pt\n")
    prepare = ok(node.run(host_scripts.prepare_gpu_node(CLUSTER, NODE, CLUSTER_KEY)))
    assert not any("nvidia" in " ".join(c) for c in installs(prepare)), prepare.explain()

    check = ok(node.run(reboot.check_script(NODE, DRIVER)))
    assert f"{reboot.REBOOT_REQUIRED} gpu-driver:{DGX_OS_GPU_DRIVER}->{DRIVER}" in check.stdout
    ok(drain(cp, HOST, "reboot"))
    assert node_verbs(cp, HOST) == ["drain"]

    restart = ok(node.run(reboot.reboot_script(NODE, DRIVER)))
    assert installs(restart) == [(
        "apt-get", "install", "-y", "--allow-downgrades",
        f"nvidia-driver-580-server-open={DRIVER}-*", f"nvidia-fabricmanager-580={DRIVER}-*",
        f"libnvidia-nscq-580={DRIVER}-*")]
    calls = restart.calls
    assert calls.index(installs(restart)[0]) < calls.index(restart.find("shutdown")[0])
    assert {"libnvidia-nscq-580", "nvidia-driver-580-server-open", "nvidia-fabricmanager-580"} \
        <= {p.name for p in (node.state / "held").iterdir()}
    # Installed is not loaded: the old module runs until the boot.
    assert node.path("/sys/module/nvidia/version").read_text().strip() == DGX_OS_GPU_DRIVER

    node.reboot()
    after = ok(node.run(reboot.after_boot_script(NODE, DRIVER)))
    assert f"GPU driver {DRIVER} as configured" in after.stdout
    ok(cp.run(reboot.uncordon_script(HOST)))
    assert reboot.REBOOT_REQUIRED not in ok(node.run(reboot.check_script(NODE, DRIVER))).stdout
    assert ok(node.run(reboot.reboot_script(NODE, DRIVER))).changes == []

    # The next release, one up: the held packages are released, replaced and held again.
    newer = "580.105.08"
    restart = ok(node.run(reboot.reboot_script(NODE, newer)))
    assert ("apt-mark", "unhold", "libnvidia-nscq-580", "nvidia-driver-580-server-open",
            "nvidia-fabricmanager-580") in restart.calls
    assert f"nvidia-driver-580-server-open={newer}-*" in installs(restart)[0]


@pytest.mark.slow
def test_a_driver_that_did_not_load_or_a_stopped_fabric_manager_fails_after_the_boot(
        tmp_path: Path) -> None:
    """A DKMS build that failed for the running kernel leaves the old module loaded; a fabric
    manager of another release does not start (CUDA: "system not yet initialized"). Either
    stops `pulumi up` on that node, still cordoned, with what to look at."""
    node = gpu_node(tmp_path, gpu_driver=None)
    ok(node.run(reboot.reboot_script(NODE, DRIVER)))
    node.reboot()
    node.load_gpu_driver(DGX_OS_GPU_DRIVER)
    (node.state / "units" / f"{FABRIC_MANAGER}.active").unlink()
    run = node.run(reboot.after_boot_script(NODE, DRIVER))
    assert run.returncode == 1
    assert f"GPU driver {DGX_OS_GPU_DRIVER} is loaded, not {DRIVER}" in run.stderr
    assert f"{FABRIC_MANAGER} is not running" in run.stderr
    assert "`dkms status`" in run.stderr


@pytest.mark.slow
def test_an_operator_owned_driver_on_a_host_with_its_own_is_refused_before_any_change(
        tmp_path: Path) -> None:
    """With driver: operator on DGX OS the operator's k8s-driver-manager finds the host's
    driver (`nvidia-smi` answers), labels the node nvidia.com/gpu.deploy.driver=pre-installed
    and runs no driver container: driverVersion would never run. Refused, with both fixes."""
    operator = CLUSTER.model_copy(update={"platform": CLUSTER.platform.model_copy(update={
        "gpu_operator": CLUSTER.platform.gpu_operator.model_copy(update={"driver": "operator"})})})
    node = gpu_node(tmp_path, gpu_driver=None)
    run = node.run(host_scripts.prepare_gpu_node(operator, NODE, CLUSTER_KEY))
    assert run.returncode == 1 and run.changes == [], run.explain()
    assert f"this host runs NVIDIA driver {DGX_OS_GPU_DRIVER} of its own" in run.stderr
    assert "set platform.gpuOperator.driver: host" in run.stderr
    # The operator's driver on it: the reboot chain leaves the driver alone.
    assert "gpu-driver" not in ok(node.run(reboot.check_script(NODE, None))).stdout


@pytest.mark.slow
def test_an_argument_added_or_dropped_needs_a_boot_and_an_unchanged_one_does_not(
        tmp_path: Path) -> None:
    def with_args(*args: str):
        return dataclasses.replace(NODE, template=NODE.template.model_copy(
            update={"kernel_args": args}))

    node = gpu_node(tmp_path)
    node.cmdline.write_text(node.cmdline.read_text().rstrip("\n") + " iommu=pt\n")
    ok(node.run(host_scripts.prepare_gpu_node(CLUSTER, NODE, CLUSTER_KEY)))
    # DGX OS already booted with iommu=pt: staging it again needs no boot.
    assert reboot.REBOOT_REQUIRED not in ok(node.run(reboot.check_script(NODE, DRIVER))).stdout

    added = with_args("iommu=pt", "init_on_alloc=0")
    ok(node.run(host_scripts.prepare_gpu_node(CLUSTER, added, CLUSTER_KEY)))
    check = ok(node.run(reboot.check_script(added, DRIVER))).stdout
    assert "kernel-argument:init_on_alloc=0" in check
    ok(node.run(reboot.reboot_script(added, DRIVER)))
    node.reboot()
    ok(node.run(reboot.after_boot_script(added, DRIVER)))

    # Dropped again: /proc/cmdline still has it, only the changed file says a boot is due.
    ok(node.run(host_scripts.prepare_gpu_node(CLUSTER, NODE, CLUSTER_KEY)))
    check = ok(node.run(reboot.check_script(NODE, DRIVER))).stdout
    assert f"{reboot.REBOOT_REQUIRED} staged-boot-changes" in check
