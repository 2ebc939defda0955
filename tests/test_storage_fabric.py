"""Storage on a fabric of its own (fabric.storageFabric), as a DGX SuperPOD builds it: the
DGX's two storage ports (port 1 of each storage ConnectX-7), the Lustre servers and the storage
fabric's own subnet managers on storage leaves and spines; the compute rails carry only the
GPUs' traffic, and LNet runs over the storage ports.

Expected values come from the layout the SuperPOD reference architecture describes (the
storage fabric independent of the compute fabric, each DGX on it through both storage ports)
and opensm's own verdicts (routing engine, P_Key tables, SA path records)."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.fabric_sim import Faults, SimFabric, skip_reason, write_fabric
from support.project import REPO, copy_repo, prod_raw, run_offline
from support.sandbox import (
    DGX_H100_HCAS,
    DGX_H100_STORAGE_HCAS,
    Sandbox,
    dgx_h100,
    diff_snapshots,
    run_twice,
    unavailable,
)
from support.stack_edits import (
    STORAGE_HCAS,
    STORAGE_NETDEVS,
    edit_inventory,
    edit_stack,
    storage_fabric,
    storage_port_rows,
)

from components.model.cluster import Cluster
from components.model.fields import CLUSTER_KEY, ConfigError
from components.planning import host_scripts, lnet, placement
from components.planning.fabric import (
    FabricNode,
    FabricPlan,
    FabricSpec,
    HcaPort,
    Partition,
    PlanError,
    SmHost,
    StorageServer,
    parse_ibnetdiscover,
    plan_fabric,
    render_topology_net,
    verify_plan,
)
from components.planning.fabric.render import render_fabric_files
from components.wiring.loading import validate_cluster

FULL = 0x8000
STORAGE_PKEY = 0x0A02


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Prod's inventory with each node's storage ports (rows `storage0`, `storage1`)."""
    raw = prod_raw()
    path = tmp_path_factory.mktemp("inventory") / "inventory.csv"
    lines = (REPO / raw["inventoryFile"]).read_text().splitlines()
    path.write_text("\n".join(storage_port_rows(lines)) + "\n")
    return path


def _raw(inventory: Path | None = None) -> dict[str, Any]:
    raw = copy.deepcopy(prod_raw())
    storage_fabric(raw)
    if inventory is not None:
        raw["inventoryFile"] = str(inventory)
    return raw


@pytest.fixture(scope="module")
def cluster(inventory: Path) -> Cluster:
    return validate_cluster(_raw(inventory), REPO)


@pytest.fixture(scope="module")
def plan(cluster: Cluster) -> FabricPlan:
    storage = placement.storage_plan(cluster)
    assert storage is not None
    return storage


def test_each_node_reaches_the_storage_fabric_through_both_storage_ports_on_two_leaves(
        plan: FabricPlan) -> None:
    assert sorted(s.name for s in plan.switches) == [
        "storage-leaf-su1-r0", "storage-leaf-su1-r1", "storage-spine-01", "storage-spine-02"]
    for n in plan.nodes:  # port i of the node at slot s: leaf i, port s + 1
        assert [(r.hca, r.leaf, r.leaf_port) for r in n.rails] == [
            (STORAGE_HCAS[0], "storage-leaf-su1-r0", n.slot + 1),
            (STORAGE_HCAS[1], "storage-leaf-su1-r1", n.slot + 1)]
    # Each Lustre server's two ports on the two leaves, as each subnet manager: one leaf lost
    # leaves every server and one subnet manager reachable.
    by_server: dict[str, set[str]] = {}
    for st in plan.storage:
        by_server.setdefault(st.hostname, set()).add(st.switch)
    assert by_server == {"lustre-01": {"storage-leaf-su1-r0", "storage-leaf-su1-r1"},
                         "lustre-02": {"storage-leaf-su1-r0", "storage-leaf-su1-r1"}}
    assert {s.hostname: s.switch for s in plan.sm} == {
        "ssm-01": "storage-leaf-su1-r0", "ssm-02": "storage-leaf-su1-r1"}
    # The first SU keeps the top slots for them, so nodes added at slots 8..28 move nothing.
    assert sorted({st.port for st in plan.storage} | {s.port for s in plan.sm}) == [30, 31, 32]
    assert plan.oversubscription <= 1
    # Every GUID the storage fabric's opensm files name is one a host or switch reports.
    assert plan.placeholders.message() == "all fabric GUIDs are real"
    assert plan.placement("gpu-node-01").rails[1].port_guid == "0x0c42a10300d10103"


def test_the_compute_fabric_no_longer_carries_storage(cluster: Cluster) -> None:
    compute = placement.plan(cluster)
    assert compute.storage == () and compute.cables_of("storage") == ()
    partitions = render_fabric_files(compute)["fabric/partitions.conf"]
    assert "0x0c42a10300b10001" not in partitions
    assert not any(s.name.startswith("storage-") for s in compute.switches)


def test_storage_clients_reach_only_the_servers_at_pkey_index_0(plan: FabricPlan) -> None:
    text = render_fabric_files(plan, "storage-fabric/")["storage-fabric/partitions.conf"]
    head = next(line for line in text.splitlines() if line.startswith("storage="))
    assert head == "storage=0x0a02, indx0, ipoib, mtu=5, defmember=limited :"
    for st in plan.storage:
        assert f"{st.port_guid}=full" in text
    for n in plan.nodes:
        for r in n.rails:
            assert f"{r.port_guid}=full" not in text and r.port_guid in text


def test_lnet_runs_over_the_storage_ports(cluster: Cluster) -> None:
    node = cluster.nodes[0]
    doc = lnet.lnet_document(cluster, node)
    assert [ni["interfaces"][0] for ni in doc["net"][0]["local NI(s)"]] == STORAGE_NETDEVS
    plan = lnet.netplan(cluster, node)
    assert all(f"    {netdev}:" in plan for netdev in STORAGE_NETDEVS)
    assert "ibp24s0" not in plan  # rail 0 carries no storage address
    script = host_scripts.prepare_gpu_node(cluster, node, "k")
    assert f'LNET_IFACES="{" ".join(STORAGE_NETDEVS)}"' in script
    assert "storage port $port: HCA $hca not found" in script  # the read-only port check


def _problems(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        validate_cluster(raw, REPO)
    return {p.path: p.message for p in info.value.problems}


def test_a_storage_fabric_that_cannot_work_is_refused_before_anything_is_registered() -> None:
    raw = _raw()
    sf = raw["fabric"]["storageFabric"]
    sf["subnetManagers"][1]["host"] = "sm-02"  # the compute fabric's standby
    sf["hcas"] = ["mlx5_0", "mlx5_1"]  # mlx5_0 is rail 0
    sf["netdevs"] = ["ibp170s0f0"]
    problems = _problems(raw)
    assert "also runs the compute fabric's subnet manager" in \
        problems["fabric.storageFabric.subnetManagers[1].host"]
    assert problems["fabric.storageFabric.hcas[0]"].startswith("is a compute rail")
    assert problems["fabric.storageFabric.netdevs"] == \
        "1 interface names for 2 storage HCAs"
    raw = _raw()
    del raw["fabric"]["storageServers"]
    assert "carries nothing" in _problems(raw)["fabric.storageFabric"]
    raw = _raw()  # a switch fact for a switch the storage plan does not have
    raw["fabric"]["storageFabric"]["switchGuids"]["storage-leaf-su1-r2"] = "0xfc6a1c0300b20003"
    assert "names no switch of the fabric plan" in \
        _problems(raw)["fabric.storageFabric.switchGuids.storage-leaf-su1-r2"]


def test_inventory_storage_ports_must_match_the_config(inventory: Path, tmp_path: Path) -> None:
    lines = inventory.read_text().splitlines()
    rail0 = lines[1].split(",")[3]
    edited = [ln.replace(",storage1,mlx5_1,", ",storage1,mlx5_2,") if
              ln.startswith("gpu-node-03,") else ln for ln in lines]
    edited = [ln.replace("0x0c42a10300d10501", rail0) if ln.startswith("gpu-node-05,") else ln
              for ln in edited]
    edited.append("gpu-node-06,storage2,mlx5_8,0x0c42a10300d106ff,,")
    path = tmp_path / "inventory.csv"
    path.write_text("\n".join(edited) + "\n")
    problems = _problems(_raw(path))
    assert problems["inventoryFile (gpu-node-03 storage1)"] == \
        "the host calls storage port 1 mlx5_2, fabric.storageFabric.hcas[1] says mlx5_1"
    assert problems["inventoryFile (gpu-node-06 storage2)"] == \
        "storage port 2 but fabric.storageFabric has 2 storage HCAs"
    assert problems["inventory:gpu-node-05.storage0.portGuid"].startswith(
        "GUID already used at inventory:gpu-node-00.rails[0].portGuid")


# ---------------------------------------------------------------- on the real tools

sim = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")


@pytest.mark.slow
@sim
def test_opensm_routes_the_storage_fabric_and_its_sa_keeps_clients_apart(
        plan: FabricPlan, tmp_path: Path) -> None:
    conf = write_fabric(plan, tmp_path)
    net = (tmp_path / "topology.net").read_text()
    cas = plan.hca_ports + len(plan.sm) + len(plan.storage)
    sm = f"{plan.sm[0].hostname} {plan.sm[0].hca}"
    with SimFabric(tmp_path, net, sim_host=sm) as fabric:
        run = fabric.opensm(conf)
        assert run.rc == 0 and run.errors == [], run.log[-3000:]
        assert run.engine == "ftree"
        assert f"Fabric has {cas} CAs, {cas} CA ports ({plan.hca_ports} of them CNs)" in run.log
        discovered = fabric.ibnetdiscover()
        assert verify_plan(plan, discovered).ok
        topo = parse_ibnetdiscover(discovered)
        assert fabric.route_check(topo) == []
    with SimFabric(tmp_path / "sa", net, sim_host=sm) as fabric, fabric.running_opensm(conf):
        lids = {n.desc: n.lid for n in parse_ibnetdiscover(fabric.ibnetdiscover()).nodes.values()
                if n.kind == "ca"}
        a, b = lids["gpu-node-00 mlx5_7"], lids["gpu-node-05 mlx5_1"]
        oss = lids["lustre-02 port1"]
        # Index 0 (IPoIB, LNet): the storage P_Key, limited on a client, full on a server.
        assert fabric.pkey_table(a)[0] == STORAGE_PKEY
        assert fabric.pkey_table(oss)[0] == FULL | STORAGE_PKEY
        assert fabric.path_pkey(a, oss) == STORAGE_PKEY  # a client reaches the server
        assert fabric.path_pkey(a, b) is None  # but no other client


@pytest.mark.slow
@sim
def test_a_server_cable_on_the_wrong_storage_leaf_port_is_named(plan: FabricPlan,
                                                                tmp_path: Path) -> None:
    port = next(st for st in plan.storage if st.hostname == "lustre-01" and st.hca == "port0")
    faulted = Faults(parse_ibnetdiscover(render_topology_net(plan)))
    net = faulted.drop((port.switch, port.port)).add(("lustre-01 port0", 1),
                                                     (port.switch, 20)).net()
    with SimFabric(tmp_path, net, sim_host="gpu-node-01 mlx5_7") as fabric:
        report = verify_plan(plan, fabric.ibnetdiscover())
    assert [f.kind for f in report.findings] == ["MISWIRE"], report.text()
    assert f"{port.switch} port 20 <-> lustre-01 port0" in report.findings[0].text()


@pytest.mark.slow
def test_the_stack_builds_and_verifies_the_storage_fabric(tmp_path: Path) -> None:
    """The program builds the storage fabric as a second fabric: its subnet managers (standby
    first) and switches, its files under build/<stack>/storage-fabric/; `make verify-fabric
    FABRIC=storage` checks a discovered storage fabric against that plan, not the compute
    one's."""
    project = copy_repo(tmp_path / "repo")
    (project / ".venv").symlink_to(REPO / ".venv")
    edit_stack(project, storage_fabric)
    edit_inventory(project, storage_port_rows)
    make = ["make", "-s", "-o", ".venv/.installed", "verify-fabric", "FABRIC=storage",
            "RATE=4xHDR"]
    proc = subprocess.run(make + ["DISCOVERED=build/prod/storage-fabric/topology.net"],
                          cwd=project, capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "fabric matches the plan" in proc.stdout, (
        proc.stdout + proc.stderr)
    wrong = subprocess.run(make + ["DISCOVERED=build/prod/fabric/topology.net"], cwd=project,
                           capture_output=True, text=True, check=False)
    assert wrong.returncode != 0 and "MISSING_NODE" in wrong.stdout, wrong.stdout
    build = project / "build" / "prod"
    assert (build / "scripts" / "ssm-02" / "rejoin-opensm.sh").exists()  # the standby
    assert "storage=0x0a02, indx0" in (build / "storage-fabric" / "partitions.conf").read_text()
    assert (build / "storage-fabric" / "switches" / "storage-spine-01.cli").exists()
    preview = run_offline(project, "preview")
    assert preview.returncode == 0, preview.stdout[-3000:] + preview.stderr[-3000:]
    assert "gpucluster:fabric:StorageFabric  storage-fabric" in preview.stdout
    assert "4. storage fabric: subnet managers ssm-01 (priority 15), ssm-02 (priority 14), " \
        "4 switches" in preview.stdout


# ---------------------------------------------------------------- host preparation, for real


def _storage_node(tmp_path: Path, cluster: Cluster, drop: str | None = None
                  ) -> tuple[Sandbox, str]:
    """A DGX H100 sandbox with its rails and, unless dropped, its two storage cards; and the
    node's host preparation as the storage-fabric stack renders it."""
    node = cluster.nodes[0]
    sb = Sandbox(tmp_path / node.hostname, node.hostname,
                 {r.hca: DGX_H100_HCAS[r.hca] for r in node.rails})
    dgx_h100(sb, data_array=False)
    for hca, pci in DGX_H100_STORAGE_HCAS.items():
        if hca != drop:
            sb.add_storage_card(hca, pci)
    return sb, host_scripts.prepare_gpu_node(cluster, node, CLUSTER_KEY)


@pytest.mark.slow
@pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")
def test_host_preparation_binds_lnet_to_the_storage_ports(cluster: Cluster,
                                                          tmp_path: Path) -> None:
    sb, script = _storage_node(tmp_path, cluster)
    assert [sb.netdev(h) for h in STORAGE_HCAS] == STORAGE_NETDEVS  # DGX OS's names
    run = run_twice(sb, script)
    conf = sb.path("/etc/lnet.conf").read_text()
    assert [ln.strip() for ln in conf.splitlines() if ln.strip().startswith("0:")] == [
        f"0: {n}" for n in STORAGE_NETDEVS]
    assert run.find("lnetctl", "import")


@pytest.mark.slow
@pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")
def test_a_missing_storage_card_stops_host_preparation_before_any_change(
        cluster: Cluster, tmp_path: Path) -> None:
    sb, script = _storage_node(tmp_path, cluster, drop="mlx5_1")
    sb.run("true\n")  # the sandbox's own mount points exist from the first run on
    before = sb.snapshot()
    run = sb.run(script)
    assert run.returncode == 1
    assert "storage port 1: HCA mlx5_1 not found under /sys/class/infiniband" in run.stderr
    assert "set fabric.storageFabric.hcas[1]" in run.stderr
    assert run.changes == [] and diff_snapshots(before, sb.snapshot()) == []


def test_the_first_su_keeps_enough_slots_for_the_servers_and_subnet_managers() -> None:
    """Two subnet managers and three two-port servers are eight ports: four slots on the two
    storage leaves. A first SU of 29 nodes leaves them 3: a plan error naming the slots."""
    spec = FabricSpec(rails_per_node=2, rails_per_leaf=1, purpose="storage",
                      partitions=(Partition("storage", 0x0A02, "storage", data_path=True),),
                      storage_servers=tuple(
                          StorageServer(f"oss-{i}", "r09", (f"0x0c42a10300e{i}0001",
                                                            f"0x0c42a10300e{i}0003"))
                          for i in range(3)))
    sms = (SmHost("ssm-01", 15, "r01"), SmHost("ssm-02", 14, "r02"))

    def nodes(count: int) -> list[FabricNode]:
        return [FabricNode(f"gpu-{s:02d}", 1, s, "r01",
                           (HcaPort(0, "mlx5_7"), HcaPort(1, "mlx5_1"))) for s in range(count)]

    plan = plan_fabric(nodes(28), sms, spec)
    assert sorted({st.port for st in plan.storage} | {s.port for s in plan.sm}) == [
        29, 30, 31, 32]
    with pytest.raises(PlanError) as err:
        plan_fabric(nodes(29), sms, spec)
    assert err.value.message == ("needs 29 slots of SU 1, whose leaves keep 4 of their 32 for "
                                 "the subnet-manager hosts and storage servers")
    assert err.value.fix.startswith("use only slots 0..27 of SU 1")
