"""The real `pulumi up` of the simulated data centre (`make bench`): the first build of
tests/test_e2e_up.py (prod's cluster on loopback: every host over SSH, every BMC over HTTPS,
the API server at the stack's endpoint), run once, beside the offline preview of the same stack
in the same copy of the project.

It runs the e2e's first test through pytest, so the harness is the one the tests prove, and
reads what that run leaves: each CLI run's wall seconds (timings.jsonl) and the first `up`'s
engine events (`--event-log`, whole seconds). From those it says where the `up` spends its
time: each kind of step, how many, the sum of their durations (steps overlap: the engine runs
independent ones at once) and the longest. Reported, never asserted; it needs what the e2e
needs (root, `make engine`, `make k8s-tools`) and says which is missing instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .bench_engine import find_engine

TEST = "tests/test_e2e_up.py::test_the_first_preview_is_the_offline_plan"
STACK = "e2e"


def missing(project: Path) -> str | None:
    """Why the data centre cannot run here, or None."""
    if os.geteuid() != 0:
        return "the simulated hosts listen on port 22 of their addresses: run as root"
    bin_dir, why = find_engine(project)
    return why if bin_dir is None else None


def step_durations(events: Iterable[dict[str, Any]]) -> list[tuple[str, str, int]]:
    """(type, name, seconds) of every step the engine took on a custom resource, from its
    pre-event to its outputs (or failure) event. Components are left out: their span is
    their children's."""
    started: dict[str, int] = {}
    out = []
    for e in events:
        if "resourcePreEvent" in e:
            meta = e["resourcePreEvent"]["metadata"]
            if meta["op"] != "same" and not _component(meta["type"]):
                started[meta["urn"]] = e["timestamp"]
        for key in ("resOutputsEvent", "resOpFailedEvent"):
            if key in e:
                urn = e[key]["metadata"]["urn"]
                if urn in started:
                    out.append((e[key]["metadata"]["type"], urn.rsplit("::", 1)[1],
                                e["timestamp"] - started.pop(urn)))
    return out


def _component(kind: str) -> bool:
    return kind.startswith("gpucluster:") or kind == "pulumi:pulumi:Stack"


def by_type(steps: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
    """Per resource type: steps, summed and longest seconds, slowest first."""
    groups: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for kind, name, seconds in steps:
        groups[kind].append((name, seconds))
    rows = [{"type": kind, "steps": len(items), "seconds": sum(s for _, s in items),
             "longest": max(items, key=lambda i: i[1])} for kind, items in groups.items()]
    return sorted(rows, key=lambda r: (-r["seconds"], r["type"]))


def run(project: Path, work: Path) -> dict[str, Any]:
    """The e2e's first build, then the offline preview of its stack; what both measured."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-rs", "-m", "e2e", TEST, f"--basetemp={work}"],
                          cwd=project, env=env, capture_output=True, text=True)
    total = time.monotonic() - started
    skipped = [line for line in test.stdout.splitlines() if line.startswith("SKIPPED")]
    if test.returncode == 0 and skipped:  # what the e2e needs and this machine lacks
        return {"skipped": skipped[0].split(": ", 1)[-1]}
    if test.returncode != 0 or " passed" not in test.stdout:
        raise SystemExit("datacentre bench: the e2e's first build did not pass:\n"
                         + (test.stdout + test.stderr)[-4000:])
    dc = next(work.glob("datacentre*"))
    timings = [json.loads(x) for x in (dc / "timings.jsonl").read_text().splitlines()]
    events = [json.loads(x) for x in (dc / "events-up.jsonl").read_text().splitlines()]
    started = time.monotonic()
    offline = subprocess.run([sys.executable, "-m", "offline", "preview", "--stack", STACK,
                              "--quiet"], cwd=dc / "gpu-cluster", env=env,
                             capture_output=True, text=True)
    if offline.returncode != 0:
        raise SystemExit("datacentre bench: the offline preview of the e2e stack failed:\n"
                         + (offline.stdout + offline.stderr)[-3000:])
    return {"cli": timings, "steps": step_durations(events), "total": total,
            "offline": time.monotonic() - started}


def _seconds(cli: list[dict[str, Any]], *words: str) -> float:
    """The wall seconds of the first CLI run holding every word among its arguments."""
    return next(r["seconds"] for r in cli if set(words) <= set(r["args"]))


def report(result: dict[str, Any]) -> str:
    cli, steps = result["cli"], result["steps"]
    up = next(r for r in cli if r["args"][:2] == ["pulumi", "up"])["seconds"]
    preview = _seconds(cli, "preview", "--policy-pack")
    again = _seconds(cli, "preview", "--expect-no-changes")
    lines = [
        "| run | seconds | / offline preview |", "|---|---:|---:|",
        f"| offline preview of the e2e stack | {result['offline']:.1f} | 1.0 |",
        f"| engine: first preview, with the pack | {preview:.1f} "
        f"| {preview / result['offline']:.1f} |",
        f"| engine: first `pulumi up` ({len(steps)} steps) | {up:.1f} "
        f"| {up / result['offline']:.1f} |",
        f"| engine: preview after the up | {again:.1f} | {again / result['offline']:.1f} |",
        f"| the whole first build (data centre, API server, all of the above) "
        f"| {result['total']:.1f} | |",
        "", "Where the first `pulumi up` spends its time (engine events, whole seconds; "
        "independent steps run at once, so sums overlap):", "",
        "| resource type | steps | sum of step s | longest step |", "|---|---:|---:|---|"]
    rows = by_type(steps)
    for r in rows:
        name, seconds = r["longest"]
        if r["seconds"]:
            lines.append(f"| {r['type']} | {r['steps']} | {r['seconds']} "
                         f"| {name} ({seconds} s) |")
    rest = [r for r in rows if not r["seconds"]]
    if rest:
        lines.append(f"| {len(rest)} more types, every step under 1 s "
                     f"| {sum(r['steps'] for r in rest)} | 0 | |")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    """The data-centre section of `python -m offline bench`: 0 when skipped for want of what
    it needs (unless `--datacentre` asked for it), 2 when asked for and missing."""
    if args.datacentre is False:
        return 0
    project = Path(args.project_dir).resolve()
    why = missing(project)
    if why is not None:
        print(f"datacentre: skipped: {why}", file=sys.stderr if args.datacentre else sys.stdout)
        return 2 if args.datacentre else 0
    with tempfile.TemporaryDirectory(prefix="offline-bench-datacentre-") as tmp:
        result = run(project, Path(tmp) / "bt")
    if "skipped" in result:
        print(f"datacentre: skipped: {result['skipped']}",
              file=sys.stderr if args.datacentre else sys.stdout)
        return 2 if args.datacentre else 0
    print("The real `pulumi up` of the simulated data centre (tests/test_e2e_up.py, one run):")
    print(report(result))
    return 0
