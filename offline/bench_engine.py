"""The real engine beside the offline preview (`make bench`): `pulumi preview --json` of prod
and of generated stacks (`--engine-sizes`, 128 GPU nodes by default), each interleaved with
`python -m offline preview --quiet --timings` of the same config in the same copy of the project.

The engine is the one `make engine` builds (found as tests/support/engine.py finds it: `pulumi`
on PATH, else the newest build in the engine cache) with its language host and both providers;
without it the section prints why it was skipped. Each stack is a scratch copy of the project
(`bench._bench_project`: symlinks and a stack file of its own) on a `file://` backend under a
temporary directory, with placeholder secrets set by `tools/set-stack-secrets.sh` as
tests/test_engine_preview.py sets them. The engine runs twice per repeat: as the CLI runs by
default, and with `PULUMI_SKIP_CHECKPOINTS=true`. Since 3.274 a preview on a file backend
installs a snapshot manager whose persister discards every write, yet the manager still
serialises and checks the whole snapshot after every step (`backend/diy/backend.go`,
`backend/snapshot.go`: `saveSnapshot`); with the variable it does so once, at the end. The
plan is the same either way.

Every run is a fresh process tree. Wall seconds are the CLI's, from start to exit. While it
runs, the tree (the CLI, the language host, the Python program, the providers) is sampled every
`SAMPLE_S` from /proc: each process's CPU seconds, as last seen, and the sum of their resident
memory. A process that lives shorter than a sample is missed; the wait4 CPU of the CLI (itself
and every descendant it waited for) says how much the samples cover. Times are the fastest of
`--repeat` runs, peak memory the largest; reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .bench import (
    BENCH_STACK,
    Sample,
    _bench_project,
    _gpu_nodes,
    _preview,
    _reported,
    scale_gpu_nodes,
)
from .engine import PLACEHOLDER_SECRETS, PLUGINS, engine_bin, engine_cache, local_env
from .proc_tree import TreeSampler

SAMPLE_S = 0.2
# The engine's two runs per repeat: the CLI as it is, and without per-step checkpoints.
VARIANTS = {"engine": {}, "no_checkpoints": {"PULUMI_SKIP_CHECKPOINTS": "true"}}
# Process (argv[0]'s name; the program is the Python that runs the language host's exec
# script) -> what it is, in the order the breakdown lists them.
ROLES = {"pulumi-language-python-exec": "program", "pulumi": "engine",
         "pulumi-language-python": "language host",
         "pulumi-resource-command": "command provider",
         "pulumi-resource-kubernetes": "kubernetes provider"}
# The language host also runs `python -m pip --version` and `pip list` before the program
# (its dependency check): "pip".
ROLE_ORDER = ("program", "engine", "language host", "pip", "command provider",
              "kubernetes provider", "other")


# ---------------------------------------------------------------- finding the engine


def find_engine(project: Path) -> tuple[Path | None, str]:
    """The directory holding `pulumi` and the plugins, or None and why not."""
    where = engine_bin()
    if where is None:
        return None, f"no pulumi on PATH or in {engine_cache()} (make engine builds it)"
    missing = [p for p in PLUGINS if not (where / p).exists()]
    if missing:
        return None, f"{where} has no {', '.join(missing)} (make engine builds them)"
    if not (project / ".venv" / "bin" / "python").exists():
        return None, f"{project}/.venv is missing (the language host runs the program in it)"
    return where, ""


# ---------------------------------------------------------------- one run of the CLI


@dataclass
class TreeRun:
    seconds: float
    returncode: int
    cpu_wait4: float  # the CLI and every descendant it waited for: user + system seconds
    peak_rss_mib: float  # the largest sum over the tree of one sample
    cpu: dict[str, float] = field(default_factory=dict)  # role -> CPU seconds (sampled)
    stdout: str = ""
    stderr: str = ""


def _role(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "other"
    names = [Path(a).name for a in argv[:2]]
    if argv[1:3] == ["-m", "pip"]:
        return "pip"
    return next((ROLES[n] for n in reversed(names) if n in ROLES), "other")


def run_tree(cmd: list[str], cwd: Path, env: Mapping[str, str]) -> TreeRun:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=dict(env), stdout=out, stderr=err, text=True)
        sampler = TreeSampler(proc.pid, SAMPLE_S, _role)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        sampler.done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return TreeRun(seconds, proc.returncode, usage.ru_utime + usage.ru_stime,
                       sampler.peak_rss / 2**20, sampler.by_role(), out.read(), err.read())


# ---------------------------------------------------------------- the stacks


def _stacks(project: Path, sizes: list[int]) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(label, stack name, generated stack document or None for the stack's own file)."""
    out: list[tuple[str, str, dict[str, Any] | None]] = [("prod", "prod", None)]
    base = yaml.safe_load((project / "Pulumi.prod.yaml").read_text())
    for n in sizes:
        doc = scale_gpu_nodes(base, n)
        out.append((f"{_gpu_nodes(doc)} nodes ({n} slots)", BENCH_STACK, doc))
    return out


def _setup(project: Path, root: Path, stack: str, doc: dict[str, Any] | None
           ) -> tuple[Path, dict[str, str]]:
    """A scratch copy of the project under `root` with `stack` created on a file backend and
    its secrets set: the project directory and the CLI's environment."""
    dst = root / "project"
    _bench_project(project, dst, doc or {})
    if doc is None:
        # The stack's own file, copied (never linked): the CLI writes its salt and secrets
        # there. The generated stack file _bench_project wrote is not needed.
        (dst / f"Pulumi.{BENCH_STACK}.yaml").unlink()
        shutil.copyfile(project / f"Pulumi.{stack}.yaml", dst / f"Pulumi.{stack}.yaml")
    (dst / ".venv").symlink_to((project / ".venv").resolve())
    env = local_env(root, "bench") | PLACEHOLDER_SECRETS
    for step in (["pulumi", "stack", "select", "--create", stack],
                 ["bash", "tools/set-stack-secrets.sh", stack]):
        done = subprocess.run(step, cwd=dst, env=env, capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"engine bench: {' '.join(step)} failed:\n{done.stderr[-3000:]}")
    return dst, env


def _engine_preview(dst: Path, stack: str, env: Mapping[str, str], variant: str,
                    profile: Path | None = None) -> TreeRun:
    extra = ["--profiling", str(profile)] if profile else []
    run = run_tree(["pulumi", "preview", "--stack", stack, "--json", *extra], dst,
                   {**env, **VARIANTS[variant]})
    if run.returncode != 0:
        raise SystemExit(f"engine bench: pulumi preview --stack {stack} ({variant}) failed "
                         f"(exit {run.returncode}):\n{run.stderr[-3000:]}{run.stdout[-3000:]}")
    return run


def _offline(dst: Path, stack: str) -> Sample:
    run = _preview(dst, stack)
    if run.returncode not in (0, 3):  # 3 = mandatory violations: a full run too
        raise SystemExit(f"engine bench: offline preview of {stack} failed (exit "
                         f"{run.returncode}):\n{run.output[-3000:]}")
    return run


def bench_engine(project: Path, sizes: list[int], repeat: int,
                 profile_dir: Path | None = None) -> list[dict[str, Any]]:
    """One row per stack: offline preview and program seconds, the engine's seconds, peak
    memory and CPU by process for each variant, the resource counts of both."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="offline-bench-engine-") as tmp:
        for i, (label, stack, doc) in enumerate(_stacks(project, sizes)):
            dst, env = _setup(project, Path(tmp) / f"s{i}", stack, doc)
            runs = []
            for _ in range(repeat):  # interleaved, so a slow spell hits each alike
                offline = _offline(dst, stack)
                engine = {v: _engine_preview(dst, stack, env, v) for v in VARIANTS}
                runs.append(_engine_row(label, dst, stack, offline, engine))
            row = best_engine(runs)
            rows.append(row)
            print(f"  engine, {label}: offline {row['offline']:.1f}s, engine "
                  f"{row['engine']['seconds']:.1f}s, without checkpoints "
                  f"{row['no_checkpoints']['seconds']:.1f}s", file=sys.stderr)
            if profile_dir:
                for v in VARIANTS:
                    _engine_preview(dst, stack, env, v, profile_dir / f"{stack}-{v}")
    return rows


def _engine_row(label: str, dst: Path, stack: str, offline: Sample,
                engine: Mapping[str, TreeRun]) -> dict[str, Any]:
    plan = json.loads((dst / "build" / stack / "plan.json").read_text())
    # Reads (the stack's reference to its own outputs) register nothing: not counted.
    steps = {v: len([s for s in json.loads(r.stdout)["steps"] if s["op"] != "read"])
             for v, r in engine.items()}
    return {"stack": label, "resources": int(plan["summary"]["total"]), "steps": steps,
            "offline": offline.seconds, "program": _reported(offline, "timings ")["program"],
            **{v: {"seconds": r.seconds, "rss": r.peak_rss_mib, "cpu": r.cpu,
                   "cpu_wait4": r.cpu_wait4} for v, r in engine.items()}}


def best_engine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each time the fastest of the runs (noise on a shared machine only adds time), with the
    CPU breakdown of that fastest run; peak memory the largest of all."""
    out = dict(runs[0])
    for key in ("offline", "program"):
        out[key] = min(r[key] for r in runs)
    for v in VARIANTS:
        fastest = min((r[v] for r in runs), key=lambda e: e["seconds"])
        out[v] = fastest | {"rss": max(r[v]["rss"] for r in runs)}
    return out


# ---------------------------------------------------------------- report


def engine_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| stack | resources | offline preview s | offline program s | engine s "
        "| engine / offline | engine / program | engine, no checkpoints s "
        "| no checkpoints / offline | engine peak RSS MiB | no checkpoints peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        e, n = r["engine"], r["no_checkpoints"]
        lines.append(
            f"| {r['stack']} | {r['resources']} | {r['offline']:.2f} | {r['program']:.2f} "
            f"| {e['seconds']:.2f} | {e['seconds'] / r['offline']:.1f} "
            f"| {e['seconds'] / r['program']:.1f} | {n['seconds']:.2f} "
            f"| {n['seconds'] / r['offline']:.1f} | {e['rss']:.0f} | {n['rss']:.0f} |")
    lines += ["", "CPU seconds by process in the fastest engine run (sampled from /proc every "
              f"{SAMPLE_S} s; wait4: the CLI and the descendants it waited for):", "",
              "| stack | run | wall s | " + " | ".join(ROLE_ORDER) + " | sampled | wait4 |",
              "|---|---|---:|" + "---:|" * (len(ROLE_ORDER) + 2)]
    for r in rows:
        for v, name in (("engine", "default"), ("no_checkpoints", "no checkpoints")):
            e = r[v]
            cells = " | ".join(f"{e['cpu'].get(role, 0.0):.1f}" for role in ROLE_ORDER)
            lines.append(f"| {r['stack']} | {name} | {e['seconds']:.1f} | {cells} "
                         f"| {sum(e['cpu'].values()):.1f} | {e['cpu_wait4']:.1f} |")
    odd = [f"{r['stack']}: the engine planned {r['steps']} steps, the offline preview "
           f"{r['resources']} resources (+1: the engine's Stack)"
           for r in rows if any(s != r["resources"] + 1 for s in r["steps"].values())]
    return "\n".join(lines + ([""] + odd if odd else []))


def main(args: argparse.Namespace) -> int:
    """The engine section of `python -m offline bench`; 0 when skipped for want of an engine
    (unless `--engine` asked for it), 2 when asked for and missing."""
    project = Path(args.project_dir).resolve()
    if args.engine is False:
        return 0
    bin_dir, why = find_engine(project)
    if bin_dir is None:
        print(f"engine: skipped: {why}", file=sys.stderr if args.engine else sys.stdout)
        return 2 if args.engine else 0
    sizes = [int(s) for s in str(args.engine_sizes).split(",") if s.strip()]
    repeat = max(args.engine_repeat, 1)
    profile = Path(args.engine_profile).resolve() if args.engine_profile else None
    if profile:
        profile.mkdir(parents=True, exist_ok=True)
    print(f"The real engine ({bin_dir}), {repeat} run(s) each, fastest kept:")
    print(engine_table(bench_engine(project, sizes, repeat, profile)))
    if profile:
        print(f"\nCPU profiles of the CLI: {profile}/<stack>-<run>.<pid>.cpu "
              f"(go tool pprof -top {bin_dir}/pulumi <file>)")
    return 0
