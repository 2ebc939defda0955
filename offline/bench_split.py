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

from .bench import (
    CLUSTER_KEY,
    Sample,
    _bench_project,
    _preview,
    run_child,
    scale_gpu_nodes,
    write_inventory,
)

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


def bench_split(project: Path, stack: str, sizes: list[int], whole_up_to: int,
                change_sizes: tuple[int, ...] = ()
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One row per size and part previewed: seconds, peak RSS, exit status. The whole site is
    previewed only up to `whole_up_to` slots (a 2,048-node whole site takes minutes). At
    `change_sizes`, also the site preview of a two-node change (`bench_site_change`)."""
    base = yaml.safe_load((project / f"Pulumi.{stack}.yaml").read_text())
    rows = []
    changes = []
    with tempfile.TemporaryDirectory(prefix="offline-bench-split-") as tmp:
        for n in sizes:
            dst = Path(tmp) / f"n{n}"
            doc = scale_gpu_nodes(base, n, free_slots=1)  # room for the change's new node
            sus = len({r["su"] for r in doc["config"][CLUSTER_KEY]["gpuNodes"]["ranges"]})
            _bench_project(project, dst, doc)  # names the site's inventory in doc
            stacks = split_site(doc)
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
            if n in change_sizes:
                changes.append(bench_site_change(dst, n))
    return rows, changes


def _site_stages(dst: Path) -> list[list[tuple[str, str]]]:
    from .site import _stages, parts

    found = parts(dst, CORE)
    if isinstance(found, str):
        raise SystemExit(f"split site: {found}")
    return _stages(found)


def bench_site_change(dst: Path, n: int) -> dict[str, Any]:
    """`python -m offline site` for a two-node change of an applied site: SU 1 loses its last
    node and the last SU gains one (a removal and an addition in one change). The site is
    first rendered as applied (every part's `preview --render`, the parts of a stage side by
    side, as the site preview runs them), untimed."""
    from .site import side_by_side

    for stage in _site_stages(dst):
        rendered = side_by_side(stage, lambda sp: run_child(
            [sys.executable, "-m", "offline", "preview", "--stack", sp[0], "--project-dir",
             str(dst), "--quiet", "--render"], dst))
        for (stack, _), run in zip(stage, rendered, strict=True):
            if run.returncode not in (0, 3):
                raise SystemExit(f"{n} slots, rendering {stack} failed (exit "
                                 f"{run.returncode}):\n{run.output[-3000:]}")
    path = dst / f"Pulumi.{CORE}.yaml"
    doc = yaml.safe_load(path.read_text())
    ranges = doc["config"][CLUSTER_KEY]["gpuNodes"]["ranges"]
    ranges[0]["count"] -= 1
    ranges[-1]["count"] += 1
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    write_inventory(dst, doc)  # the new node's host key in, the leaving one's out
    run = run_child([sys.executable, "-m", "offline", "site", "--stack", CORE,
                     "--project-dir", str(dst), "--quiet"], dst)
    order = [ln.split("--stack ")[1].split()[0] for ln in run.output.splitlines()
             if "pulumi up --stack" in ln]
    print(f"  {n} slots, site preview of a two-node change: {run.seconds:.1f}s "
          f"(exit {run.returncode})", file=sys.stderr)
    if run.returncode not in (0, 3):
        raise SystemExit(f"{n} slots, site preview failed (exit {run.returncode}):\n"
                         f"{run.output[-3000:]}")
    last = f"su{ranges[-1]['su']}"
    return {"slots": n, "seconds": run.seconds, "parts": len(order),
            "order_ok": order.index("su1") < order.index(CORE) < order.index(last)}


def site_change_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| slots | parts | site preview of a two-node change s | runbook order |",
             "|---:|---:|---:|---|"]
    lines += [f"| {r['slots']} | {r['parts']} | {r['seconds']:.1f} | "
              f"{'su1, then the core, then the last SU' if r['order_ok'] else 'WRONG'} |"
              for r in rows]
    return "\n".join(lines)


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
    change = tuple(int(s) for s in str(args.site_change_sizes).split(",") if s.strip())
    if sizes:
        rows, changes = bench_split(Path(args.project_dir).resolve(), args.stack, sizes,
                                    args.whole_up_to, change)
        print(split_table(rows))
        if changes:
            print()
            print(site_change_table(changes))
    return 0
