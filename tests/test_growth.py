"""Growing the prod site, as a reviewer reads it: the preview's first lines say what the change
does to cables, switches and running work, and the runbook orders the physical work.

Each test renders prod as the baseline in a copy of the repository, grows it the way an
operator would (stack file and inventory rows for the new nodes), and previews.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.project import NODE_RESOURCES, run_offline

# Every test renders a baseline of a copy of prod and previews its growth.
pytestmark = pytest.mark.slow

KEY = "gpu-cluster:cluster"


def grow(project: Path, nodes: int, switches: tuple[str, ...] = (),
         retired: tuple[str, ...] = (), **fabric: Any) -> None:
    """Render the baseline, then give prod `nodes` GPU nodes (inventory rows for the new ones:
    their port GUIDs, MAC and host key as `ibstat`, `ip link` and `ssh-keyscan` would give),
    the new `switches` their GUID, management address and host key, and drop the `retired`
    switches' entries."""
    proc = run_offline(project, "preview", "--render")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stack = project / "Pulumi.prod.yaml"
    doc = yaml.safe_load(stack.read_text())
    cluster = doc["config"][KEY]
    rng = cluster["gpuNodes"]["ranges"][0]
    rng["count"] = nodes
    rng["racks"] = [f"r{i:02d}" for i in range(1, -(-nodes // rng["nodesPerRack"]) + 1)]
    cluster["fabric"].update(fabric)
    for key in ("switchGuids", "switchManagementIps", "switchHostKeys"):
        for name in retired:
            cluster["fabric"][key].pop(name, None)
    for i, name in enumerate(switches):
        cluster["fabric"]["switchGuids"][name] = f"0xfc6a1c0300b{i:05x}"
        cluster["fabric"]["switchManagementIps"][name] = f"10.10.2.{40 + i}"
        cluster["fabric"]["switchHostKeys"][name] = (
            f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{i:02d}" + "y" * 41)
    stack.write_text(yaml.safe_dump(doc, sort_keys=False))
    hcas = cluster["gpuNodes"]["template"]["hcas"]
    rows = [f"gpu-node-{n:02d},{r},{hca},0xb83fd20300b{n:02x}c{2 * r:02x},"
            f"5c:25:73:31:{n:02x}:10,ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{n:02d}"
            + "x" * 41 for n in range(8, nodes) for r, hca in enumerate(hcas)]
    with (project / "inventory/prod.csv").open("a") as inv:
        inv.write("".join(row + "\n" for row in rows))


def preview(project: Path) -> tuple[list[str], list[str]]:
    """(stdout lines, runbook steps without their numbers)."""
    proc = run_offline(project, "preview")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = [line.split(". ", 1)[1] for line in
             (project / "build/prod/runbook.txt").read_text().splitlines()
             if line.startswith("  ") and ". " in line and line.strip()[0].isdigit()]
    return proc.stdout.splitlines(), steps


def test_a_ninth_node_only_adds_its_cables(project: Path) -> None:
    """Prod pins two rails per leaf (16 slots: 15 nodes and the subnet managers' slot), so the
    9th node's 8 cables land on free ports and nothing already cabled moves."""
    grow(project, 9)
    out, steps = preview(project)
    assert out[:7] == [
        "Impact on hardware and running work:",
        "  existing links moved: 0",
        # gpu-node-08 opens rack r03; the switches are in r01 (fabric.switchRack).
        "  cables to plug: 8 (8 x optical cross-rack); to pull: 0",
        "  nodes drained: 0",
        "  nodes added: 1 (gpu-node-08)",
        # The new node joins untested; the gate tests it with one node that passed, not
        # with every GPU of a busy cluster (docs/acceptance.md).
        "  acceptance test: gpu-node-08 untested (no training or serving lands there) until a "
        "run passes on it with one GPU node of each SU that passed before (a free one if any): "
        "up to 35 min for its GPUs, else `pulumi up` fails and it stays closed to work",
        "  outage: none expected (new links and hosts only)",
    ]
    assert not [s for s in steps if s.startswith(("cordon", "move", "pull", "re-cable", "rack"))]
    assert sum(s.startswith("plug   ") for s in steps) == 8
    assert all("gpu-node-08" in s for s in steps if s.startswith("plug   "))
    # The new board gets its management address only once the DHCP/PXE server knows its MAC.
    (join,) = [s for s in steps if s.startswith("gpu-node-08 joins: ")]
    assert join.startswith("gpu-node-08 joins: before it powers on, load "
                           "build/prod/network/dhcp-hosts into the management network's DHCP/PXE "
                           "server (its management MAC ")


def test_every_edit_a_regrouping_needs_is_reported_in_one_run(project: Path) -> None:
    """16 nodes with prod's pins: two rails per leaf no longer fit, nor do two spines for the
    eight new leaves, and the four retired leaves' facts name no switch of the new plan. One
    preview says all of it (exit 2, nothing registered), each with its key and fix."""
    grow(project, 16)
    proc = run_offline(project, "preview")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    paths = re.findall(r"^  gpu-cluster:cluster\.(\S+): ", proc.stdout + proc.stderr, re.M)
    assert paths[:2] == ["fabric.railsPerLeaf", "fabric.spines"]
    assert sorted(paths[2:]) == sorted(f"fabric.{key}.{leaf}" for leaf in PROD_LEAVES
                                       for key in ("switchGuids", "switchManagementIps",
                                                   "switchHostKeys"))
    assert "Fix: remove fabric.switchGuids.leaf-su1-r0-1" in proc.stdout + proc.stderr


def test_regrouping_the_rails_says_so_first_and_racks_switches_before_cabling(
        project: Path) -> None:
    """16 nodes do not fit two rails per leaf: one leaf per rail (and four spines) re-cables
    every existing link. The preview opens with it; the runbook drains every node, keeps the
    subnet managers up (standby first) and racks the new switches before any cable."""
    grow(project, 16, railsPerLeaf=1, spines=4,
         switches=(*[f"leaf-su1-r{r}" for r in range(8)], "spine-03", "spine-04"),
         retired=("leaf-su1-r0-1", "leaf-su1-r2-3", "leaf-su1-r4-5", "leaf-su1-r6-7"))
    out, steps = preview(project)
    assert out[0] == "Impact on hardware and running work:"
    # 64 node cables, 2 subnet-manager cables, 4 storage-server cables and 128 leaf uplinks:
    # every link of prod.
    assert out[1] == ("  existing links moved: 198 (the fabric is re-cabled: every host on them "
                      "is drained)")
    assert out[3].startswith("  switches: rack 10 (leaf-su1-r0 … spine-04), retire 4 "
                             "(leaf-su1-r0-1, leaf-su1-r2-3, leaf-su1-r4-5, leaf-su1-r6-7)")
    assert out[4] == "  nodes drained: 8 (gpu-node-00 … gpu-node-07)"
    assert out[5] == "  nodes added: 8 (gpu-node-08 … gpu-node-15)"
    # The new nodes are tested in this `pulumi up`, among themselves: every node that passed
    # before is drained and marked untested, its links all moved. Those are tested after their
    # uncordon, with a node of the SU that passed by then.
    assert out[6].startswith("  acceptance test: gpu-node-08 … gpu-node-15 untested (no "
                             "training or serving lands there) until a run passes on them "
                             "together (no node that passed before is in service)")
    assert out[7].startswith("  acceptance test: gpu-node-00 … gpu-node-07 re-cabled: marked "
                             "untested at the drain")
    assert "maintenance window for the re-cabling" in out[8]

    def at(*prefixes: str) -> list[int]:
        return [i for i, s in enumerate(steps) if s.startswith(prefixes)]

    cable_work = at("move", "re-cable", "plug", "pull")
    assert len(at("move")) == 198  # each of prod's links, once (an uplink shows on 2 switches)
    # The subnet managers' cables as their steps say: the standby's (sm-02) first, the
    # master's (sm-01) last, once the standby is back in STANDBY.
    assert at("sm-02's cable moves: it runs the standby") < at("sm-01's cable moves: it runs "
                                                              "the master")
    assert at("move   sm-02") == [min(at("move"))]
    assert at("move   sm-01") == [max(at("move"))]
    assert max(at("cordon and drain")) < min(at("rack and power new switch"))
    assert all(f"kubectl label node {s.split()[3]} gpucluster.io/untested=true" in s
               for s in steps if s.startswith("cordon and drain gpu-node-"))
    assert max(at("rack and power new switch")) < min(cable_work)
    assert min(at("retire switch")) > max(cable_work)
    assert not [s for s in steps if s.startswith("cordon and drain sm-")]
    sm = [s for s in steps if s.startswith(("sm-01's cable", "sm-02's cable"))]
    assert [s[:5] for s in sm] == ["sm-02", "sm-01"]  # the standby (priority 14) first
    assert "standby subnet manager" in sm[0] and "master subnet manager" in sm[1]


def test_a_change_without_hardware_says_so_in_one_line(project: Path) -> None:
    proc = run_offline(project, "preview", "--render")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stack = project / "Pulumi.prod.yaml"
    stack.write_text(stack.read_text().replace("version: 4.13.3", "version: 4.13.4"))
    out, steps = preview(project)
    assert out[0] == "Impact: no cable, switch or node is touched; no running work is drained."


def test_a_scratch_stack_previews_against_prods_rendering(project: Path) -> None:
    """`--baseline prod`: a change tried in a copy of the prod stack file diffs against prod's
    rendering (its URNs read as the scratch stack's), so the preview shows the change alone."""
    proc = run_offline(project, "preview", "--render")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (project / "Pulumi.prod.yaml").read_text()
    (project / "Pulumi.scratch.yaml").write_text(text.replace("version: 4.13.3",
                                                              "version: 4.13.4"))
    proc = run_offline(project, "preview", "--stack", "scratch", "--baseline", "prod")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    diff = json.loads((project / "build/scratch/diff.json").read_text())
    assert [(c["action"], c["name"]) for c in diff] == [("update", "ingress-nginx")]
    assert "Changes against rendered/prod: 0 to create, 1 to update" in proc.stdout
    alone = run_offline(project, "preview", "--stack", "scratch")  # its own (no) rendering
    created = re.search(r"Changes against rendered/scratch: (\d+) to create, 0 to update",
                        alone.stdout)
    assert created and int(created.group(1)) > 150, alone.stdout[-2000:]  # every resource
    both = run_offline(project, "preview", "--stack", "scratch", "--baseline", "prod", "--render")
    assert both.returncode == 2 and "use one or the other" in both.stderr


SU1_LEAVES = tuple(f"leaf-su1-r{r}" for r in range(8))
SU2_LEAVES = tuple(f"leaf-su2-r{r}" for r in range(8))
PROD_LEAVES = ("leaf-su1-r0-1", "leaf-su1-r2-3", "leaf-su1-r4-5", "leaf-su1-r6-7")


def resize(project: Path, su1: int, su2: int, switches: tuple[str, ...] = (),
           retired: tuple[str, ...] = (), **fabric: Any) -> None:
    """Give prod `su1` GPU nodes in SU 1 and `su2` in SU 2 (a second range, numbered on),
    with inventory rows for every node beyond the first 8 and facts for the new switches."""
    stack = project / "Pulumi.prod.yaml"
    doc = yaml.safe_load(stack.read_text())
    cluster = doc["config"][KEY]
    first = cluster["gpuNodes"]["ranges"][0]
    per_rack = first["nodesPerRack"]
    first["count"] = su1
    first["racks"] = [f"r{i:02d}" for i in range(1, -(-su1 // per_rack) + 1)]
    ranges = [first]
    if su2:
        start = len(first["racks"]) + 1
        ranges.append({**first, "start": su1, "count": su2, "su": 2,
                       "managementIpStart": f"10.10.1.{100 + su1}",
                       "bmcAddressStart": f"10.11.1.{100 + su1}",
                       "racks": [f"r{i:02d}" for i in range(start, start - (-su2 // per_rack))]})
    cluster["gpuNodes"]["ranges"] = ranges
    cluster["fabric"].update(fabric)
    facts = cluster["fabric"]
    for name in retired:
        for key in ("switchGuids", "switchManagementIps", "switchHostKeys"):
            facts[key].pop(name, None)
    for name in switches:
        i = len(facts["switchGuids"])
        facts["switchGuids"][name] = f"0xfc6a1c0300b{i:05x}"
        facts["switchManagementIps"][name] = f"10.10.2.{40 + i}"
        facts["switchHostKeys"][name] = f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{i:02d}" + "y" * 41
    stack.write_text(yaml.safe_dump(doc, sort_keys=False))
    inventory = project / "inventory/prod.csv"
    rows = [r for r in inventory.read_text().splitlines() if r]
    have = {r.split(",")[0] for r in rows[1:]}
    hcas = cluster["gpuNodes"]["template"]["hcas"]
    rows += [f"gpu-node-{n:02d},{r},{hca},0xb83fd20300b{n:02x}c{2 * r:02x},"
             f"5c:25:73:31:{n:02x}:10,ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{n:02d}" + "x" * 41
             for n in range(su1 + su2) if f"gpu-node-{n:02d}" not in have
             for r, hca in enumerate(hcas)]
    inventory.write_text("".join(row + "\n" for row in rows))


def changed(project: Path) -> dict[str, set[str]]:
    diff = json.loads((project / "build/prod/diff.json").read_text())
    out: dict[str, set[str]] = {a: set() for a in ("create", "update", "replace", "delete")}
    for c in diff:
        out[c["action"]].add(c["name"])
    return out


def test_growing_to_a_full_su_and_one_node_beyond_says_what_it_costs(project: Path) -> None:
    """8 -> 32: SU 1 full (31 nodes, its last slot is the subnet managers') and the 32nd node
    opening SU 2. One leaf per rail and 8 spines (the two SUs' 512 uplinks): every existing link
    moves, and the preview says so first, with what to rack and retire."""
    assert run_offline(project, "preview", "--render").returncode == 0
    resize(project, 31, 1, railsPerLeaf=1, spines=8, retired=PROD_LEAVES,
           switches=(*SU1_LEAVES, *SU2_LEAVES, *[f"spine-{i:02d}" for i in range(3, 9)]))
    out, steps = preview(project)
    # sm-01's cable moves to a port its in-rack DAC does not reach: an in-rack optical one
    # replaces it.
    assert out[1] == ("  existing links moved: 198 (the fabric is re-cabled: every host on them "
                      "is drained); 1 needs a new cable (1 x optical in-rack)")
    assert out[3].startswith("  switches: rack 22 (leaf-su1-r0 … spine-08), retire 4")
    assert out[4] == "  nodes drained: 8 (gpu-node-00 … gpu-node-07)"
    got = changed(project)
    new_nodes = {f"gpu-node-{n:02d}" for n in range(8, 32)}
    assert {c for c in got["create"] if c.startswith("gpu-node-")} == {
        n.format(h=h) for h in new_nodes for n in NODE_RESOURCES}
    assert got["delete"] == {f"{leaf}-config" for leaf in PROD_LEAVES}
    assert sum(s.startswith("rack and power new switch") for s in steps) == 22
    assert sum(s.startswith("retire switch") for s in steps) == 4


def test_a_second_su_planned_ahead_grows_without_moving_a_cable(project: Path) -> None:
    """32 -> 40: the 32-node site above already has SU 2's leaves and the spines for both SUs,
    so 8 more nodes in SU 2 only plug their own 64 cables into free leaf ports."""
    resize(project, 31, 1, railsPerLeaf=1, spines=8, retired=PROD_LEAVES,
           switches=(*SU1_LEAVES, *SU2_LEAVES, *[f"spine-{i:02d}" for i in range(3, 9)]))
    assert run_offline(project, "preview", "--render").returncode == 0
    resize(project, 31, 9)
    out, steps = preview(project)
    assert out[:7] == [
        "Impact on hardware and running work:",
        "  existing links moved: 0",
        out[2],
        "  nodes drained: 0",
        "  nodes added: 8 (gpu-node-32 … gpu-node-39)",
        "  acceptance test: gpu-node-32 … gpu-node-39 untested (no training or serving lands "
        "there) until a run passes on them with one GPU node of each SU that passed before (a "
        "free one if any): up to 35 min for its GPUs, else `pulumi up` fails and they stay "
        "closed to work",
        "  outage: none expected (new links and hosts only)",
    ]
    assert out[2].startswith("  cables to plug: 64 (") and out[2].endswith("; to pull: 0")
    got = changed(project)
    assert not got["delete"]
    # The acceptance test's definition is resized and its gate runs again (on the new nodes).
    assert got["replace"] == {"mpijob-training-nccl-allreduce", "nccl-allreduce-acceptance",
                              "configmap-kube-system-node-problem-detector-rails-su2"}
    # What else knows the new nodes: SU 2's leaves (their port descriptions), the subnet
    # managers (GUIDs, partitions), SU 2's HyperNode and planned rails (the health checks'),
    # the acceptance queue's capacity and each control plane's approver of kubelet serving
    # certificates.
    assert got["update"] == {f"{leaf}-config" for leaf in SU2_LEAVES} | {
        "fabric", "hypernode-su2", "queue-acceptance", "sm-01-opensm", "sm-02-opensm",
        "mgmt-01-identities", "mgmt-02-identities", "mgmt-03-identities"}
    assert {c.split("-")[2] for c in got["create"] if c.startswith("gpu-node-")} == {
        f"{n:02d}" for n in range(32, 40)}
    assert not [s for s in steps if s.startswith(("cordon", "move", "pull", "re-cable", "rack"))]
    assert sum(s.startswith("plug   ") for s in steps) == 64
