"""What each part of a split site costs to preview, beside the whole site (`make bench`).

A generated site of N GPU node slots (`bench.scale_gpu_nodes`) is written once whole and once
split: the core (with every other part listed in its `split.parts`), one nodes part per SU, the
platform and the workloads (each naming the core in `gpu-cluster:site`). The parts are
previewed in the order their data flows (each reads what the ones before it export), and one
SU part stands for them all (they differ only in which SU they own). Every preview is a fresh
child process; times are wall seconds of the whole preview, reported, never asserted.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from .bench import CLUSTER_KEY, Sample, _bench_project, _preview, scale_gpu_nodes

SITE_KEY = "gpu-cluster:site"
CORE = "core"


def split_site(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Stack name -> stack file document: the whole site, its core and every other part."""
    sus = sorted({int(r["su"]) for r in doc["config"][CLUSTER_KEY]["gpuNodes"]["ranges"]})
    parts: dict[str, dict[str, Any]] = {f"su{su}": {"part": "nodes", "sus": [su]} for su in sus}
    parts |= {"platform": {"part": "platform"}, "workloads": {"part": "workloads"}}
    core = copy.deepcopy(doc)
    core["config"][CLUSTER_KEY]["split"] = {"part": "core", "parts": parts}
    stacks = {"whole": doc, CORE: core}
    for stack in parts:
        part = copy.deepcopy(doc)
        del part["config"][CLUSTER_KEY]
        part["config"][SITE_KEY] = f"organization/gpu-cluster/{CORE}"
        stacks[stack] = part
    return stacks


def bench_split(project: Path, stack: str, sizes: list[int], whole_up_to: int
                ) -> list[dict[str, Any]]:
    """One row per size and part previewed: seconds, peak RSS, exit status. The whole site is
    previewed only up to `whole_up_to` slots (a 2,048-node whole site takes minutes)."""
    base = yaml.safe_load((project / f"Pulumi.{stack}.yaml").read_text())
    rows = []
    with tempfile.TemporaryDirectory(prefix="offline-bench-split-") as tmp:
        for n in sizes:
            dst = Path(tmp) / f"n{n}"
            doc = scale_gpu_nodes(base, n)
            sus = len({r["su"] for r in doc["config"][CLUSTER_KEY]["gpuNodes"]["ranges"]})
            stacks = split_site(doc)
            _bench_project(project, dst, stacks["whole"])
            for name, doc in stacks.items():
                (dst / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
            order = [CORE, "su1", "platform", "workloads"] + (["whole"] if n <= whole_up_to
                                                               else [])
            for name in order:
                run: Sample = _preview(dst, name)
                rows.append({"slots": n, "stack": name, "seconds": run.seconds,
                             "rss": run.max_rss_mib, "returncode": run.returncode,
                             "sus": sus})
                print(f"  {n} slots, {name}: {run.seconds:.1f}s (exit {run.returncode})",
                      file=sys.stderr)
                if run.returncode not in (0, 3):  # 3: mandatory violations, a full run too
                    raise SystemExit(f"{n} slots, {name}: preview failed (exit "
                                     f"{run.returncode}):\n{run.output[-3000:]}")
    return rows


def split_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| slots | SUs | part | preview s | peak RSS MiB | preview / whole site's |",
             "|---:|---:|---|---:|---:|---:|"]
    whole = {r["slots"]: r["seconds"] for r in rows if r["stack"] == "whole"}
    for r in rows:
        ratio = f"{r['seconds'] / whole[r['slots']]:.2f}" if r["slots"] in whole else "-"
        lines.append(f"| {r['slots']} | {r['sus']} | {r['stack']} | {r['seconds']:.2f} "
                     f"| {r['rss']:.0f} | {ratio} |")
    su = {r["slots"]: r["seconds"] for r in rows if r["stack"] == "su1"}
    if len(su) > 1:
        small, big = min(su), max(su)
        lines += ["", f"SU part: time({big})/time({small}) = {su[big] / su[small]:.2f} for "
                  f"{big / small:.0f}x the site (1.00 = the part's cost does not grow with the "
                  "site)"]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in str(args.split_sizes).split(",") if s.strip()]
    if sizes:
        print(split_table(bench_split(Path(args.project_dir).resolve(), args.stack, sizes,
                                      args.whole_up_to)))
    return 0
