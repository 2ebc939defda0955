"""The benchmark's stack generator, its tables and the engine section's skip path (the timing
itself is never asserted)."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
from pathlib import Path

import pytest
from support.project import REPO

from offline import bench, bench_engine
from offline.bench import BENCH_STACK, best, per_node, scale_gpu_nodes, table
from offline.bench_engine import best_engine, engine_table, find_engine, run_tree
from offline.bench_split import split_site, split_table
from offline.cli import build_parser

BASE = {"config": {"gpu-cluster:cluster": {
    "inventoryFile": "inventory/prod.csv",
    "gpuNodes": {
        "template": {"hcas": ["mlx5_0"]},
        "ranges": [{"prefix": "gpu-node-", "start": 0, "count": 8, "digits": 2, "su": 1,
                    "firstSlot": 0, "managementIpStart": "10.10.1.100",
                    "bmcAddressStart": "10.11.1.100", "racks": ["r01", "r02"],
                    "nodesPerRack": 4}],
        "overrides": {"gpu-node-00": {"rack": "r01"}},
    },
}}}


def test_scale_to_1024_nodes() -> None:
    doc = scale_gpu_nodes(BASE, 1024, free_slots=0)
    cluster = doc["config"]["gpu-cluster:cluster"]
    ranges = cluster["gpuNodes"]["ranges"]
    assert len(ranges) == 32
    assert [r["su"] for r in ranges] == list(range(1, 33))
    assert sum(r["count"] for r in ranges) == 1024 and {r["count"] for r in ranges} == {32}
    assert all(r["digits"] == 4 for r in ranges)
    assert "overrides" not in cluster["gpuNodes"] and "inventoryFile" not in cluster
    ips = [ipaddress.ip_address(r["managementIpStart"]) + i
           for r in ranges for i in range(r["count"])]
    bmcs = [ipaddress.ip_address(r["bmcAddressStart"]) + i
            for r in ranges for i in range(r["count"])]
    assert len(set(ips)) == 1024 and len(set(bmcs)) == 1024
    assert len({ip.packed[:3] for ip in ips}) == 32  # one /24 per SU
    assert ranges[5]["racks"] == [f"su6-r{j:02d}" for j in range(1, 9)]
    hosts = {f"{r['prefix']}{r['start'] + i:0{r['digits']}d}"
             for r in ranges for i in range(r["count"])}
    assert len(hosts) == 1024
    # The input document is not modified.
    assert len(BASE["config"]["gpu-cluster:cluster"]["gpuNodes"]["ranges"]) == 1


def test_a_full_first_su_leaves_its_last_slot_for_the_subnet_managers() -> None:
    base = {"config": {"gpu-cluster:cluster": {
        **BASE["config"]["gpu-cluster:cluster"],
        "fabric": {"subnetManagers": [{"host": "sm-01"}, {"host": "sm-02"}]}}}}
    ranges = scale_gpu_nodes(base, 256)["config"]["gpu-cluster:cluster"]["gpuNodes"]["ranges"]
    assert [r["count"] for r in ranges] == [31] + [32] * 7
    assert [r["start"] for r in ranges] == [32 * k for k in range(8)]  # SU k's numbers
    ranges = scale_gpu_nodes(base, 8)["config"]["gpu-cluster:cluster"]["gpuNodes"]["ranges"]
    assert [r["count"] for r in ranges] == [8]  # a partial SU has free ports already


def test_a_larger_site_gets_a_pod_cidr_with_a_24_per_node() -> None:
    base = {"config": {"gpu-cluster:cluster": {
        **BASE["config"]["gpu-cluster:cluster"],
        "hosts": [{"hostname": "mgmt-01", "role": "control-plane"}],
        "kubernetes": {"podCidr": "10.244.0.0/16"}}}}
    pods = scale_gpu_nodes(base, 1024, free_slots=0)["config"]["gpu-cluster:cluster"][
        "kubernetes"]["podCidr"]
    assert pods == "10.128.0.0/13"  # 1025 kubelets: 2048 x /24
    small = scale_gpu_nodes(base, 128)["config"]["gpu-cluster:cluster"]["kubernetes"]
    assert small["podCidr"] == "10.244.0.0/16"


def test_partial_last_su() -> None:
    ranges = scale_gpu_nodes(BASE, 40)["config"]["gpu-cluster:cluster"]["gpuNodes"]["ranges"]
    assert [(r["start"], r["count"], r["su"]) for r in ranges] == [(0, 32, 1), (32, 8, 2)]
    assert ranges[1]["racks"] == ["su2-r01", "su2-r02"]


def test_table_reports_ratios() -> None:
    row = {"resources": 100, "seconds": 2.0, "rss": 100.0, "program": 1.5, "floor": 1.0,
           "floor_process": 1.25, "floor_tuned": 0.75, "floor_rss": 90.0}
    text = table([{**row, "nodes": 128, "gpu_nodes": 126},
                  {**row, "nodes": 1024, "resources": 800, "seconds": 16.0, "program": 12.0},
                  {**row, "nodes": 256, "resources": 200, "seconds": 4.0, "program": 3.0},
                  {**row, "nodes": 2048, "resources": 1600, "seconds": 40.0, "program": 30.0}])
    # program/floor 1.5, program/same-GC floor 2.0, preview/floor process 1.6
    assert ("| 126 (128) | 100 | 0.8 | 1.50 | 1.00 | 1.50 | 0.75 | 2.00 | 2.00 | 1.25 | 1.60 |"
            in text)
    assert ("time(1024)/time(128) = 8.00 (program 8.00) for 8x the slots and 8.00x the "
            "resources (scaling exponent 1.00" in text)
    # The whole site's target: t(2048)/t(256) within 9 for 8x the slots.
    assert ("time(2048)/time(256) = 10.00 (program 10.00) for 8x the slots and 8.00x the "
            "resources (scaling exponent 1.11" in text)


def test_synthetic_table_has_no_same_gc_floor() -> None:
    row = {"nodes": "-", "resources": 10, "seconds": 1.0, "rss": 1.0, "program": 0.5,
           "floor": 0.5, "floor_process": 1.0, "floor_tuned": None, "floor_rss": 1.0}
    assert "| - | 10 | - | 0.50 | 0.50 | 1.00 | - | - | 1.00 | 1.00 | 1.00 |" in table([row])


def test_repeated_runs_report_the_fastest_time_and_the_largest_rss() -> None:
    runs = [{"nodes": 8, "resources": 10, "seconds": s, "program": p, "floor": f,
             "floor_process": f + 0.2, "floor_tuned": None, "rss": r, "floor_rss": 1.0}
            for s, p, f, r in [(3.0, 2.0, 1.5, 100.0), (2.5, 2.2, 1.0, 120.0)]]
    row = best(runs)
    assert (row["seconds"], row["program"], row["floor"], row["floor_process"]) == (
        2.5, 2.0, 1.0, 1.2)
    assert row["floor_tuned"] is None and row["rss"] == 120.0


def test_a_larger_site_gets_an_rdma_range_with_a_block_per_node() -> None:
    """nv-ipam gives every GPU node 64 RDMA pod addresses (and one spare block)."""
    base = {"config": {"gpu-cluster:cluster": {
        **BASE["config"]["gpu-cluster:cluster"], "network": {"rdmaCidr": "192.168.0.0/16"}}}}
    big = scale_gpu_nodes(base, 2048, free_slots=0)["config"]["gpu-cluster:cluster"]
    assert big["network"]["rdmaCidr"] == "192.168.0.0/14"  # 2049 blocks x 64 > 2^17
    small = scale_gpu_nodes(base, 1000)["config"]["gpu-cluster:cluster"]
    assert small["network"]["rdmaCidr"] == "192.168.0.0/16"


def test_a_split_site_lists_one_nodes_part_per_su_in_its_core() -> None:
    stacks = split_site(scale_gpu_nodes(BASE, 96, free_slots=0))
    assert list(stacks) == ["whole", "core", "su1", "su2", "su3", "platform", "workloads"]
    split = stacks["core"]["config"]["gpu-cluster:cluster"]["split"]
    assert split["parts"]["su2"] == {"part": "nodes", "sus": [2]}
    # Every other part holds no copy of the config, only its core.
    assert stacks["su2"]["config"] == {"gpu-cluster:site": "organization/gpu-cluster/core"}
    assert "split" not in stacks["whole"]["config"]["gpu-cluster:cluster"]


def test_split_table_compares_each_part_with_the_whole_site() -> None:
    rows = [{"slots": n, "sus": n // 32, "stack": s, "seconds": t, "rss": 100.0,
             "returncode": 0}
            for n, s, t in [(256, "su1", 2.0), (256, "whole", 8.0), (2048, "su1", 3.0)]]
    text = split_table(rows)
    assert "| 256 | 8 | su1 | 2.00 | 100 | 0.25 |" in text
    assert "| 2048 | 64 | su1 | 3.00 | 100 | - |" in text
    assert "SU part: time(2048)/time(256) = 1.50 for 8x the site" in text


def test_resources_per_node_are_counted_by_what_they_are_for() -> None:
    """Each GPU node's resources by name after the hostname; anything named after a node that
    the table does not explain is counted as "other", so a new per-node resource shows."""
    plan = {"resources": [{"name": n} for n in (
        "gpu-node-00", "gpu-node-00-prepare", "gpu-node-00-reboot", "gpu-node-00-reboot-wait",
        "gpu-node-01", "gpu-node-01-kubernetes-upgrade", "gpu-node-01-new-thing", "spine-01",
        "gpu-node-010-prepare")]}
    assert per_node(plan, ["gpu-node-00", "gpu-node-01"]) == {
        "": 1.0, "-prepare": 0.5, "-reboot": 0.5, "-reboot-wait": 0.5,
        "-kubernetes-upgrade": 0.5, "other": 0.5}


def test_the_plan_is_read_a_resource_at_a_time_as_the_preview_writes_it(
        build: Path, tmp_path: Path) -> None:
    """The bench reads a plan's names and summary line by line (a whole 2,048-node plan in
    its own process would show in every later child's peak RSS): the same as the whole file."""
    plan = json.loads((build / "plan.json").read_text())
    (tmp_path / "build" / BENCH_STACK).mkdir(parents=True)
    (tmp_path / "build" / BENCH_STACK / "plan.json").write_text((build / "plan.json").read_text())
    read = bench._plan(tmp_path)
    assert read["summary"] == plan["summary"] and read["summary"]["total"] > 200
    assert [r["name"] for r in read["resources"]] == [r["name"] for r in plan["resources"]]


def _engine_row(stack: str, resources: int, offline: float, program: float, engine: float,
                no_checkpoints: float, steps: int | None = None) -> dict:
    def run(seconds: float) -> dict:
        return {"seconds": seconds, "rss": 400.0, "cpu_wait4": seconds * 1.1,
                "cpu": {"program": seconds / 2, "engine": seconds / 4, "pip": 0.5}}
    steps = resources + 1 if steps is None else steps
    return {"stack": stack, "resources": resources, "offline": offline, "program": program,
            "steps": {"engine": steps, "no_checkpoints": steps},
            "engine": run(engine), "no_checkpoints": run(no_checkpoints)}


def test_engine_table_reports_the_engine_beside_the_offline_preview() -> None:
    text = engine_table([_engine_row("prod", 219, 2.0, 1.25, 5.0, 4.0),
                         _engine_row("128 nodes", 2168, 8.0, 4.0, 320.0, 32.0)])
    # engine / offline 2.5 and 40.0, engine / program 4.0 and 80.0, no checkpoints / offline
    assert "| prod | 219 | 2.00 | 1.25 | 5.00 | 2.5 | 4.0 | 4.00 | 2.0 | 400 | 400 |" in text
    assert "| 128 nodes | 2168 | 8.00 | 4.00 | 320.00 | 40.0 | 80.0 | 32.00 | 4.0 |" in text
    # CPU by process: program, engine, language host, pip, providers, other; sampled, wait4
    assert ("| 128 nodes | default | 320.0 | 160.0 | 80.0 | 0.0 | 0.5 | 0.0 | 0.0 | 0.0 "
            "| 240.5 | 352.0 |") in text
    assert "| 128 nodes | no checkpoints | 32.0 | 16.0 | 8.0 |" in text
    assert "planned" not in text  # the engine's steps: the offline resources and its Stack


def test_engine_table_says_when_the_engine_planned_other_resources() -> None:
    text = engine_table([_engine_row("prod", 219, 2.0, 1.25, 5.0, 4.0, steps=219)])
    assert "prod: the engine planned {'engine': 219, 'no_checkpoints': 219} steps" in text


def test_repeated_engine_runs_report_the_fastest_with_its_breakdown() -> None:
    slow, fast = (_engine_row("prod", 219, 2.0, 1.25, 6.0, 4.0),
                  _engine_row("prod", 219, 2.5, 1.0, 5.0, 4.5))
    slow["engine"]["rss"], fast["no_checkpoints"]["rss"] = 500.0, 450.0
    row = best_engine([slow, fast])
    assert (row["offline"], row["program"]) == (2.0, 1.0)
    assert row["engine"]["seconds"] == 5.0 and row["engine"]["cpu"]["program"] == 2.5
    assert row["engine"]["rss"] == 500.0  # the largest of the runs
    assert row["no_checkpoints"]["seconds"] == 4.0 and row["no_checkpoints"]["rss"] == 450.0


def _bench_args(**kw: object) -> argparse.Namespace:
    args = build_parser().parse_args(["bench", "--project-dir", str(REPO)])
    return argparse.Namespace(**{**vars(args), **kw})


def test_without_the_engine_the_section_is_skipped_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi on PATH
    monkeypatch.setenv("GPU_CLUSTER_CACHE", str(tmp_path / "cache"))  # nor in the cache
    assert find_engine(REPO)[0] is None
    assert bench_engine.main(_bench_args()) == 0
    out = capsys.readouterr().out
    assert out.startswith("engine: skipped: no pulumi on PATH or in ") and "make engine" in out
    assert out.count("\n") == 1
    # Asked for by --engine: the same reason, and a failure.
    assert bench_engine.main(_bench_args(engine=True)) == 2
    assert "engine: skipped: no pulumi" in capsys.readouterr().err
    # --no-engine: nothing at all.
    assert bench_engine.main(_bench_args(engine=False)) == 0
    assert capsys.readouterr() == ("", "")


def test_an_engine_without_its_plugins_is_skipped(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cli = tmp_path / "cache" / "engine" / "bin-pulumi-v0" / "pulumi"
    cli.parent.mkdir(parents=True)
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("GPU_CLUSTER_CACHE", str(tmp_path / "cache"))
    where, why = find_engine(REPO)
    assert where is None and "has no pulumi-language-python" in why


def test_bench_engine_flags() -> None:
    parse = build_parser().parse_args
    assert parse(["bench"]).engine is None  # on when the engine is built
    assert parse(["bench", "--no-engine"]).engine is False
    args = parse(["bench", "--engine", "--engine-sizes", "8,128", "--engine-repeat", "1"])
    assert (args.engine, args.engine_sizes, args.engine_repeat) == (True, "8,128", 1)


def test_a_process_tree_is_timed_and_its_cpu_attributed_by_process(tmp_path: Path) -> None:
    """The sampler follows a child's children: a shell whose child burns CPU for 0.8 s."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8: pass\n"
    (tmp_path / "burn.py").write_text(burn)
    run = run_tree(["bash", "-c", f"{sys.executable} burn.py; true"], tmp_path,
                   {"PATH": os.environ["PATH"]})
    assert run.returncode == 0 and run.seconds >= 0.8
    assert run.cpu.get("other", 0.0) >= 0.4  # sampled every 0.2 s: the last samples may miss
    assert run.cpu_wait4 >= 0.8  # the shell and the Python it waited for
    assert run.peak_rss_mib > 1


@pytest.mark.slow
@pytest.mark.e2e
def test_the_engine_plans_what_the_offline_preview_of_prod_does() -> None:
    """One engine run of prod, both ways (seconds): the same resources (and the Stack)."""
    where, why = find_engine(REPO)
    if where is None:
        pytest.skip(why)
    (row,) = bench_engine.bench_engine(REPO, [], 1)
    assert row["steps"] == {"engine": row["resources"] + 1,
                            "no_checkpoints": row["resources"] + 1}
    assert row["engine"]["cpu"]["program"] > 0 and row["engine"]["cpu"]["engine"] > 0
