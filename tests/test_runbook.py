"""The preview prints the physical work a change needs, in a safe order."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from support.project import REPO, run_offline
from support.stack_edits import edit_inventory, edit_stack, render_baseline, seven_nodes

from components.planning import names
from offline.bench import scale_gpu_nodes
from offline.diff import Change, Diff
from offline.runbook import runbook

DGX_HCAS = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")


def book(project: Path, ok: tuple[int, ...] = (0,)) -> list[str]:
    proc = run_offline(project, "preview")
    assert proc.returncode in ok, proc.stdout + proc.stderr
    return (project / "build/prod/runbook.txt").read_text().splitlines()


def first(lines: list[str], needle: str) -> int:
    return next(i for i, line in enumerate(lines) if needle in line)


@pytest.mark.slow
def test_no_physical_change_no_runbook(project: Path) -> None:
    render_baseline(project)
    edit_stack(project, lambda c: c["workloads"]["inference"][0]["autoscaling"].update(
        maxReplicas=4))
    assert book(project) == [""]


@pytest.mark.slow
def test_remove_a_node(project: Path) -> None:
    render_baseline(project)
    edit_stack(project, seven_nodes)
    edit_inventory(project, lambda rows: [r for r in rows if not r.startswith("gpu-node-07,")])
    lines = book(project)
    pulls = [line for line in lines if line.strip().split(" ")[1:2] == ["pull"]]
    # Every rail of gpu-node-07: slot 7 on the four 2-rail leaves (prod pins railsPerLeaf 2:
    # rail k's block of 16 ports starts at 1 + (k mod 2) x 16), optical (its rack is r02).
    assert len(pulls) == 8
    for k, hca in enumerate(DGX_HCAS):
        leaf, port = f"leaf-su1-r{k // 2 * 2}-{k // 2 * 2 + 1}", 1 + (k % 2) * 16 + 7
        assert any(f"{leaf} port {port} <-> gpu-node-07 rail {k} ({hca})" in p for p in pulls)
    assert all("[optical cross-rack]" in p for p in pulls)
    # Not decommissioned first: the step says the drain comes last, before the reset, and
    # the cables come out after it.
    leaves = lines[first(lines, "gpu-node-07 leaves")]
    assert "its cordon and drain come last, then kubeadm reset on gpu-node-07" in leaves
    assert first(lines, "gpu-node-07 leaves") < first(lines, ". pull ")
    assert any("make verify-fabric" in line for line in lines)


@pytest.mark.slow
def test_add_a_node(project: Path) -> None:
    edit_stack(project, seven_nodes)
    full = (project / "inventory/prod.csv").read_text()
    edit_inventory(project, lambda rows: [r for r in rows if not r.startswith("gpu-node-07,")])
    render_baseline(project)
    (project / "Pulumi.prod.yaml").write_text((REPO / "Pulumi.prod.yaml").read_text())
    (project / "inventory/prod.csv").write_text(full)
    lines = book(project)
    assert sum(" plug " in f" {line} " for line in lines) == 8
    assert first(lines, "plug") < first(lines, "gpu-node-07 joins")
    assert not any("drain" in line and "gpu-node-0" in line for line in lines)
    # The check names what a passed gate leaves: no node still marked untested.
    assert any("NCCL acceptance gate passed" in line
               and "kubectl get nodes -l gpucluster.io/untested" in line for line in lines)


@pytest.mark.slow
def test_new_hcas_in_a_node_drain_it_once_and_change_the_sm_files(project: Path) -> None:
    """Every card of gpu-node-03 replaced (new port GUIDs, same host key and MAC): one drain and
    power-off for all eight, no cable moves, and the subnet managers learn the GUIDs while it
    is off."""
    render_baseline(project)
    edit_inventory(project, lambda rows: [
        r.replace(",0xb83fd20300a4", ",0xb83fd20300e4") if r.startswith("gpu-node-03,") else r
        for r in rows])
    lines = book(project)
    # One at a time, the standby first (the preview's plan holds the order `pulumi up` uses).
    sm = first(lines, "subnet-manager files change on sm-02, sm-01")
    assert ("the standby sm-02 first, back to STANDBY (sminfo) before the master sm-01 "
            "restarts" in lines[sm]), lines
    swap = first(lines, "HCA swap in gpu-node-03: rail 0 (mlx5_0, port GUID")
    assert all(f"rail {r} (" in lines[swap] for r in range(8))
    assert swap < sm < first(lines, "power on gpu-node-03")
    assert sum("kubectl drain gpu-node-03" in line for line in lines) == 1
    assert not any(w in line for line in lines for w in (" plug ", " pull "))


@pytest.mark.slow
def test_move_a_node_to_another_slot(project: Path) -> None:
    edit_stack(project, seven_nodes)
    edit_inventory(project, lambda rows: [r for r in rows if not r.startswith("gpu-node-07,")])
    render_baseline(project)
    edit_stack(project, lambda c: c["gpuNodes"].update(overrides={"gpu-node-06": {"slot": 7}}))
    lines = book(project)
    drain = first(lines, "cordon and drain gpu-node-06 before touching its cables")
    assert drain < first(lines, "move")
    moves = [line for line in lines if line.strip().split(" ")[1:2] == ["move"]]
    assert len(moves) == 8 and not any(" pull " in f" {line} " for line in lines)
    # Slot 6 -> 7: every rail moves one port up on its leaf.
    assert any("gpu-node-06 rail 0 (mlx5_0): leaf-su1-r0-1 port 7 -> leaf-su1-r0-1 port 8"
               in line for line in moves)


def _release(name: str) -> Change:
    return Change("update", f"urn:x::{name}", "kubernetes:helm.sh/v3:Release", name,
                  "platform", ["version"])


@pytest.mark.parametrize("order", [("gpu-operator", "network-operator"),
                                   ("network-operator", "gpu-operator")])
def test_operator_upgrades_network_first(order: tuple[str, str]) -> None:
    # A new GPU Operator release brings its driver DaemonSet: its upgrade controller takes the
    # GPU nodes as driver.upgradePolicy says. DOCA-OFED on the hosts (no NicClusterPolicy
    # ofedDriver) leaves the Network Operator nothing to drain.
    policy = {"autoUpgrade": True, "maxParallelUpgrades": 1, "drain": {"enable": True}}
    new_inputs = {"urn:x::gpu-operator": {"values": {"driver": {"upgradePolicy": policy}}},
                  "urn:x::gpu-node-00-reboot": {}, "urn:x::gpu-node-01-reboot": {}}
    lines = runbook(Diff([_release(n) for n in order]), new_inputs=new_inputs)
    assert first(lines, "upgrade network-operator") < first(lines, "upgrade gpu-operator")
    assert ("the GPU Operator updates 2 GPU nodes (gpu-node-00, gpu-node-01) 1 at a time: on "
            "each drains it") in lines[first(lines, "upgrade gpu-operator")]
    assert "DOCA-OFED is the hosts' own (no driver container), so no node is drained" in lines[
        first(lines, "upgrade network-operator")]


@pytest.mark.slow
def test_a_kubelet_change_is_uploaded_then_rolled_node_by_node(project: Path) -> None:
    render_baseline(project)
    edit_stack(project, lambda c: c["kubernetes"]["kubelet"].update(maxPods=200))
    lines = book(project)
    changes = json.loads((project / "build/prod/diff.json").read_text())
    # The guarded init re-runs as a no-op; only the ConfigMap upload does work. No node's
    # preparation or join changes.
    assert {(c["name"], c["action"]) for c in changes} == {
        ("kubelet-config", "update"), ("mgmt-01-kubeadm-init", "update")}
    upload = lines[first(lines, "uploads it to the kubelet-config ConfigMap")]
    roll = lines[first(lines, "roll it to")]
    assert first(lines, "uploads it") < first(lines, "roll it to")
    # Every kubelet of the cluster, the control planes' included.
    nodes = ", ".join([f"gpu-node-0{i}" for i in range(8)] + ["mgmt-01", "mgmt-02", "mgmt-03"])
    assert f"the 11 nodes already in the cluster ({nodes}), one node at a time" in roll
    assert "kubectl drain <node>" in roll and "kubeadm upgrade node phase kubelet-config" in roll
    assert "systemctl restart kubelet" in roll and "cpu_manager_state" not in roll
    assert "before any join" in upload
    assert not any("switch" in line for line in lines)  # `kubelet-config` is no switch
    assert not any("control-plane settings" in line for line in lines)


@pytest.mark.slow
def test_a_control_plane_setting_change_says_the_init_will_not_apply_it(project: Path) -> None:
    render_baseline(project)
    edit_stack(project, lambda c: c["kubernetes"].update(auditLogging=False))
    lines = book(project, ok=(0, 3))  # the pack may object to turning audit logging off
    changes = json.loads((project / "build/prod/diff.json").read_text())
    assert {(c["name"], c["action"]) for c in changes} == {("mgmt-01-kubeadm-init", "update")}
    (step,) = [line for line in lines if "control-plane settings change" in line]
    assert "mgmt-01-kubeadm-init" in step and "only at init" in step
    assert "one node at a time" in step
    assert not any("roll it to" in line for line in lines)


def _init_and_kubelet(line: str, **facts: tuple[str, str]) -> list[Change]:
    """The init script and the kubelet's upload with `line` changed, and the facts the
    kubeadm cluster publishes of it (path -> (old, new))."""
    cluster = Change("update", "urn:x::kubernetes", names.CLUSTER_TYPE, "kubernetes",
                     "bootstrap", [f"facts.{k}" for k in facts],
                     values={f"facts.{k}": v for k, v in facts.items()})
    return [Change("update", f"urn:x::{name}", "command:remote:Command", name, "bootstrap",
                   ["stdin"], text_diffs={"stdin": [line]})
            for name in ("mgmt-01-kubeadm-init", "kubelet-config")] + ([cluster] if facts else [])


def test_a_subnet_change_is_flagged_although_the_kubelet_upload_carries_it() -> None:
    lines = runbook(Diff(_init_and_kubelet("+  serviceSubnet: 10.97.0.0/12",
                                           serviceSubnet=("10.96.0.0/12", "10.97.0.0/12"))))
    assert any("control-plane settings change in mgmt-01" in line and
               "cannot change on a running cluster" in line for line in lines)


def test_a_kubelet_only_change_is_no_control_plane_change() -> None:
    lines = runbook(Diff(_init_and_kubelet("+maxPods: 200")))
    assert any("roll it to" in line for line in lines)
    assert not any("control-plane settings" in line for line in lines)


def test_a_cpu_manager_policy_change_removes_the_checkpoint_while_stopped() -> None:
    change = Change("update", "urn:x::kubelet-config", "command:remote:Command", "kubelet-config",
                    "bootstrap", ["stdin"], text_diffs={"stdin": [
                        "-cpuManagerPolicy: static", "+cpuManagerPolicy: none"]})
    cluster = Change("update", "urn:x::kubernetes", names.CLUSTER_TYPE, "kubernetes", "bootstrap",
                     ["facts.kubeletCpuManagerPolicy"],
                     values={"facts.kubeletCpuManagerPolicy": ("static", "none")})
    (roll,) = [line for line in runbook(Diff([change, cluster])) if "roll it to" in line]
    assert ("systemctl stop kubelet && rm -f /var/lib/kubelet/cpu_manager_state && "
            "systemctl start kubelet") in roll
    assert "every node already in the cluster" in roll


@pytest.mark.slow
def test_add_a_whole_su(project: Path) -> None:
    doc = scale_gpu_nodes(yaml.safe_load((project / "Pulumi.prod.yaml").read_text()), 32,
                          free_slots=2)
    stack = project / "Pulumi.prod.yaml"
    stack.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = run_offline(project, "preview", "--render")
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    bigger = copy.deepcopy(doc)
    cluster = bigger["config"]["gpu-cluster:cluster"]
    su2 = dict(cluster["gpuNodes"]["ranges"][0], start=32, count=30, su=2,
               managementIpStart="10.10.3.100", bmcAddressStart="10.11.3.100",
               racks=[f"su2-r{j:02d}" for j in range(1, 9)])
    cluster["gpuNodes"]["ranges"].append(su2)
    stack.write_text(yaml.safe_dump(bigger, sort_keys=False))
    lines = book(project, ok=(0, 3))
    for r in range(8):
        assert any(f"rack and power new switch leaf-su2-r{r}" in line for line in lines)
    plugs = [line for line in lines if line.strip().split(" ")[1:2] == ["plug"]]
    assert sum("gpu-node-" in p for p in plugs) == 30 * 8  # every rail of every new node
    # Racked and powered before anything is plugged into it, and before the nodes join.
    assert first(lines, "rack and power new switch") < first(lines, ". plug ")
    assert first(lines, "rack and power new switch") < first(lines, "gpu-node-32 joins")


def test_a_switch_to_switch_cable_is_listed_once() -> None:
    def port_map(switch: str, line: str) -> Change:
        return Change("update", f"urn:x::{switch}-config", "command:remote:Command",
                      f"{switch}-config", "fabric", ["stdin"], [], {"stdin": [line]})

    lines = runbook(Diff([
        port_map("leaf-su1-r0", '+interface ib 1/33 description "spine-01 port 1 [dac in-rack]"'),
        port_map("spine-01", '+interface ib 1/1 description "leaf-su1-r0 port 33 [dac in-rack]"'),
    ]))
    plugs = [line for line in lines if " plug " in f" {line} "]
    assert plugs == ["  1. plug   leaf-su1-r0 port 33 <-> spine-01 port 1  [dac in-rack]"]


def test_changed_join_settings_of_joined_nodes_are_called_out() -> None:
    joins = [Change("update", f"urn:x::gpu-node-0{i}-kubeadm-join", "command:remote:Command",
                    f"gpu-node-0{i}-kubeadm-join", "bootstrap", ["create"], text_diffs={"create": [
                        "-  - effect: NoSchedule", "+  - effect: NoExecute"]}) for i in range(3)]
    (step,) = [line for line in runbook(Diff(joins)) if "join settings change" in line]
    assert "3 joined nodes (gpu-node-00 … gpu-node-02)" in step
    assert "only when a node joins" in step
    # A join whose only change is outside its script (e.g. a dependency) needs no step.
    quiet = Change("update", "urn:x::gpu-node-00-kubeadm-join", "command:remote:Command",
                   "gpu-node-00-kubeadm-join", "bootstrap", ["delete"])
    assert runbook(Diff([quiet])) == []


def test_the_master_subnet_manager_is_the_one_the_fabric_publishes() -> None:
    """prod: sm-01 (priority 15) is the master, sm-02 (14) its standby, as the fabric
    component publishes them; the runbook moves and restarts the standby first."""
    from offline.replacements import sm_roles

    doc = yaml.safe_load((REPO / "rendered/prod/fabric/gpucluster-fabric-InfinibandFabric"
                          / "fabric.yaml").read_text())
    assert sm_roles({doc["urn"]: doc["inputs"]}) == {"sm-01": "master", "sm-02": "standby"}
