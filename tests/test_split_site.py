"""A large site as several stacks (core, one per SU of nodes, platform, workloads) joined by a
stack reference: each preview covers its part only, and together they are the whole site."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.project import REPO, run_offline

from components.planning import placement
from components.wiring.loading import validate_cluster
from offline import site as offline_site
from offline.bench import scale_gpu_nodes

KEY = "gpu-cluster:cluster"
SITE = "gpu-cluster:site"
CORE = "organization/gpu-cluster/core"
PARTS = {  # the core's split.parts: every other part of the site, by stack
    "su1": {"part": "nodes", "sus": [1]},
    "su2": {"part": "nodes", "sus": [2]},
    "platform": {"part": "platform"},
    "workloads": {"part": "workloads"},
}


def _host_key(seed: int) -> str:
    public = Ed25519PrivateKey.from_private_bytes(seed.to_bytes(32, "big")).public_key()
    raw = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return raw.decode()


def site(project: Path, su2_nodes: int = 0, su1_nodes: int = 0) -> dict[str, Any]:
    """Prod grown to two SUs (`su2_nodes` more or fewer in SU 2, `su1_nodes` in SU 1), with
    what a real site's file has for every host and switch: an inventory (HCA port GUIDs, MACs,
    pinned host keys) and the switches' host keys."""
    doc = yaml.safe_load((project / "Pulumi.prod.yaml").read_text())
    doc = scale_gpu_nodes(doc, 64, free_slots=2)  # SU 1: 31 nodes and the SM slot, SU 2: 30
    doc["config"][KEY]["gpuNodes"]["ranges"][0]["count"] += su1_nodes
    doc["config"][KEY]["gpuNodes"]["ranges"][1]["count"] += su2_nodes
    cluster = validate_cluster(doc["config"][KEY], project)
    rows = ["hostname,rail,hca,portGuid,managementMac,sshHostKey"]
    for i, node in enumerate(cluster.nodes):
        mac = f"5c:25:73:40:{i // 256:02x}:{i % 256:02x}"
        rows += [f"{node.hostname},{r.index},{r.hca},0x5c2573030040{i:02x}{r.index:02x},{mac},"
                 f"{_host_key(1000 + i)}" for r in node.rails]
    (project / "inventory/site.csv").write_text("\n".join(rows) + "\n")
    switches = sorted(sw.name for sw in placement.plan(cluster).switches)
    raw = doc["config"][KEY]
    raw["inventoryFile"] = "inventory/site.csv"
    raw["fabric"]["switchHostKeys"] = {sw: _host_key(i + 1) for i, sw in enumerate(switches)}
    return doc


def write(project: Path, stack: str, doc: dict[str, Any], split: dict[str, Any] | None) -> None:
    """Pulumi.<stack>.yaml: the whole config for the core (`split`) or an unsplit stack; for
    another part only the reference to its core (and the secrets, none offline)."""
    doc = copy.deepcopy(doc)
    if split is not None and split.get("part") == "core":
        doc["config"][KEY]["split"] = split
    elif split is not None:
        del doc["config"][KEY]
        doc["config"][SITE] = CORE
    (project / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def write_site(project: Path, doc: dict[str, Any]) -> None:
    write(project, "core", doc, {"part": "core", "parts": PARTS})
    for stack, part in PARTS.items():
        write(project, stack, doc, part)
    # The site's policy config, which every part is judged with.
    (project / "policies" / "policy-config.core.json").write_text(
        (project / "policies" / "policy-config.prod.json").read_text())


def resources(project: Path, stack: str, *args: str) -> list[dict[str, Any]]:
    proc = run_offline(project, "preview", "--stack", stack, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((project / "build" / stack / "plan.json").read_text())["resources"]


def names(res: list[dict[str, Any]], type_prefix: str = "") -> set[str]:
    return {r["name"] for r in res if r["type"].startswith(type_prefix)}


@pytest.fixture()
def previews(project: Path) -> dict[str, list[dict[str, Any]]]:
    doc = site(project)
    write(project, "site", doc, None)
    write_site(project, doc)
    # In the order their data flows: each part reads what the core (and platform) export.
    return {stack: resources(project, stack) for stack in ["site", "core", *PARTS]}


@pytest.mark.slow
def test_each_part_holds_only_its_share(previews: dict[str, list[dict[str, Any]]]) -> None:
    hosts = "gpucluster:hardware:BareMetalNode"
    assert names(previews["core"], hosts) == {"mgmt-01", "mgmt-02", "mgmt-03", "sm-01", "sm-02"}
    assert "mgmt-01-kubeadm-init" in names(previews["core"])
    assert names(previews["su1"], hosts) == {f"gpu-node-{i:02d}" for i in range(31)}
    assert names(previews["su2"], hosts) == {f"gpu-node-{i:02d}" for i in range(32, 62)}
    for part in ("su1", "su2", "platform", "workloads"):
        assert "mgmt-01-kubeadm-init" not in names(previews[part])
        # The provider is built from the core stack's kubeconfig output (a stack reference is
        # read, not registered, so the provider is what the plan shows).
        provider = next(r for r in previews[part] if r["type"] == "pulumi:providers:kubernetes")
        assert provider["inputs"]["kubeconfig"] == "[secret]"
        assert not names(previews[part], "gpucluster:fabric:")
    assert names(previews["platform"], "kubernetes:helm.sh") >= {"gpu-operator", "volcano"}
    assert names(previews["workloads"], "kubernetes:kubeflow.org") == {
        "pytorchjob-training-llama-70b-pretrain", "mpijob-training-nccl-allreduce"}


@pytest.mark.slow
def test_the_parts_together_are_the_whole_site(previews: dict[str, list[dict[str, Any]]]
                                               ) -> None:
    # A part's provider and the facts its references publish (SiteFacts) are its plumbing.
    plumbing = ("pulumi:pulumi:StackReference", "pulumi:providers:", "gpucluster:site:")
    whole = {(r["type"], r["name"]) for r in previews["site"]
             if not r["type"].startswith(plumbing)}
    parts = [{(r["type"], r["name"]) for r in previews[p]
              if not r["type"].startswith(plumbing)} for p in ["core", *PARTS]]
    # Each nodes stack mints its own tokens from the control plane, so the CA hash command and
    # the KubeadmCluster/Hardware components repeat per stack; everything else is in one part.
    shared = {("command:remote:Command", "ca-cert-hash"),
              ("gpucluster:bootstrap:KubeadmCluster", "kubernetes"),
              ("gpucluster:hardware:Hardware", "hardware")}
    assert set().union(*parts) == whole
    for i, a in enumerate(parts):
        for b in parts[i + 1:]:
            assert a & b <= shared


def site_preview(project: Path) -> subprocess.CompletedProcess[str]:
    return run_offline(project, "site", "--stack", "core")


def diff(project: Path, stack: str) -> list[dict[str, Any]]:
    return json.loads((project / "build" / stack / "diff.json").read_text())


def rendered_site(project: Path) -> None:
    """The site as applied: every part previewed and its rendering written."""
    write_site(project, site(project))
    for stack in ("core", *PARTS):
        resources(project, stack, "--render")


def apply_order(project: Path) -> list[str]:
    """The stacks the site runbook applies, in its order."""
    runbook = (project / "build/core/site-runbook.txt").read_text()
    return [line.split("--stack ")[1].split()[0] for line in runbook.splitlines()
            if "pulumi up --stack" in line]


@pytest.mark.slow
def test_every_part_passes_the_policy_pack(project: Path) -> None:
    """The workloads part's queues, network attachments and default-deny policies are the
    platform's, its HCA names the core's fabric's: read through its references."""
    write_site(project, site(project))
    proc = site_preview(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for part in ("core", *PARTS):
        assert f"== {part} (" in proc.stdout
    assert proc.stdout.count(", 0 mandatory,") == 5, proc.stdout
    report = json.loads((project / "build/workloads/policy-report.json").read_text())
    assert not [v for v in report if v["level"] == "mandatory"]


@pytest.mark.slow
def test_a_node_added_to_su2_previews_as_one_ordered_change(project: Path) -> None:
    rendered_site(project)
    # One site config: the change is made once, in the core's file (and the inventory).
    write(project, "core", site(project, +1), {"part": "core", "parts": PARTS})
    proc = site_preview(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert diff(project, "su1") == []
    created = {c["name"] for c in diff(project, "su2") if c["action"] == "create"}
    assert "gpu-node-62-kubeadm-join" in created and "gpu-node-62" in created
    # The core knows the node before it joins.
    assert apply_order(project) == ["core", "su1", "su2", "platform", "workloads"]
    assert "gpu-node-62 joins" in (project / "build/core/site-runbook.txt").read_text()


def verdicts(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """Each part's line of a site preview: stack -> its changes and verdict."""
    return {line.split()[1]: line.split(": ", 1)[1] for line in proc.stdout.splitlines()
            if line.startswith("== ")}


REUSED = " (nothing it reads changed since its last preview: not rerun)"


@pytest.mark.slow
def test_a_site_preview_reruns_only_the_parts_whose_reads_changed(project: Path) -> None:
    """A node added to SU 2 changes what the core, SU 2's part, the platform and the workloads
    read, not what SU 1's part reads: SU 1 keeps its verdict from its rendering. A fresh
    preview of every part gives each the same verdict: the one it kept is still true."""
    rendered_site(project)
    write(project, "core", site(project, +1), {"part": "core", "parts": PARTS})
    reused = site_preview(project)
    assert reused.returncode == 0, reused.stdout + reused.stderr
    kept = verdicts(reused)
    assert kept["su1"] == "0 change(s); ok" + REUSED
    assert [s for s, v in kept.items() if v.endswith(REUSED)] == ["su1"]
    assert diff(project, "su1") == []  # its build says so too, not its rendering's changes
    fresh = run_offline(project, "site", "--stack", "core", "--fresh")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert verdicts(fresh) == {s: v.removesuffix(REUSED) for s, v in kept.items()}
    # Nothing changed since: every part keeps the verdict its fresh preview gave.
    again = verdicts(site_preview(project))
    assert again == {s: v + REUSED for s, v in verdicts(fresh).items()}


@pytest.mark.slow
def test_what_every_part_reads_reruns_every_part(project: Path) -> None:
    """The program (any file of the project) and a setting outside the node list are read by
    every part; SU 1's own inventory rows only by SU 1's part (and the core, the platform and
    the workloads, which read the whole site)."""
    rendered_site(project)
    inventory = project / "inventory/site.csv"
    rows = inventory.read_text().splitlines()
    first = rows[1].split(",")[0]  # a node of SU 1
    mac = "5c:25:73:7f:00:01"
    inventory.write_text("\n".join(
        ",".join([*r.split(",")[:4], mac, r.split(",")[5]]) if r.startswith(f"{first},") else r
        for r in rows) + "\n")
    rerun = [s for s, v in verdicts(site_preview(project)).items() if not v.endswith(REUSED)]
    assert rerun == ["core", "su1", "platform", "workloads"]
    with (project / "components/__init__.py").open("a") as f:
        f.write("# a change to the program\n")
    assert not [v for v in verdicts(site_preview(project)).values() if v.endswith(REUSED)]


@pytest.mark.slow
def test_a_node_removed_from_su2_is_applied_nodes_before_core(project: Path) -> None:
    rendered_site(project)
    write(project, "core", site(project, -1), {"part": "core", "parts": PARTS})
    proc = site_preview(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Jobs shrink, then the node drains and leaves, then the core forgets its ports.
    assert apply_order(project) == ["workloads", "platform", "su2", "core", "su1"]


@pytest.mark.slow
def test_a_change_that_removes_in_one_su_and_adds_in_another_orders_each_part_its_way(
        project: Path) -> None:
    """SU 1 loses its last node, SU 2 gains one, in one change: SU 1's part drains and removes
    its node before the core forgets it; the core knows SU 2's new node before SU 2's part
    joins it. One direction for the whole site would refuse one of the two parts."""
    rendered_site(project)
    write(project, "core", site(project, su2_nodes=+1, su1_nodes=-1),
          {"part": "core", "parts": PARTS})
    proc = site_preview(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert apply_order(project) == ["workloads", "platform", "su1", "core", "su2"]
    runbook = (project / "build/core/site-runbook.txt").read_text()
    assert "gpu-node-62 joins" in runbook
    assert "a node they add joins only once the core knows it" in runbook


def test_nodes_parts_are_previewed_in_su_order_and_each_applied_its_way(tmp_path: Path
                                                                        ) -> None:
    parts_ = {"su10": {"part": "nodes", "sus": [10]}, "su2": {"part": "nodes", "sus": [2]},
              "su1": {"part": "nodes", "sus": [1]}, "apps": {"part": "workloads"},
              "plat": {"part": "platform"}}
    (tmp_path / "Pulumi.core.yaml").write_text(yaml.safe_dump({"config": {KEY: {
        "split": {"part": "core", "parts": parts_}}}}))
    found = offline_site.parts(tmp_path, "core")
    assert found == [("core", "core"), ("su1", "nodes"), ("su2", "nodes"), ("su10", "nodes"),
                     ("plat", "platform"), ("apps", "workloads")]
    assert isinstance(found, list)
    assert offline_site.apply_order(found, set())[0] == [
        "core", "su1", "su2", "su10", "plat", "apps"]
    assert offline_site.apply_order(found, {"su2", "su10"})[0] == [
        "apps", "plat", "su10", "su2", "core", "su1"]
    # Previewed in three steps, each reading only the ones before it: the core; the nodes
    # parts and the platform side by side (they read only the core's outputs); the workloads.
    assert [[s for s, _ in stage] for stage in offline_site._stages(found)] == [
        ["core"], ["su1", "su2", "su10", "plat"], ["apps"]]


@pytest.mark.slow
def test_a_nodes_part_run_before_its_core_knows_a_new_node_fails_before_any_change(
        project: Path) -> None:
    write_site(project, site(project))
    resources(project, "core")  # what the core last applied: 61 nodes
    write(project, "core", site(project, +1), {"part": "core", "parts": PARTS})
    proc = run_offline(project, "preview", "--stack", "su2")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "does not know node(s) gpu-node-62 as configured" in proc.stderr
    assert "run `pulumi up` on organization/gpu-cluster/core first" in proc.stderr
    assert not (project / "build/su2").exists()  # nothing rendered, nothing registered


def test_a_part_without_its_core_applied_fails_before_any_change(project: Path) -> None:
    write_site(project, site(project))
    proc = run_offline(project, "preview", "--stack", "platform")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "organization/gpu-cluster/core has no outputs" in proc.stderr


@pytest.mark.slow
def test_a_core_named_in_another_organization_is_refused_offline_on_a_diy_backend(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every part names `organisation/…`: consistent, but on a file:// backend the only
    organization is `organization`, so the reference could never resolve at `pulumi up`."""
    write_site(project, site(project))
    for stack in PARTS:
        path = project / f"Pulumi.{stack}.yaml"
        path.write_text(path.read_text().replace("organization/", "organisation/"))
    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{project / 'state'}")
    proc = run_offline(project, "preview", "--stack", "su1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert ("names organization organisation, but this stack is in organization "
            "organization") in proc.stderr
    assert "set gpu-cluster:site to organization/gpu-cluster/core" in proc.stderr
    assert not (project / "build/su1").exists()


def _without_attachments(outputs: dict[str, Any]) -> None:
    objects = outputs["platform"]["facts"]["objects"]
    objects[:] = [o for o in objects if o["kind"] != "NetworkAttachmentDefinition"]


def _small_queue(outputs: dict[str, Any]) -> None:
    for o in outputs["platform"]["facts"]["objects"]:
        if o["kind"] == "Queue" and o["metadata"]["name"] == "training":
            o["spec"]["capability"]["nvidia.com/gpu"] = 8


def _no_hcas(outputs: dict[str, Any]) -> None:
    outputs["core"]["facts"]["hcas"] = []


@pytest.mark.slow
@pytest.mark.parametrize(("tamper", "rule", "says"), [
    (_without_attachments, "rdma-network-attachment-exists",
     "no NetworkAttachmentDefinition training/ib-rail0"),
    (_small_queue, "gang-fits-queue", "but queue 'training' is capped at 8"),
    (_no_hcas, "nccl-ib-hca-exists", "cannot be checked"),
])
def test_the_workloads_part_is_judged_by_what_the_other_parts_publish(
        project: Path, tamper: Any, rule: str, says: str) -> None:
    """Not a pass for want of facts: what the platform and the core publish decides."""
    write_site(project, site(project))
    for stack in ("core", "platform"):
        resources(project, stack)
    outputs = {s: json.loads((project / "build" / s / "outputs.json").read_text())["outputs"]
               for s in ("core", "platform")}
    tamper(outputs)
    for s in ("core", "platform"):
        path = project / "build" / s / "outputs.json"
        recorded = json.loads(path.read_text())
        path.write_text(json.dumps({**recorded, "outputs": outputs[s]}))
    proc = run_offline(project, "preview", "--stack", "workloads")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    report = json.loads((project / "build/workloads/policy-report.json").read_text())
    found = [v for v in report if v["policy"] == rule and v["level"] == "mandatory"]
    assert found and says in found[0]["message"], report


def _new_board(project: Path, host: str) -> None:
    """The inventory rows of `host` with a new board's port GUIDs, MAC and host key."""
    path = project / "inventory/site.csv"
    rows = path.read_text().splitlines()
    for i, row in enumerate(rows):
        name, rail, hca, guid, _, _ = row.split(",")
        if name == host:
            rows[i] = ",".join([name, rail, hca, guid[:-4] + "beef"[:2] + guid[-2:],
                                "5c:25:73:99:00:01", _host_key(9999)])
    path.write_text("\n".join(rows) + "\n")


@pytest.mark.slow
def test_a_replaced_board_previews_core_first_and_its_part_waits_for_the_core(
        project: Path) -> None:
    rendered_site(project)
    _new_board(project, "gpu-node-40")
    # Run before the core has learned the board: its port GUIDs are not in the SM files yet.
    proc = run_offline(project, "preview", "--stack", "su2")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "does not know node(s) gpu-node-40 as configured (new, or a replaced board)" \
        in proc.stderr
    proc = site_preview(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert diff(project, "su1") == []
    assert {c["name"] for c in diff(project, "core")} >= {"sm-01-opensm", "sm-02-opensm"}
    assert apply_order(project) == ["core", "su1", "su2", "platform", "workloads"]
    runbook = (project / "build/core/site-runbook.txt").read_text()
    assert "gpu-node-40" in runbook.split("su2 (nodes):")[1]


@pytest.mark.parametrize(("slots", "rails_per_leaf"), [
    (48, None),  # SU 2: 16 nodes, 2 rails a leaf (17 slots, had it the SMs' slot: 1)
    (256, None), (1024, None), (8, 2)])
def test_a_nodes_part_names_the_leaves_the_whole_plan_cables(slots: int,
                                                            rails_per_leaf: int | None) -> None:
    """A nodes part labels its nodes with their leaves without planning the whole fabric:
    the leaves it names are the ones the core's plan cables, in every SU (the first, with the
    subnet managers' slot, included), two and three tiers, derived or pinned rails per leaf."""
    doc = scale_gpu_nodes(yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text()), slots,
                          free_slots=0)
    raw = doc["config"][KEY]
    if rails_per_leaf:
        raw["fabric"]["railsPerLeaf"] = rails_per_leaf
    cluster = validate_cluster(raw, REPO)
    whole = placement.rail_leaves(placement.plan(cluster))
    for su in sorted({n.su for n in cluster.nodes}):
        nodes = tuple(n for n in cluster.nodes if n.su == su)
        assert placement.owned_rail_leaves(cluster, nodes) == {
            n.hostname: whole[n.hostname] for n in nodes}


@pytest.mark.slow
def test_apply_runs_pulumi_up_part_by_part_and_stops_at_the_first_failure(
        project: Path, tmp_path: Path) -> None:
    """`site --apply` after a clean preview. The `pulumi` on PATH is a stand-in that records
    its arguments and fails for su2 (the real CLI cannot apply the stack here: no build of the
    command provider)."""
    write_site(project, site(project))
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\ncase "$*" in *"--stack su2 "*) exit 1 ;; esac\n')
    (bin_dir / "pulumi").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "offline", "site", "--stack", "core",
                           "--apply", "--quiet", "--project-dir", str(project)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    pack = "--policy-pack policies --policy-pack-config policies/policy-config.core.json"
    assert calls.read_text().splitlines() == [
        f"up --yes --stack {s} {pack}" for s in ("core", "su1", "su2")]
    assert "pulumi up --stack su2 failed (exit 1); not applied: platform, workloads" \
        in proc.stderr
