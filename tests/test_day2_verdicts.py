"""Day-2 changes as an on-call engineer makes them, each on a copy of prod previewed against
what prod has deployed: the exit status a CI gate acts on, the impact lines a reviewer reads
first and the runbook a technician follows.

The expected values are what the change does on hardware: kubeadm's version skew policy
(upgrades one minor at a time, never back), sshd refusing a key no host authorises, the
planned reboot chain (each node drained before it reboots), the GPU Operator's driver upgrade
controller (`driver.upgradePolicy`: one node at a time, waiting for the training pods, then a
drain), pulumi-command re-running a command whose login changes, and nothing else.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.project import copy_deployed, prod_raw, run_offline
from support.stack_edits import edit_inventory, edit_stack

pytestmark = pytest.mark.slow

GPU_NODES = [f"gpu-node-{i:02d}" for i in range(8)]
SPAN = "gpu-node-00 … gpu-node-07"
PROD_KEY = prod_raw()["credentials"]["sshPublicKey"]
NEW_KEY = Ed25519PrivateKey.generate().public_key().public_bytes(
    serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode() + " ops@next"


@dataclass(frozen=True)
class Scenario:
    change: Callable[[dict[str, Any]], None]
    status: int  # the preview's exit status
    impact: tuple[str, ...] = ()  # lines the impact holds
    not_in_impact: tuple[str, ...] = ()
    runbook: tuple[str, ...] = ()  # fragments the runbook holds, in this order
    not_in_runbook: tuple[str, ...] = ()
    before: Callable[[dict[str, Any]], None] | None = None  # what prod already has
    stderr: tuple[str, ...] = field(default=())
    inventory: Callable[[list[str]], list[str]] | None = None  # its rows, edited


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(cluster: dict[str, Any]) -> None:
        *parents, key = path.split(".")
        node = cluster
        for p in parents:
            node = node[p]
        node[key] = value
    return change


def _kernel_args(cluster: dict[str, Any]) -> None:
    cluster["gpuNodes"]["template"]["kernelArgs"] = ["iommu=pt", "init_on_alloc=0"]


def _rotate_key(cluster: dict[str, Any]) -> None:
    cluster["credentials"].update(sshPublicKey=NEW_KEY, sshAuthorizedKeys=[PROD_KEY])


OLD_GUID, NEW_GUID = "0xb83fd20300a43c14", "0xb83fd20300a4ffee"


BOARD_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBoardSwap" + "z" * 34
NEW_MAC = "5c:25:73:31:03:99"


def _new_board(keep_os: bool) -> Callable[[list[str]], list[str]]:
    """gpu-node-03's board replaced: a new management MAC and, unless its OS drives moved
    to the new board with it, a new SSH host key (its port GUIDs are the new board's too)."""
    def rows(lines: list[str]) -> list[str]:
        out = []
        for r in lines:
            cells = r.split(",")
            if r.startswith("gpu-node-03,"):
                cells[3] = cells[3].replace("0xb83fd20300a4", "0xb83fd20300e4")
                cells[4] = NEW_MAC
                cells[5] = cells[5] if keep_os else BOARD_KEY
            out.append(",".join(cells))
        return out
    return rows


def _host_board(name: str) -> Callable[[dict[str, Any]], None]:
    """A control plane's or subnet manager's board replaced (its OS reinstalled)."""
    def change(cluster: dict[str, Any]) -> None:
        host = next(h for h in cluster["hosts"] if h["hostname"] == name)
        host["sshHostKey"] = BOARD_KEY
    return change


def _one_control_plane(cluster: dict[str, Any]) -> None:
    """A cluster built with a single control plane at its own address (no VIP)."""
    cluster["hosts"] = [h for h in cluster["hosts"]
                        if h["hostname"] not in ("mgmt-02", "mgmt-03")]
    cluster["kubernetes"]["controlPlaneEndpoint"] = {"port": 6443}


def _three_control_planes(cluster: dict[str, Any]) -> None:
    """Prod's three control planes behind their VIP, on a cluster built with one."""
    prod = prod_raw()
    cluster["hosts"] = [h for h in prod["hosts"] if h["role"] == "control-plane"] + [
        h for h in cluster["hosts"] if h["role"] != "control-plane"]
    cluster["kubernetes"]["controlPlaneEndpoint"] = prod["kubernetes"]["controlPlaneEndpoint"]


def _new_leaf(cluster: dict[str, Any]) -> None:
    """leaf-su1-r2-3 replaced under RMA: the new chassis's GUID and management host key."""
    fabric = cluster["fabric"]
    fabric["switchGuids"]["leaf-su1-r2-3"] = "0xfc6a1c0300b29999"
    fabric["switchHostKeys"]["leaf-su1-r2-3"] = BOARD_KEY


def _new_hca(rows: list[str]) -> list[str]:
    """gpu-node-03's rail-2 card replaced: its row with the new card's port GUID."""
    return [r.replace(OLD_GUID, NEW_GUID) if r.startswith("gpu-node-03,2,") else r for r in rows]


def _ninth_node(cluster: dict[str, Any]) -> None:
    (nodes,) = cluster["gpuNodes"]["ranges"]
    nodes["count"] += 1
    nodes["racks"].append("r03")


def _ninth_node_rows(lines: list[str]) -> list[str]:
    """gpu-node-08's rows: its own port GUIDs, MAC and host key (docs/day2.md adds it)."""
    new = [",".join(["gpu-node-08", *r.split(",")[1:3],
                     r.split(",")[3].replace("a83c", "a93c"),
                     "5c:25:73:31:08:10", BOARD_KEY])
           for r in lines if r.startswith("gpu-node-07,")]
    return [*lines, *new]


def _moved(rack: str | None, slot: int) -> Callable[[dict[str, Any]], None]:
    """gpu-node-03 moved to another slot (and rack): an override of its place."""
    def change(cluster: dict[str, Any]) -> None:
        place: dict[str, Any] = {"slot": slot} | ({"rack": rack} if rack else {})
        cluster["gpuNodes"]["overrides"] = {**(cluster["gpuNodes"].get("overrides") or {}),
                                            "gpu-node-03": place}
        if rack:
            cluster["gpuNodes"]["ranges"][0]["racks"].append(rack)
    return change


# The gate's run waits this long for its nodes' GPUs: timeoutMinutes (30) and 5 for the pods.
WAIT = "up to 35 min"


SCENARIOS: dict[str, Scenario] = {
    # kubeadm upgrade apply refuses a version below the cluster's and a skipped minor:
    # `pulumi up` would fail part-way, after the host preparation was already re-run.
    "kubernetes-downgrade": Scenario(
        _set("kubernetes.version", "1.34.3"), 4,
        impact=("  Kubernetes 1.35.2 -> 1.34.3: REFUSED, it skips a minor or goes back "
                "(kubeadm's version skew policy)",),
        runbook=("REFUSED Kubernetes 1.35.2 -> 1.34.3",),
        stderr=("refused: Kubernetes 1.35.2 -> 1.34.3: kubeadm upgrades one minor version at "
                "a time and never back",)),
    # A patch release: kubeadm's upgrade, the control plane first, then each GPU node drained
    # in turn (kubernetes.upgradeBatch 1) and uncordoned once its kubelet reports it.
    "kubernetes-patch": Scenario(
        _set("kubernetes.version", "1.35.3"), 0,
        impact=("  Kubernetes 1.35.2 -> 1.35.3: `pulumi up` runs kubeadm's upgrade: the control "
                "plane, then the GPU nodes one at a time, each drained",
                "  nodes drained: 11 (gpu-node-00 … mgmt-03), each in turn for the upgrade",
                # Three stacked etcd members: one drained at a time keeps a quorum of two.
                "  outage: each node's jobs are evicted in turn; the control planes upgrade one "
                "at a time (etcd keeps its quorum, the API stays up behind the VIP, DNS and the "
                "ingress keep a replica on another control plane)"),
        not_in_impact=("outage: none expected", "REFUSED"),
        # A Kubeflow job suspends through runPolicy.suspend; a batch waits a bounded time.
        runbook=("'{\"spec\":{\"runPolicy\":{\"suspend\":true}}}'",
                 "kubeadm upgrade apply -y v1.35.3 on mgmt-01",
                 "kubeadm upgrade node on each further control plane, one at a time (mgmt-02, "
                 "mgmt-03)", "the GPU nodes one at a time",
                 "gpu-node-00, then gpu-node-01",
                 "waited for, up to 30 min (kubernetes.gangWaitMinutes), never split"),
        # The control planes' joins carry the version too: the upgrade applies it, no hand step.
        not_in_runbook=("vcctl", "join settings change")),
    # With one control plane its drain for the kubelet leaves CoreDNS and the ingress
    # controller nowhere to run (every other node carries the GPU taint).
    "kubernetes-patch-one-control-plane": Scenario(
        _set("kubernetes.version", "1.35.3"), 0, before=_one_control_plane,
        impact=("  outage: each node's jobs are evicted in turn; the only control plane's drain "
                "for its kubelet takes cluster DNS and the ingress down for minutes, and its "
                "API blips while it upgrades",)),
    # kubeadm: "Turning a single control plane cluster created without
    # --control-plane-endpoint into a highly available cluster is not supported" (its
    # certificates and every kubeconfig name the first host's address).
    "control-planes-added-to-a-single-one": Scenario(
        _three_control_planes, 4, before=_one_control_plane,
        impact=("  REFUSED control-plane endpoint 10.10.0.10:6443 -> 10.10.0.5:6443: kubeadm "
                "init wrote 10.10.0.10:6443 into the API server's certificate and every "
                "kubeconfig, and kubeadm cannot move a running cluster to another endpoint (nor "
                "turn one control plane into several); keep kubernetes.controlPlaneEndpoint, or "
                "build the new cluster as a new stack (docs/day2.md, \"Control planes\")",),
        runbook=("REFUSED control-plane endpoint",),
        stderr=("refused: control-plane endpoint 10.10.0.10:6443 -> 10.10.0.5:6443",)),
    "kubernetes-patch-back": Scenario(
        _set("kubernetes.version", "1.35.1"), 4,
        impact=("  Kubernetes 1.35.2 -> 1.35.1: REFUSED, it skips a minor or goes back "
                "(kubeadm's version skew policy)",)),
    # sshd on every host knows only the old key: every command would fail to log in.
    "ssh-key-not-yet-authorised": Scenario(
        _set("credentials.sshPublicKey", NEW_KEY), 4,
        runbook=("REFUSED SSH key rotation",),
        stderr=("refused: SSH key rotation",)),
    # The second half of a rotation: the key every host already authorises. The commands log
    # in differently and run the same scripts: no drain, no opensm restart, no kubelet roll.
    "ssh-key-rotation": Scenario(
        _rotate_key, 0, before=_set("credentials.sshAuthorizedKeys", [NEW_KEY]),
        impact=("  nodes drained: 0", "  outage: none expected"),
        runbook=("SSH key rotation",),
        not_in_runbook=("drain", "opensm", "kubelet", "host preparation", "NCCL")),
    # A ConnectX card is not hot-swappable: the node is drained and powered off, and its rail's
    # link is down until it is back. The subnet managers learn the new GUID while it is off
    # (earlier, the old card would leave its partitions under running work).
    "hca-swap": Scenario(
        lambda cluster: None, 0, inventory=_new_hca,
        impact=(f"  HCA replaced: gpu-node-03 rail 2 (mlx5_4) {OLD_GUID} -> {NEW_GUID}: "
                "gpu-node-03 is drained and powered off for the swap; its link (leaf-su1-r2-3 "
                "port 4) is down until it is back",
                "  nodes drained: 1 (gpu-node-03), for its HCA swap"),
        not_in_impact=("no cable, switch or node is touched", "outage: none expected"),
        runbook=(f"HCA swap in gpu-node-03: rail 2 (mlx5_4, port GUID {OLD_GUID} -> {NEW_GUID}, "
                 "cabled to leaf-su1-r2-3 port 4)", "kubectl drain gpu-node-03",
                 "power it off", "subnet-manager files change on sm-02, sm-01",
                 # Standby first: the fabric never loses its master, nothing waits for a window.
                 "the fabric keeps a master throughout, so running work is not interrupted",
                 "power on gpu-node-03", f"`ibstat mlx5_4` port GUID {NEW_GUID}",
                 # Re-seated cables are tested before work lands there again.
                 "kubectl label node gpu-node-03 gpucluster.io/untested=true",
                 "kubectl uncordon gpu-node-03", "pulumi up --replace '",
                 "nccl-allreduce-acceptance'"),
        not_in_runbook=("(maintenance window)",)),
    # A new board behind the same name: drained (a GPU node), its cables re-seated where they
    # were, the new MAC's DHCP reservation loaded before power-on, a fresh join.
    "board-gpu-node": Scenario(
        lambda cluster: None, 0, inventory=_new_board(keep_os=False),
        impact=("  board replaced: gpu-node-03: drained and powered off for the swap; its fabric "
                "links are down until it is back", "  nodes drained: 1 (gpu-node-03)",
                # It re-joins untested: the gate tests it with one node that passed.
                "  acceptance test: gpu-node-03 untested (no training or serving lands there) "
                "until a run passes on it with one GPU node of each SU that passed before (a "
                f"free one if any): {WAIT} for its GPUs, else `pulumi up` fails and it stays "
                "closed to work"),
        not_in_impact=("HCA replaced",),
        runbook=(f"board replacement of gpu-node-03: its management MAC is now {NEW_MAC}: "
                 "first load build/prod/network/dhcp-hosts", "kubectl drain gpu-node-03",
                 "rail 0: leaf-su1-r0-1 port 4", "kubectl uncordon gpu-node-03")),
    # The OS drives moved to the new board: the host key stays, only the MAC (and GUIDs) change.
    "board-keeping-its-os": Scenario(
        lambda cluster: None, 0, inventory=_new_board(keep_os=True),
        impact=("  nodes drained: 1 (gpu-node-03)",),
        not_in_impact=("no cable, switch or node is touched", "HCA replaced"),
        runbook=("board replacement of gpu-node-03", "kubectl drain gpu-node-03")),
    # The master subnet manager's host: no kubectl (not a node); the standby takes over first;
    # its one fabric cable re-seated.
    "board-sm-host": Scenario(
        _host_board("sm-01"), 0,
        impact=("  nodes drained: 0", "  outage: none for running work: the fabric keeps a "
                "master subnet manager throughout"),
        runbook=("board replacement of sm-01, the master subnet manager's host (not a "
                 "Kubernetes node: nothing to drain)", "then stop opensm here",
                 "mlx5_0: leaf-su1-r0-1 port 16"),
        not_in_runbook=("kubectl drain", "DGX OS", "join")),
    # One of three stacked etcd members: the quorum (two) holds; its system pods move first.
    "board-control-plane": Scenario(
        _host_board("mgmt-02"), 0,
        impact=("  outage: none for running work: mgmt-02 is one of 3 control planes (etcd keeps "
                "its quorum, the API stays up behind the VIP, DNS and the ingress keep a replica "
                "on another control plane)",),
        runbook=("board replacement of mgmt-02, one of 3 control planes", "etcdctl snapshot save",
                 "kubectl drain mgmt-02", "etcdctl member remove", "kubectl uncordon mgmt-02"),
        not_in_runbook=("DGX OS", "the only control plane")),
    # The only control plane: etcd, the API, DNS and the ingress go down with it.
    "board-only-control-plane": Scenario(
        _host_board("mgmt-01"), 0, before=_one_control_plane,
        impact=("  outage: the Kubernetes API, cluster DNS and the ingress are down while mgmt-01 "
                "is swapped: it is the only control plane (running pods keep running; nothing "
                "new starts)",),
        runbook=("board replacement of mgmt-01, the only control plane", "etcdctl snapshot save",
                 "/etc/kubernetes/pki"),
        not_in_runbook=("kubectl drain", "DGX OS")),
    # A leaf under RMA: every port on it goes down (rails 2 and 3 of every node of the SU, a
    # subnet manager's link, the uplinks); the new chassis needs its address and password
    # before `pulumi up` can log in; every cable goes to the same port.
    "switch-rma": Scenario(
        _new_leaf, 0,
        impact=("  switch replaced: leaf-su1-r2-3 (GUID 0xfc6a1c0300a20002 -> "
                "0xfc6a1c0300b29999): its 50 links are down while it is swapped: rails 2, 3 of "
                f"8 GPU nodes ({SPAN}), the subnet-manager link of sm-02, the storage link of "
                "lustre-01 port1, 32 uplinks; its nodes are drained first",
                f"  nodes drained: 8 ({SPAN}), for the switch swap",
                # Every link of theirs is re-made on a new chassis: tested before work returns,
                # all of them together (no node that passed is left to pair them with).
                f"  acceptance test: {SPAN} re-cabled: marked untested at the drain (no "
                "training or serving lands there), tested after the uncordon by a re-run of "
                "the gate together (every GPU node: all their GPUs, a maintenance window): "
                f"{WAIT} for their GPUs, else they stay closed to work"),
        not_in_impact=("no cable, switch or node is touched", "outage: none expected"),
        runbook=("switch replacement of leaf-su1-r2-3", "the admin password (the "
                 "switchPassword secret)", "kubectl drain the 8 nodes",
                 "mark them untested (kubectl label node gpu-node-00 gpu-node-01",
                 "gpucluster.io/untested=true)", "port 1: gpu-node-00 "
                 "rail 2 (mlx5_4)", "port 16: sm-02 mlx5_0", "then uncordon the nodes",
                 "subnet-manager files change", f"test the re-cabled {SPAN}",
                 "pulumi up --replace '", "nccl-allreduce-acceptance'",
                 "the NCCL acceptance gate passed")),
    "switch-password": Scenario(
        _set("credentials.switchPasswordVersion", 2), 0,
        impact=("  nodes drained: 0", "  outage: none expected"),
        runbook=("switch password rotation",), not_in_runbook=("drain", "NCCL")),
    # The quarantine's limit raised: the control planes get the new policy; nothing is drained
    # by the change, but from then on a third sick node leaves service on its own.
    "quarantine-limit": Scenario(
        _set("health", {"quarantine": {"maxNodes": 3}}), 0,
        impact=("  node quarantine changes: at most 2 -> 3 nodes at once", "  nodes drained: 0",
                "  outage: none from this change; from then on a GPU node the health checks "
                "find unfit leaves service on its own, as above"),
        not_in_impact=("no running work is drained", "planned reboots:")),
    # Health checks turned on in a running cluster: a detector pod per GPU node and the
    # quarantine on the control planes; nothing drains now, an unfit node does from then on.
    "health-on": Scenario(
        _set("health", {"enabled": True}), 0,
        before=_set("health", {"enabled": False}),
        impact=("  node health detector starts on every GPU node (node-problem-detector, a pod "
                "each; nothing is drained or restarted): from its first checks it sets the "
                "conditions of docs/health.md on the Node objects",
                "  node quarantine starts on the control planes: from its first pass a GPU node "
                "with GPUFallenOffBus, GPUNeedsReset, GPUHealthFailure, NVLinkDown, "
                "NVSwitchFabricNotReady, InfinibandRailDown, RAIDDegraded is tainted and "
                "drained (each Kubeflow gang on it suspended whole, resumed elsewhere), one "
                "with InfinibandRailDegraded, InfinibandRailErrors only tainted NoSchedule; at "
                "most 2 nodes at once, never a control plane or a subnet manager's host",
                "  nodes drained: 0",
                "  outage: none from this change; from then on a GPU node the health checks "
                "find unfit leaves service on its own, as above"),
        not_in_impact=("no running work is drained", "planned reboots:")),
    # And off: both go; nothing leaves service on its own any more.
    "health-off": Scenario(
        _set("health", {"enabled": False}), 0,
        impact=("  node health detector stops on every GPU node: the conditions it set stay on "
                "the Node objects as they are, and none is set or cleared any more",
                "  node quarantine stops: no GPU node is taken out of service automatically "
                "any more (nodes it tainted stay tainted until released)", "  nodes drained: 0",
                "  outage: none from this change; from then on an unfit GPU node stays in "
                "service until a person takes it out"),
        not_in_impact=("leaves service on its own", "planned reboots:")),
    # A kernel argument applies at boot: each GPU node goes through the reboot chain, drained
    # before its reboot, one cluster member at a time.
    "kernel-args": Scenario(
        _kernel_args, 0,
        impact=(f"  nodes drained: 8 ({SPAN}), each in turn before its reboot",
                f"  planned reboots: 8 ({SPAN}), one cluster member at a time",
                "  outage: one node at a time leaves service; a node drained for its reboot "
                "has its jobs evicted (a training gang restarts from its last checkpoint); "
                "serving keeps its other replicas"),
        not_in_impact=("outage: none expected",),
        runbook=("planned reboot of " + ", ".join(GPU_NODES), "check -> drain -> reboot")),
    # An operator release with the hosts owning the driver: only its node agents roll.
    "gpu-operator-release": Scenario(
        _set("platform.gpuOperator.version", "v26.7.0"), 0,
        impact=("  gpu-operator v26.3.2 -> v26.7.0: the hosts' own driver (driver.enabled is "
                "off; the hosts' planned reboots install its releases): its node agents roll "
                "one node at a time, no drain", "  nodes drained: 0"),
        not_in_impact=("driver DaemonSet", "planned reboots:")),
    # A ninth node: it joins untested and is tested with one free node that passed, not with
    # every GPU of a busy cluster (training holds four nodes, serving two or three).
    "add-node": Scenario(
        _ninth_node, 0, inventory=_ninth_node_rows,
        impact=("  nodes added: 1 (gpu-node-08)", "  nodes drained: 0",
                "  acceptance test: gpu-node-08 untested (no training or serving lands there) "
                "until a run passes on it with one GPU node of each SU that passed before (a "
                f"free one if any): {WAIT} for its GPUs, else `pulumi up` fails and it stays "
                "closed to work"),
        not_in_impact=("queued until", "jobs resubmitted"),
        runbook=("gpu-node-08 joins: before it powers on", "NCCL acceptance gate passed")),
    # Step 1 of a removal: the node drained, the test's definition shrinks; nothing to test.
    "decommission": Scenario(
        _set("gpuNodes.decommission", ["gpu-node-07"]), 0,
        impact=("  acceptance test: re-checked, nothing to run (every GPU node has passed this "
                "test)",)),
    # The test itself changed: the new test on two free nodes; all of them is a maintenance
    # window, not something a `pulumi up` on a busy cluster waits for.
    "nccl-test-changed": Scenario(
        _set("workloads.ncclTest.maxBytes", "8G"), 0,
        impact=("  acceptance test: the test changed: a run on two GPU nodes of one SU that "
                f"passed before (free ones if any), {WAIT} for their GPUs; every node again is "
                "a maintenance window (docs/acceptance.md)", "  nodes drained: 0"),
        not_in_impact=("jobs resubmitted",)),
    # Another slot: its cables move port for port, and its IPoIB addresses follow the slot
    # (so do its Lustre NIDs, <address>@o2ib): LNet cannot move an interface under a mount.
    "slot-move": Scenario(
        _moved(None, 9), 0,
        impact=("  existing links moved: 8 (the fabric is re-cabled: every host on them is "
                "drained)", "  nodes drained: 1 (gpu-node-03)",
                "  addresses change: gpu-node-03's IPoIB addresses 172.20.128.4 -> "
                "172.20.128.10 and 7 more rails: its Lustre NIDs change with them (the servers "
                "see a new client; the old NIDs' exports expire)",
                # Its links are new: tested with a node that passed before work lands there.
                "  acceptance test: gpu-node-03 re-cabled: marked untested at the drain (no "
                "training or serving lands there), tested after the uncordon by a re-run of "
                "the gate with one GPU node of each SU that passed before (a free one if any): "
                f"{WAIT} for its GPUs, else it stays closed to work"),
        not_in_impact=("re-checked, nothing to run",),
        runbook=("kubectl drain gpu-node-03",
                 "kubectl label node gpu-node-03 gpucluster.io/untested=true",
                 "`mount -t lustre` on gpu-node-03 must list "
                 "nothing", "move   gpu-node-03 rail 0 (mlx5_0): leaf-su1-r0-1 port 4 -> "
                 "leaf-su1-r0-1 port 10  [optical in-rack]", "uncordon the drained nodes",
                 "test the re-cabled gpu-node-03", "pulumi up --replace '",
                 "nccl-allreduce-acceptance'", "the NCCL acceptance gate passed"),
        not_in_runbook=("a new cable",)),
    # Another rack, away from the switches' (fabric.switchRack r01): its in-rack cables no
    # longer reach; each moved link needs a cross-rack one.
    "rack-move": Scenario(
        _moved("r03", 9), 0,
        impact=("  existing links moved: 8 (the fabric is re-cabled: every host on them is "
                "drained); 8 need a new cable (8 x optical cross-rack)",),
        runbook=("move   gpu-node-03 rail 0 (mlx5_0): leaf-su1-r0-1 port 4 -> leaf-su1-r0-1 "
                 "port 10  [a new cable: optical in-rack -> optical cross-rack]",)),
    # The hosts own the driver (DGX OS ships one): every GPU node's planned reboot installs
    # the new release after its drain, one member at a time.
    "gpu-driver": Scenario(
        _set("platform.gpuOperator.driverVersion", "580.105.08"), 0,
        impact=(f"  GPU driver 580.95.05 -> 580.105.08 on the hosts: 8 GPU nodes ({SPAN}), "
                "one member at a time, each drained (after its gang wait), the new driver, "
                "fabric manager and NSCQ installed, then rebooted into it",
                f"  nodes drained: 8 ({SPAN}), each in turn before its reboot",
                f"  planned reboots: 8 ({SPAN}), one cluster member at a time"),
        not_in_impact=("no running work is drained", "outage: none expected",
                       "the GPU Operator updates"),
        runbook=("planned reboot of gpu-node-00", "(the hosts' GPU driver 580.95.05 -> "
                 "580.105.08)", "kubectl drain on the control plane (after waiting for the gang "
                 "jobs it shares with other nodes); then the driver, fabric manager and NSCQ of "
                 "580.105.08 installed and held; `shutdown -r +1`", "the loaded driver with "
                 "its fabric manager"),
        not_in_runbook=("upgrade gpu-operator",)),
}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository with prod's committed rendering: what prod has deployed."""
    return copy_deployed(tmp_path_factory.mktemp("prod") / "gpu-cluster")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_day2_change_previews_with_the_verdict_of_what_it_does(
        deployed: Path, tmp_path: Path, name: str) -> None:
    s = SCENARIOS[name]
    project = tmp_path / "gpu-cluster"
    shutil.copytree(deployed, project)
    if s.before is not None:
        edit_stack(project, s.before)
        # What prod has: rendered even where moving prod there would be refused (exit 4).
        rendered = run_offline(project, "preview", "--render", "--quiet")
        assert rendered.returncode in (0, 4), rendered.stdout + rendered.stderr
    edit_stack(project, s.change)
    if s.inventory is not None:
        edit_inventory(project, s.inventory)
    proc = run_offline(project, "preview")
    assert proc.returncode == s.status, proc.stdout[-3000:] + proc.stderr
    impact = (project / "build/prod/impact.txt").read_text().splitlines()
    for line in s.impact:
        assert line in impact, (line, impact)
    for text in s.not_in_impact:
        assert not [x for x in impact if text in x], (text, impact)
    runbook = (project / "build/prod/runbook.txt").read_text()
    at = [runbook.find(fragment) for fragment in s.runbook]
    assert -1 not in at and at == sorted(at), (s.runbook, runbook)
    for text in s.not_in_runbook:
        assert text not in runbook, (text, runbook)
    for line in s.stderr:
        assert line in proc.stderr, proc.stderr
    # What a reviewer reads first is what the file says.
    assert proc.stdout.splitlines()[:len(impact)] == impact
