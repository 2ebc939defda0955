"""Volcano HyperNodes generated from the fabric plan, and the node labels that must agree.

Tier 1 = the nodes of one SU (every rail of every node in it lands on that SU's leaves); tier 2
= the spine layer above the SUs; a three-tier fabric (more than 2048 HCA ports) adds a core tier.
Checked for the prod stack, one full SU, a three-SU cluster and a nine-SU cluster, with
expected values from the SuperPOD layout (SU = 32 slots, rail r of every node on leaf r; the
subnet-manager hosts take the last slot of the last SU, so that SU holds 31 nodes, as
SuperPOD's 4 SUs = 127 DGX and the UFM slot).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.project import prod_raw

from components.model.cluster import Cluster
from components.model.fields import ConfigError
from components.planning import kubeadm, placement, volcano
from components.wiring.loading import validate_cluster

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
LABEL_SU = "node-restriction.kubernetes.io/gpucluster-su"
SLOTS = 32  # node slots per SU: half the QM9700's 64 ports


def prod() -> Cluster:
    return validate_cluster(prod_raw(), REPO)


def raw_of(counts: list[tuple[int, int]]) -> dict:
    """The prod stack's config with its GPU nodes replaced by (SU, node count) ranges (no
    inventory file: GUIDs are placeholders, which the plan allows; prod's fabric pins, sized
    for its 8 nodes, dropped so the planner derives them)."""
    raw = prod_raw()
    raw.pop("inventoryFile")
    for key in ("switchGuids", "switchManagementIps", "switchHostKeys", "railsPerLeaf",
                "spines"):
        raw["fabric"].pop(key, None)
    raw["gpuNodes"]["ranges"] = [
        {"prefix": f"su{su}-node-", "count": count, "su": su,
         "managementIpStart": f"10.10.{10 + su}.1",
         "racks": [f"s{su}r{i}" for i in range((count + 3) // 4)], "nodesPerRack": 4}
        for su, count in counts
    ]
    raw["kubernetes"]["podCidr"] = "10.128.0.0/12"  # a /24 per node for up to 4096 nodes
    # LNet client rails take one block per rail at the node's management host number: a /16
    # per rail covers every host of the /16 management network (these SUs reach 10.10.19.x);
    # the MGS (172.20.0.10) stays in the subnet, outside the client range.
    raw["storage"]["lnetAddresses"] = {"cidr": "172.16.0.0/12", "clientRange": "172.24.0.0/13"}
    return raw


def cluster_of(sus: list[int], per_su: int = 32) -> Cluster:
    """`per_su` nodes in each SU of `sus`, the first SU one fewer when that would fill it: its
    last slot is the subnet-manager hosts' (prod has two)."""
    return validate_cluster(raw_of([(su, min(per_su, SLOTS - 1) if su == sus[0] else per_su)
                                    for su in sus]), REPO)


def by_name(objs: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs}


def members(h: dict, kind: str) -> list[str]:
    assert all(set(m["selector"]) == {"exactMatch"} for m in h["spec"]["members"])
    return [m["selector"]["exactMatch"]["name"] for m in h["spec"]["members"]
            if m["type"] == kind]


def assert_labels_agree(c: Cluster, hns: list[dict]) -> None:
    """Every node is in exactly one tier-1 HyperNode, and its SU label names that HyperNode."""
    plan = placement.plan(c)
    leaves = placement.rail_leaves(plan)
    seen: dict[str, str] = {}
    for h in hns:
        if h["spec"]["tier"] != 1:
            continue
        for host in members(h, "Node"):
            assert host not in seen, f"{host} in {seen.get(host)} and {h['metadata']['name']}"
            seen[host] = h["metadata"]["name"]
    assert set(seen) == {n.hostname for n in c.nodes}
    for n in c.nodes:
        labels = kubeadm.node_labels(c, n, leaves.get(n.hostname))
        assert labels[LABEL_SU] == seen[n.hostname] == f"su{n.su}"
        # The rail-leaf labels name switches of the node's own tier-1 HyperNode.
        h = by_name(hns)[seen[n.hostname]]
        switches = set(h["metadata"]["annotations"]["gpucluster.io/switches"].split(","))
        rail_leaves = {v for k, v in labels.items() if k.endswith("-leaf")}
        assert rail_leaves and rail_leaves <= switches


def test_prod_is_one_su_under_the_spines():
    c = prod()
    hns = volcano.hypernodes(placement.plan(c))
    assert [(h["metadata"]["name"], h["spec"]["tier"], h["spec"]["tierName"]) for h in hns] == [
        ("su1", 1, "su"), ("spine", 2, "spine")]
    su1, spine = hns
    assert members(su1, "Node") == [f"gpu-node-{i:02d}" for i in range(8)]
    # prod: 8 nodes + the SM slot = 9 slots; 4 rails x 9 > 32 ports, so 2 rails per leaf
    # (16 slots each), 4 leaves (the switch names of Pulumi.prod.yaml).
    assert su1["metadata"]["annotations"]["gpucluster.io/switches"] == (
        "leaf-su1-r0-1,leaf-su1-r2-3,leaf-su1-r4-5,leaf-su1-r6-7")
    assert members(spine, "HyperNode") == ["su1"]
    assert spine["metadata"]["annotations"]["gpucluster.io/switches"] == "spine-01,spine-02"
    assert_labels_agree(c, hns)


def test_a_full_su_is_31_nodes_and_the_sm_slot_on_eight_rail_leaves():
    # With subnet-manager hosts a full SU is 31 nodes: the 32nd slot is theirs.
    with pytest.raises(ConfigError, match="fills all 32 slots"):
        validate_cluster(raw_of([(1, SLOTS)]), REPO)
    c = cluster_of([1])
    hns = by_name(volcano.hypernodes(placement.plan(c)))
    assert set(hns) == {"su1", "spine"}
    assert len(members(hns["su1"], "Node")) == SLOTS - 1
    # One leaf per rail in a full SU: rail r of all 31 nodes (and slot 31) on leaf r.
    leaves = hns["su1"]["metadata"]["annotations"]["gpucluster.io/switches"].split(",")
    assert len(leaves) == 8
    assert_labels_agree(c, list(hns.values()))


def test_three_sus_share_one_spine_layer():
    c = cluster_of([1, 2, 3])
    hns = volcano.hypernodes(placement.plan(c))
    names = by_name(hns)
    assert [h["metadata"]["name"] for h in hns] == ["su1", "su2", "su3", "spine"]
    for su, count in ((1, 31), (2, 32), (3, 32)):  # SU 1 keeps the SM slot
        assert members(names[f"su{su}"], "Node") == [f"su{su}-node-{i:02d}"
                                                     for i in range(count)]
        assert len(names[f"su{su}"]["metadata"]["annotations"][
            "gpucluster.io/switches"].split(",")) == 8
    assert members(names["spine"], "HyperNode") == ["su1", "su2", "su3"]
    assert names["spine"]["spec"]["tier"] == 2
    assert_labels_agree(c, hns)


def test_beyond_2048_hca_ports_a_core_tier_tops_the_pods():
    """9 SUs x 8 rail leaves = 72 leaves, more than a 64-port spine reaches (8 x 32 + 31 nodes
    x 8 rails = 2296 HCA ports): three tiers; each SU sits in exactly one tier-2 (pod spine)
    HyperNode and the pods under one tier-3 core."""
    c = cluster_of(list(range(1, 10)))
    plan = placement.plan(c)
    assert plan.tiers == 3
    hns = volcano.hypernodes(plan)
    tiers = {h["metadata"]["name"]: h["spec"]["tier"] for h in hns}
    assert sorted(n for n, t in tiers.items() if t == 1) == sorted(f"su{i}" for i in range(1, 10))
    pods = [h for h in hns if h["spec"]["tier"] == 2]
    owned = [su for p in pods for su in members(p, "HyperNode")]
    assert sorted(owned) == sorted(f"su{i}" for i in range(1, 10))  # each SU exactly once
    core = [h for h in hns if h["spec"]["tier"] == 3]
    assert len(core) == 1 and members(core[0], "HyperNode") == [
        p["metadata"]["name"] for p in pods]
    assert_labels_agree(c, hns)


def test_adding_a_node_changes_only_its_su_hypernode():
    """The preview diff of a new node shows up in its own SU's HyperNode and nowhere else."""
    before = by_name(volcano.hypernodes(placement.plan(cluster_of([1, 2], per_su=31))))
    # SU 2 fills its last slot (SU 1 keeps the SM slot).
    after = by_name(volcano.hypernodes(placement.plan(
        validate_cluster(raw_of([(1, 31), (2, 32)]), REPO))))
    assert {n for n in before if before[n] != after[n]} == {"su2"}
    assert members(after["su2"], "Node")[-1] == "su2-node-31"


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (upstream CRDs) is not present")
def test_generated_hypernodes_pass_the_upstream_crd(tmp_path):
    objs = volcano.hypernodes(placement.plan(cluster_of(list(range(1, 10)))))
    path = tmp_path / "hypernodes.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    out = subprocess.run([sys.executable, str(SHARED / "tools" / "validate_manifests.py"),
                          "--k8s", "1.35", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == f"{len(objs)} objects checked, 0 invalid"
