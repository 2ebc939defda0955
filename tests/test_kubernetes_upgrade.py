"""Kubernetes upgrades the kubeadm way (kubernetes.io/docs/tasks/administer-cluster/kubeadm/
kubeadm-upgrade/), run for real in a sandbox against the stub kubeadm, kubectl and apt, and
read as a reviewer reads the preview of a version change.

kubeadm's order: on the first control plane the kubeadm package, `kubeadm upgrade plan` and
`upgrade apply`, then the node drained for its kubelet and kubectl; the other control planes
`upgrade node`; the workers drained (PodDisruptionBudgets honoured by the eviction API), `kubeadm
upgrade node`, kubelet and kubectl, uncordoned. The version skew policy: one minor at a time,
never back, no kubelet newer than the API server.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.project import prod_raw, run_offline
from support.sandbox import Sandbox, unavailable

from components.model.cluster import Cluster
from components.planning import upgrade
from components.planning.labels import SU_LABEL
from components.wiring.loading import validate_cluster
from offline.runbook.upgrade import batch_words, upgrade_lanes

REPO = Path(__file__).resolve().parent.parent
KEY = "gpu-cluster:cluster"
CP = "mgmt-01"
NODE = "gpu-node-00"


def cluster(version: str = "1.35.2", batch: int = 1) -> Cluster:
    raw = prod_raw()
    raw["kubernetes"]["version"] = version
    raw["kubernetes"]["upgradeBatch"] = batch
    return validate_cluster(raw, REPO)


@pytest.fixture
def sandbox_root(tmp_path: Path) -> Path:
    if (why := unavailable()) is not None:
        pytest.skip(why)
    return tmp_path


def control_plane(root: Path, version: str) -> Sandbox:
    """A control-plane host running `version`: its API server, packages and Node."""
    sb = Sandbox(root / CP, CP)
    (sb.root / "etc/kubernetes/manifests").mkdir(parents=True)
    (sb.root / "etc/kubernetes/admin.conf").write_text("# admin\n")
    (sb.root / upgrade.APISERVER_MANIFEST.lstrip("/")).write_text(
        f"    image: registry.k8s.io/kube-apiserver:v{version}\n")
    for pkg in ("kubeadm", "kubelet", "kubectl"):
        (sb.state / "pkgs" / pkg).write_text(f"{version}-1.1\n")
        (sb.state / "held" / pkg).touch()
    (sb.state / "cluster/version").write_text(f"{version}\n")
    (sb.state / "cluster/kubelet").mkdir()
    for node in (CP, NODE, "gpu-node-01"):
        sb.add_node(node)
        (sb.state / "cluster/kubelet" / node).write_text(f"v{version}")
    return sb


def order(run, *prefixes: tuple[str, ...]) -> list[int]:
    """Index of the first call starting with each prefix (asserting every one was made)."""
    found = []
    for prefix in prefixes:
        hits = [i for i, c in enumerate(run.calls) if c[:len(prefix)] == prefix]
        assert hits, f"no call {prefix}:\n{run.explain()}"
        found.append(hits[0])
    return found


def installs(run, pkg: str) -> int:
    return next(i for i, c in enumerate(run.calls)
                if c[0] == "apt-get" and "install" in c and any(a.startswith(f"{pkg}=")
                                                                 for a in c))


# ---------------------------------------------------------------- the control plane

@pytest.mark.slow
def test_the_first_control_plane_upgrades_in_kubeadms_order(sandbox_root: Path) -> None:
    sb = control_plane(sandbox_root, "1.34.3")
    run = sb.run(upgrade.control_plane_script(cluster(), CP, first=True))
    assert run.returncode == 0, run.explain()
    kubeadm_pkg = installs(run, "kubeadm")
    plan, apply, drain, restart, uncordon = order(
        run, ("kubeadm", "upgrade", "plan", "v1.35.2"),
        ("kubeadm", "upgrade", "apply", "-y", "v1.35.2"), ("kubectl", "drain", CP),
        ("systemctl", "restart", "kubelet"), ("kubectl", "uncordon", CP))
    kubelet_pkg = installs(run, "kubelet")
    assert kubeadm_pkg < plan < apply < drain < kubelet_pkg < restart < uncordon
    assert (sb.state / "pkgs/kubelet").read_text().strip() == "1.35.2-1.1"
    assert {p.name for p in (sb.state / "held").iterdir()} >= {"kubeadm", "kubelet", "kubectl"}
    again = sb.run(upgrade.control_plane_script(cluster(), CP, first=True))
    assert again.returncode == 0 and not again.changes, again.explain()


@pytest.mark.slow
def test_a_control_plane_at_the_target_changes_nothing(sandbox_root: Path) -> None:
    """The first bring-up: `kubeadm init` installed the target; the command is a no-op."""
    sb = control_plane(sandbox_root, "1.35.2")
    run = sb.run(upgrade.control_plane_script(cluster(), CP, first=True))
    assert run.returncode == 0 and not run.changes, run.explain()


@pytest.mark.slow
@pytest.mark.parametrize(("running", "says"), [
    ("1.33.6", "one minor version at a time"),
    ("1.35.3", "never downgrades"),
])
def test_the_skew_policy_is_enforced_on_the_host(sandbox_root: Path, running: str,
                                                  says: str) -> None:
    sb = control_plane(sandbox_root, running)
    run = sb.run(upgrade.control_plane_script(cluster(), CP, first=True))
    assert run.returncode == 1 and says in run.stderr, run.explain()
    assert not run.find("apt-get", "install") and not run.find("kubeadm")


@pytest.mark.slow
def test_a_further_control_plane_runs_upgrade_node(sandbox_root: Path) -> None:
    sb = control_plane(sandbox_root, "1.34.3")
    run = sb.run(upgrade.control_plane_script(cluster(), CP, first=False))
    assert run.returncode == 0, run.explain()
    assert not run.find("kubeadm", "upgrade", "apply")
    node, drain = order(run, ("kubeadm", "upgrade", "node"), ("kubectl", "drain", CP))
    assert installs(run, "kubeadm") < node < drain < installs(run, "kubelet")


# ---------------------------------------------------------------- the GPU nodes

@pytest.mark.slow
def test_a_gpu_node_is_drained_upgraded_and_uncordoned(sandbox_root: Path) -> None:
    cp = control_plane(sandbox_root, "1.35.2")  # its control plane upgraded already
    (cp.state / "cluster/kubelet" / NODE).write_text("v1.34.3")
    c = cluster()
    drain = cp.run(upgrade.drain_script(c, NODE, (NODE,)))
    assert drain.returncode == 0, drain.explain()
    (call,) = drain.find("kubectl", "drain", NODE)
    # Through the eviction API (no --disable-eviction), which PodDisruptionBudgets hold back.
    assert "--timeout=30m" in call and "--disable-eviction" not in call

    node = Sandbox(sandbox_root / NODE, NODE)
    for pkg in ("kubeadm", "kubelet", "kubectl"):
        (node.state / "pkgs" / pkg).write_text("1.34.3-1.1\n")
        (node.state / "held" / pkg).touch()
    run = node.run(upgrade.node_script(c, NODE))
    assert run.returncode == 0, run.explain()
    (upgrade_node,) = order(run, ("kubeadm", "upgrade", "node"))
    assert installs(run, "kubeadm") < upgrade_node < installs(run, "kubelet")
    assert run.find("systemctl", "restart", "kubelet")
    assert not node.run(upgrade.node_script(c, NODE)).changes

    (cp.state / "cluster/kubelet" / NODE).write_text("v1.35.2")  # the kubelet reports it
    done = cp.run(upgrade.uncordon_script(c, NODE))
    assert done.returncode == 0, done.explain()
    assert done.find("kubectl", "uncordon", NODE)


@pytest.mark.slow
def test_a_node_cordoned_before_the_upgrade_stays_cordoned(sandbox_root: Path) -> None:
    cp = control_plane(sandbox_root, "1.35.2")
    (cp.state / "cluster/kubelet" / NODE).write_text("v1.34.3")
    (cp.state / "cluster/nodes" / NODE).write_text("cordon\n")  # someone's maintenance
    c = cluster()
    assert cp.run(upgrade.drain_script(c, NODE, (NODE,))).returncode == 0
    (cp.state / "cluster/kubelet" / NODE).write_text("v1.35.2")
    done = cp.run(upgrade.uncordon_script(c, NODE))
    assert done.returncode == 0 and "stays cordoned" in done.stdout, done.explain()
    assert not done.find("kubectl", "uncordon")


@pytest.mark.slow
def test_no_worker_is_upgraded_ahead_of_the_api_server(sandbox_root: Path) -> None:
    cp = control_plane(sandbox_root, "1.34.3")  # the control plane has not upgraded
    run = cp.run(upgrade.drain_script(cluster(), NODE, (NODE,)))
    assert run.returncode == 1 and "a kubelet is never newer" in run.stderr, run.explain()
    assert not run.find("kubectl", "drain")


@pytest.mark.slow
def test_a_batch_never_splits_a_running_gang_job(sandbox_root: Path) -> None:
    """A 2-node PyTorchJob runs on gpu-node-00 and gpu-node-01. Draining gpu-node-00 alone would
    evict one worker and restart the whole job: the batch waits for the job, then stops naming
    it; a batch holding both nodes drains them together."""
    cp = control_plane(sandbox_root, "1.35.2")
    (cp.state / "cluster/kubelet" / NODE).write_text("v1.34.3")
    (cp.state / "cluster/pods").write_text(
        f"training\tllama-70b-pretrain\t{NODE}\tpytorchjob-controller\n"
        "training\tllama-70b-pretrain\tgpu-node-01\tpytorchjob-controller\n"
        "inference\t\tgpu-node-01\t\n")
    alone = cp.run(upgrade.drain_script(cluster(), NODE, (NODE,)), timeout=300)
    assert alone.returncode == 1, alone.explain()
    assert "training/llama-70b-pretrain (also on gpu-node-01)" in alone.stderr
    # A Kubeflow job suspends through runPolicy.suspend (vcctl acts on Volcano Jobs only).
    assert ("kubectl -n training patch pytorchjob llama-70b-pretrain --type=merge -p "
            "'{\"spec\":{\"runPolicy\":{\"suspend\":true}}}'") in alone.stderr
    assert "vcctl" not in alone.stderr
    assert not alone.find("kubectl", "drain")
    # It waited a minute at a time for kubernetes.gangWaitMinutes (30 by default), not hours.
    assert len(alone.find("sleep")) == 30
    together = cp.run(upgrade.drain_script(cluster(batch=2), NODE, (NODE, "gpu-node-01")))
    assert together.returncode == 0 and together.find("kubectl", "drain", NODE), \
        together.explain()


def test_upgrade_batches_follow_the_config() -> None:
    nodes = {f"gpu-node-{i:02d}": 1 for i in (3, 0, 2, 1, 4)}
    assert upgrade.batches(nodes, 2) == {1: [("gpu-node-00", "gpu-node-01"),
                                             ("gpu-node-02", "gpu-node-03"), ("gpu-node-04",)]}


def test_each_su_is_a_lane_of_its_own() -> None:
    """Batches never mix SUs, and every SU's lane starts with its own first batch: the
    longest chain of upgrade commands is one SU's (at most 32 nodes), whatever the site."""
    su_of = {f"gpu-node-{i:03d}": 1 + i // 32 for i in range(64)}
    lanes = upgrade.batches(su_of, 3)
    assert list(lanes) == [1, 2]
    assert lanes[2][0] == ("gpu-node-032", "gpu-node-033", "gpu-node-034")
    assert all({su_of[h] for b in lanes[su] for h in b} == {su} for su in lanes)
    assert max(len(lane) for lane in lanes.values()) == 11  # ceil(32 / 3)


# ---------------------------------------------------------------- the preview

def set_version(project: Path, version: str) -> None:
    stack = project / "Pulumi.prod.yaml"
    doc = yaml.safe_load(stack.read_text())
    doc["config"][KEY]["kubernetes"]["version"] = version
    stack.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.mark.slow
@pytest.mark.parametrize(("old", "new"), [("1.35.1", "1.35.2"), ("1.34.3", "1.35.2")])
def test_a_version_change_previews_as_kubeadms_sequence(project: Path, old: str,
                                                        new: str) -> None:
    """A patch and a minor upgrade: the upgrade commands of every host re-run with the new
    target, the host preparation points at the new packages (a minor: the new repository),
    the control plane's config says the new version; nothing joins, reboots or is replaced."""
    set_version(project, old)
    proc = run_offline(project, "preview", "--render")
    assert proc.returncode == 0, proc.stdout[-3000:]
    set_version(project, new)
    proc = run_offline(project, "preview")
    assert proc.returncode == 0, proc.stdout[-3000:]
    diff = yaml.safe_load((project / "build/prod/diff.json").read_text())
    changed = {c["name"]: c["action"] for c in diff}
    gpus = [f"gpu-node-{i:02d}" for i in range(8)]
    planes = [CP, "mgmt-02", "mgmt-03"]
    hosts = [*planes, *gpus]  # the subnet-manager hosts run no Kubernetes
    # `<cp>-identities` rewrites the configuration identities are signed with (its version);
    # a further control plane's join carries the cluster's configuration too (its guarded
    # re-run does nothing on a member: the upgrade commands apply the version); the cluster
    # (`kubernetes`) publishes the release the preview reads the upgrade from.
    expected = ({f"{h}-prepare" for h in hosts} | {f"{CP}-kubeadm-init", "kubelet-config"}
                | {"kubernetes"}
                | {f"{h}-{s}" for h in planes for s in ("kubernetes-upgrade", "identities")}
                | {f"{h}-kubeadm-join" for h in planes[1:]}
                | {f"{h}-{s}" for h in gpus
                   for s in ("upgrade-drain", "kubernetes-upgrade", "upgrade-uncordon")})
    assert set(changed) == expected
    assert set(changed.values()) == {"update"}
    impact = proc.stdout.splitlines()
    assert impact[1] == (f"  Kubernetes {old} -> {new}: `pulumi up` runs kubeadm's upgrade: the "
                         "control plane, then the GPU nodes one at a time, each drained")
    assert impact[4] == ("  nodes drained: 11 (gpu-node-00 … mgmt-03), each in turn for the "
                         "upgrade")
    steps = (project / "build/prod/runbook.txt").read_text()
    assert f"kubeadm upgrade apply -y v{new} on {CP}" in steps
    assert "gpu-node-00, then gpu-node-01" in steps



def _lane_inputs(batch: int) -> dict[str, dict[str, object]]:
    """Two SUs' nodes as the stack renders them: each with its upgrade drain and its placement
    labels; the kubeadm cluster publishing the batch size."""
    cluster = "urn:pulumi:prod::gpu-cluster::gpucluster:bootstrap:KubeadmCluster::kubernetes"
    inputs: dict[str, dict[str, object]] = {cluster: {"facts": {"upgradeBatch": str(batch)}}}
    for su, hosts in (("su10", ["gpu-node-288", "gpu-node-289", "gpu-node-290"]),
                      ("su2", ["gpu-node-032", "gpu-node-033", "gpu-node-034"])):
        for h in hosts:
            inputs[f"urn::{h}-placement"] = {"metadata": {"name": h, "labels": {SU_LABEL: su}}}
            inputs[f"urn::{h}-upgrade-drain"] = {"create": "drain"}
    return inputs


def test_the_runbook_reads_one_lane_per_su() -> None:
    """The runbook and the impact read the lanes from what the stack renders: the nodes with
    an upgrade drain, each node's SU label and the batch size the cluster publishes; SUs in
    numeric order (su2 before su10), each SU's nodes by hostname."""
    assert upgrade_lanes(_lane_inputs(2)) == {
        "su2": [["gpu-node-032", "gpu-node-033"], ["gpu-node-034"]],
        "su10": [["gpu-node-288", "gpu-node-289"], ["gpu-node-290"]]}
    lanes = {su: lane[:2] for su, lane in upgrade_lanes(_lane_inputs(1)).items()}
    assert lanes == {"su2": [["gpu-node-032"], ["gpu-node-033"]],
                     "su10": [["gpu-node-288"], ["gpu-node-289"]]}
    assert batch_words(lanes) == "one at a time in each SU, the 2 SUs side by side"
    assert batch_words({"su1": lanes["su2"]}) == "one at a time"
