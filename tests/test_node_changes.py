"""Hardware changes preview as exactly the work they need, on a copy of the prod stack.

Each test renders a baseline, makes the change an operator would make (stack file and
inventory), previews, and reads `build/prod/diff.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.project import NODE_RESOURCES, REPO, run_offline
from support.stack_edits import edit_inventory, edit_stack, render_baseline, seven_nodes

# Every test renders a baseline of a copy of prod and previews the change: two previews.
pytestmark = pytest.mark.slow

REBOOT_CHAIN = ("{h}-reboot-check", "{h}-reboot-drain", "{h}-reboot", "{h}-reboot-wait",
                "{h}-reboot-uncordon")
GPU_NODES = [f"gpu-node-{i:02d}" for i in range(8)]


def preview(project: Path) -> tuple[list[dict[str, Any]], str]:
    proc = run_offline(project, "preview")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((project / "build/prod/diff.json").read_text()), proc.stdout


def names(diff: list[dict[str, Any]], action: str) -> set[str]:
    return {c["name"] for c in diff if c["action"] == action}


# What must change besides the node's own resources when a node joins or leaves: its leaves'
# port descriptions (and the fabric facts the policies read), both subnet managers' GUID
# lists, its SU's HyperNode and the acceptance queue's GPU capacity (updates), and the NCCL
# test over every node, which Kubeflow cannot resize in place and the stack therefore
# resubmits, its gate with it (replacements). Training keeps its own size. Nothing else.
SHARED_UPDATES = {"leaf-su1-r0-1-config", "leaf-su1-r2-3-config", "leaf-su1-r4-5-config",
                  "leaf-su1-r6-7-config", "sm-01-opensm", "sm-02-opensm", "fabric",
                  "hypernode-su1", "queue-acceptance",
                  # The kubelets each control plane's serving-certificate approver vouches for.
                  "mgmt-01-identities", "mgmt-02-identities", "mgmt-03-identities"}
SIZED_BY_NODE_COUNT = {"mpijob-training-nccl-allreduce", "nccl-allreduce-acceptance"}
# Replaced when the node joins or goes (not while it is decommissioned): its SU's planned rails,
# which the health checks read (pulumi-kubernetes replaces a ConfigMap whose data changes).
SU_RAILS = "configmap-kube-system-node-problem-detector-rails-su1"


def assert_only_shared_changes(diff: list[dict[str, Any]]) -> None:
    assert names(diff, "update") == SHARED_UPDATES
    assert names(diff, "replace") - {SU_RAILS} == SIZED_BY_NODE_COUNT
    assert {c["layer"] for c in diff if c["action"] == "replace"
            and c["name"] != SU_RAILS} == {"workloads"}


def rendered(project: Path, layer: str, type_slug: str, name: str) -> dict[str, Any]:
    return yaml.safe_load((project / "rendered/prod" / layer / type_slug / f"{name}.yaml")
                          .read_text())


def test_removing_a_worker_drains_it_before_the_reset(project: Path) -> None:
    render_baseline(project)
    edit_stack(project, seven_nodes)
    edit_inventory(project, lambda rows: [r for r in rows if not r.startswith("gpu-node-07,")])
    diff, text = preview(project)

    assert names(diff, "delete") == {n.format(h="gpu-node-07") for n in NODE_RESOURCES}
    assert not names(diff, "create")
    assert_only_shared_changes(diff)
    assert text.index("Physical changes") < text.index("Other changes")

    # The delete order Pulumi follows is the reverse of the dependencies: the control-plane
    # side (cordon, drain, delete Node) goes first, the worker's reset after it succeeded.
    cmd = "command-remote-Command"
    member = rendered(project, "bootstrap", cmd, "gpu-node-07-member")
    join = rendered(project, "bootstrap", cmd, "gpu-node-07-kubeadm-join")
    assert join["urn"] in member["options"]["dependsOn"]
    assert "kubectl drain gpu-node-07" in member["inputs"]["delete"]
    assert "kubectl cordon gpu-node-07" in member["inputs"]["delete"]
    assert "kubeadm reset" in join["inputs"]["delete"]
    assert "kubeadm reset" not in member["inputs"]["delete"]
    assert "delete" not in rendered(project, "hardware", cmd, "gpu-node-07-prepare")["inputs"]


def test_the_control_plane_can_never_be_reset(project: Path) -> None:
    render_baseline(project)
    init = rendered(project, "bootstrap", "command-remote-Command", "mgmt-01-kubeadm-init")
    assert init["options"]["protect"] is True
    assert "delete" not in init["inputs"]
    for path in (project / "rendered/prod").rglob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        if "kubeadm reset" in str(doc["inputs"].get("delete", "")):
            assert doc["name"].startswith("gpu-node-"), doc["name"]


def test_replacing_a_node_changes_only_that_node_and_the_sm_files(project: Path) -> None:
    render_baseline(project)
    # Same hostname, new chassis: every HCA port GUID of gpu-node-03 changes.
    edit_inventory(project, lambda rows: [
        r.replace(",0xb83fd20300a4", ",0xb83fd20300e4") if r.startswith("gpu-node-03,") else r
        for r in rows])
    diff, _ = preview(project)
    # The subnet managers' files, and the GUIDs the fabric publishes (a component: nothing runs).
    assert names(diff, "update") == {"sm-01-opensm", "sm-02-opensm", "fabric"}
    assert not names(diff, "create") | names(diff, "delete") | names(diff, "replace")
    changed = "\n".join(line for c in diff for d in c["textDiffs"].values() for line in d)
    assert "0xb83fd20300e4" in changed and "gpu-node-02" not in changed


def test_adding_a_worker_touches_only_it_and_the_shared_resources(project: Path) -> None:
    edit_stack(project, seven_nodes)
    full_inventory = (project / "inventory/prod.csv").read_text()
    edit_inventory(project, lambda rows: [r for r in rows if not r.startswith("gpu-node-07,")])
    render_baseline(project)
    (project / "Pulumi.prod.yaml").write_text((REPO / "Pulumi.prod.yaml").read_text())
    (project / "inventory/prod.csv").write_text(full_inventory)
    diff, _ = preview(project)

    assert names(diff, "create") == {n.format(h="gpu-node-07") for n in NODE_RESOURCES}
    assert not names(diff, "delete")
    assert_only_shared_changes(diff)
    # Rails 6 and 7 on their 2-rail leaf, slot 7 of each rail's 16-port block.
    leaf = next(c for c in diff if c["name"] == "leaf-su1-r6-7-config")
    assert sorted(leaf["textDiffs"]["stdin"]) == sorted(
        line for k, hca in enumerate(("mlx5_10", "mlx5_11")) for line in (
            f"-no interface ib 1/{16 * k + 8} description",  # the free port had none
            f'+interface ib 1/{16 * k + 8} description "gpu-node-07 rail {6 + k} ({hca}) '
            '[optical cross-rack]"'))


def test_a_removed_node_leaves_no_stale_port_description(project: Path) -> None:
    """The switch CLI states every port: the ports gpu-node-07 frees get their description
    cleared, not left saying gpu-node-07 (MLNX-OS keeps a description until told otherwise)."""
    render_baseline(project)
    edit_stack(project, seven_nodes)
    edit_inventory(project, lambda rows: [r for r in rows if not r.startswith("gpu-node-07,")])
    diff, _ = preview(project)
    leaf = next(c for c in diff if c["name"] == "leaf-su1-r0-1-config")
    assert sorted(leaf["textDiffs"]["stdin"]) == sorted(
        line for k, hca in enumerate(("mlx5_0", "mlx5_3")) for line in (
            f'-interface ib 1/{16 * k + 8} description "gpu-node-07 rail {k} ({hca}) '
            '[optical cross-rack]"',
            f"+no interface ib 1/{16 * k + 8} description"))


def test_a_new_kernel_argument_reboots_every_gpu_node_one_at_a_time(project: Path) -> None:
    render_baseline(project)
    edit_stack(project, lambda c: c["gpuNodes"]["template"].__setitem__(
        "kernelArgs", ["iommu=pt", "init_on_alloc=0"]))
    diff, text = preview(project)
    assert names(diff, "update") == {f"{h}-prepare" for h in GPU_NODES}
    assert names(diff, "replace") == {n.format(h=h) for h in GPU_NODES for n in REBOOT_CHAIN}
    assert not names(diff, "create") | names(diff, "delete")
    prepare = next(c for c in diff if c["name"] == "gpu-node-03-prepare")
    assert any("init_on_alloc=0" in line for line in prepare["textDiffs"]["stdin"])
    runbook = text[text.index("Hardware-change runbook"):]
    assert "planned reboot of gpu-node-00, gpu-node-01" in runbook
    assert "one member is out at a time" in runbook and "drain" in runbook
    assert "applied in place" not in runbook


def test_a_change_without_a_boot_setting_reboots_nothing(project: Path) -> None:
    render_baseline(project)
    edit_stack(project, lambda c: c["storage"]["lustreClient"].__setitem__(
        "version", "2.15.8-1"))
    diff, text = preview(project)
    assert names(diff, "update") == {f"{h}-prepare" for h in GPU_NODES}
    assert not names(diff, "replace") | names(diff, "create") | names(diff, "delete")
    runbook = text[text.index("Hardware-change runbook"):]
    assert "planned reboot" not in runbook
    assert ("host preparation changes on 8 hosts (gpu-node-00 … gpu-node-07): applied in place"
            in runbook)


def test_a_new_board_is_drained_reseated_rejoined_with_a_fresh_token(project: Path) -> None:
    """Same hostname and address, new board: new port GUIDs, MAC and SSH host key in the
    inventory. The join runs again with a new token (the first expired long ago), the BMC
    settings are applied to the new BMC, and the runbook drains the node, names every cable to
    re-seat by switch port and the checks before it is uncordoned."""
    render_baseline(project)
    new_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBoardSwap" + "z" * 34
    edit_inventory(project, lambda rows: [
        ",".join([*r.split(",")[:3], r.split(",")[3].replace("0xb83fd20300a4", "0xb83fd20300e4"),
                  "5c:25:73:31:03:99", new_key]) if r.startswith("gpu-node-03,") else r
        for r in rows])
    diff, text = preview(project)
    assert {"gpu-node-03-join-token", "gpu-node-03-bmc"} <= names(diff, "replace")
    # The join runs again on the new board (its connection changed), with the new token: its
    # stdin (a secret the offline diff cannot see change) is not frozen by ignoreChanges.
    join = next(c for c in diff if c["name"] == "gpu-node-03-kubeadm-join")
    assert join["action"] == "update" and "connection" in join["paths"]
    join_doc = rendered(project, "bootstrap", "command-remote-Command", "gpu-node-03-kubeadm-join")
    assert "stdin" not in join_doc["options"]["ignoreChanges"]
    # Nothing of another node changes; the SM files learn the new port GUIDs.
    touched = {c["name"] for c in diff}
    assert not {n for n in touched if n.startswith("gpu-node-") and "gpu-node-03" not in n}
    assert {"sm-01-opensm", "sm-02-opensm"} <= names(diff, "update")
    runbook = text[text.index("Hardware-change runbook"):]
    step = next(line for line in runbook.splitlines() if "board replacement of gpu-node-03" in line)
    assert "kubectl drain gpu-node-03" in step and "kubectl uncordon gpu-node-03" in step
    # The new board's MAC gets the address only once the DHCP/PXE reservation has it.
    assert ("its management MAC is now 5c:25:73:31:03:99: first load build/prod/network/dhcp-hosts"
            in step)
    # Rail r of slot 3 sits at port 1 + (r mod 2) x 16 + 3 of its two-rail leaf.
    for r, leaf in enumerate(("r0-1", "r0-1", "r2-3", "r2-3", "r4-5", "r4-5", "r6-7", "r6-7")):
        assert f"rail {r}: leaf-su1-{leaf} port {1 + (r % 2) * 16 + 3}" in step
    assert "nodes drained: 1 (gpu-node-03)" in text


def test_decommissioning_drains_first_and_the_removal_follows(project: Path) -> None:
    """Two changes: marking gpu-node-07 for decommission cordons and drains it, and resizes
    what is sized by node count after the drain, with nothing physical; removing it later
    deletes only its own resources and changes the port maps and SM files, and nothing is
    resized a second time."""
    render_baseline(project)
    edit_stack(project, lambda c: c["gpuNodes"].__setitem__("decommission", ["gpu-node-07"]))
    diff, text = preview(project)
    assert names(diff, "create") == {"gpu-node-07-decommission"}
    assert names(diff, "replace") == SIZED_BY_NODE_COUNT
    assert not names(diff, "delete")
    assert names(diff, "update") == {"queue-acceptance"}  # 7 nodes of GPUs to test
    assert "nodes drained: 1 (gpu-node-07)" in text
    assert "decommission gpu-node-07: `pulumi up` cordons and drains it" in text

    render_baseline(project)  # the decommission was applied
    drain = rendered(project, "bootstrap", "command-remote-Command", "gpu-node-07-decommission")
    assert "kubectl drain gpu-node-07" in drain["inputs"]["create"]
    assert "delete" not in drain["inputs"]
    # The resized job waits for the drain.
    job = rendered(project, "workloads", "kubernetes-kubeflow.org-v1-MPIJob",
                   "mpijob-training-nccl-allreduce")
    assert drain["urn"] in job["options"]["dependsOn"]
    edit_stack(project, lambda c: (seven_nodes(c), c["gpuNodes"].pop("decommission")))
    edit_inventory(project, lambda rows: [r for r in rows if not r.startswith("gpu-node-07,")])
    diff, text = preview(project)
    assert names(diff, "delete") == {n.format(h="gpu-node-07") for n in NODE_RESOURCES} | {
        "gpu-node-07-decommission"}
    # Only its SU's planned rails, which lose it.
    assert names(diff, "replace") == {SU_RAILS} and not names(diff, "create")
    assert "gpu-node-07 leaves, drained by its decommission" in text


def test_removing_a_node_without_decommission_says_the_drain_comes_last(project: Path) -> None:
    render_baseline(project)
    edit_stack(project, seven_nodes)
    edit_inventory(project, lambda rows: [r for r in rows if not r.startswith("gpu-node-07,")])
    _, text = preview(project)
    assert "gpu-node-07 leaves without a decommission first" in text
    assert "list it in gpuNodes.decommission, apply, then remove it" in text


def test_decommissioning_an_unknown_node_is_refused(project: Path) -> None:
    edit_stack(project, lambda c: c["gpuNodes"].__setitem__("decommission", ["gpu-node-70"]))
    proc = run_offline(project, "preview")
    assert proc.returncode == 2
    assert "gpuNodes.decommission[0]: is not a GPU node of this stack (got 'gpu-node-70')" \
        in proc.stderr


def test_an_operator_driver_upgrade_waits_for_the_rollout(project: Path) -> None:
    """A new GPU driver the operator owns (driver: operator): the GPU Operator release changes
    and `pulumi up` waits, on the control plane, until its ClusterPolicy says every node runs
    it; the CRDs come with the chart's pre-upgrade hook. The network operator's wait is not
    re-run, and no planned reboot is involved."""
    edit_stack(project, lambda c: c["platform"]["gpuOperator"].__setitem__("driver", "operator"))
    render_baseline(project)
    edit_stack(project, lambda c: c["platform"]["gpuOperator"].__setitem__(
        "driverVersion", "580.105.08"))
    diff, text = preview(project)
    assert names(diff, "update") == {"gpu-operator"}
    assert names(diff, "replace") == {"gpu-operator-rollout"}
    wait = rendered(project, "platform", "command-remote-Command", "gpu-operator-rollout")
    assert ("kubectl --kubeconfig /etc/kubernetes/admin.conf wait "
            "clusterpolicies.nvidia.com/cluster-policy --for=jsonpath='{.status.state}'=ready"
            in wait["inputs"]["create"])
    release = rendered(project, "platform", "kubernetes-helm.sh-v3-Release", "gpu-operator")
    assert release["urn"] in wait["options"]["dependsOn"]
    assert release["inputs"]["values"]["operator"]["upgradeCRD"] is True
    step = next(line for line in text.splitlines() if "upgrade gpu-operator" in line)
    assert "waits (gpu-operator-rollout" in step and "ClusterPolicy reports ready" in step


def test_a_host_driver_upgrade_reboots_each_gpu_node_and_leaves_the_operator(
        project: Path) -> None:
    """The hosts own the driver (prod): a new release re-creates every GPU node's planned
    reboot chain and nothing of the GPU Operator."""
    render_baseline(project)
    edit_stack(project, lambda c: c["platform"]["gpuOperator"].__setitem__(
        "driverVersion", "580.105.08"))
    diff, text = preview(project)
    nodes = [f"gpu-node-{i:02d}" for i in range(8)]
    assert names(diff, "replace") == {f"{n}-{step}" for n in nodes for step in (
        "reboot-check", "reboot-drain", "reboot", "reboot-wait", "reboot-uncordon")}
    # The cluster's published driver release, which the pack and the impact read.
    assert names(diff, "update") == {"kubernetes"}
    assert "upgrade gpu-operator" not in text


def test_skipping_a_kubernetes_minor_or_going_back_is_refused_in_the_runbook(
        project: Path) -> None:
    edit_stack(project, lambda c: c["kubernetes"].__setitem__("version", "1.33.5"))
    render_baseline(project)
    edit_stack(project, lambda c: c["kubernetes"].__setitem__("version", "1.35.2"))
    proc = run_offline(project, "preview")
    # Refused, so the preview fails (exit 4): CI stops what `pulumi up` would fail on.
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "refused: Kubernetes 1.33.5 -> 1.35.2: kubeadm upgrades one minor" in proc.stderr
    assert "REFUSED Kubernetes 1.33.5 -> 1.35.2" in proc.stdout, proc.stdout + proc.stderr
    assert "  Kubernetes 1.33.5 -> 1.35.2: REFUSED, it skips a minor" in proc.stdout
    assert "set kubernetes.version to a 1.34 release first" in proc.stdout
    assert "kubeadm upgrade apply" not in proc.stdout
    edit_stack(project, lambda c: c["kubernetes"].__setitem__("version", "1.32.9"))
    back = run_offline(project, "preview")
    assert back.returncode == 4 and "REFUSED Kubernetes 1.33.5 -> 1.32.9" in back.stdout
