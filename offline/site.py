"""`python -m offline site --stack <core> [--apply]`: preview every part of a split site as one
change, and with `--apply` run `pulumi up` on each part in that order.

The parts are previewed in the order their data flows (the core, the nodes parts, the platform,
the workloads: each reads what the ones before it export, `build/<stack>/outputs.json`), each
with the site's policy config, and one runbook says in which order to apply them: adds and
config changes from the core outwards (a node is known to the subnet managers before it
joins; the control plane is upgraded before the kubelets), removals the other way round (jobs
shrink, then nodes drain and leave, then the core forgets them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from .preview import EXIT_CONFIG, EXIT_ERROR, EXIT_OK

CLUSTER_KEY = "gpu-cluster:cluster"
SITE_KEY = "gpu-cluster:site"
RUNNER_ROOT = Path(__file__).resolve().parent.parent  # makes `-m offline` importable
PART_ORDER = ("core", "nodes", "platform", "workloads")
# A node leaving: its host and its join are deleted, or it is decommissioned first.
LEAVING = ("gpucluster:hardware:BareMetalNode",)


def parts(project: Path, core: str) -> list[tuple[str, str]] | str:
    """(stack, part) in data order, or why `core` is not a split site's core."""
    path = project / f"Pulumi.{core}.yaml"
    if not path.is_file():
        return f"{path.name} not found (STACK={core})"
    cluster = ((yaml.safe_load(path.read_text()) or {}).get("config") or {}).get(CLUSTER_KEY)
    split = cluster.get("split") if isinstance(cluster, dict) else None
    if not isinstance(split, dict) or split.get("part") != "core":
        return (f"{core} is not the core part of a split site (its {CLUSTER_KEY}.split.part is "
                f"{split.get('part') if isinstance(split, dict) else None}): name the core "
                "stack, whose split.parts lists the others")
    listed = [(s, str((p or {}).get("part"))) for s, p in (split.get("parts") or {}).items()]
    listed.sort(key=lambda sp: (PART_ORDER.index(sp[1]) if sp[1] in PART_ORDER else 9, sp[0]))
    return [(core, "core"), *listed]


def _removes_nodes(diff: list[dict[str, Any]]) -> bool:
    return any(c.get("action") == "delete" and c.get("type") in LEAVING for c in diff) or \
        any(str(c.get("name", "")).endswith("-decommission") and c.get("action") == "create"
            for c in diff)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else []


def core_of(project: Path, stack: str) -> str | None:
    """The core stack a part's file names (`gpu-cluster:site`), if it names one."""
    path = project / f"Pulumi.{stack}.yaml"
    try:
        doc = yaml.safe_load(path.read_text()) if path.is_file() else None
    except yaml.YAMLError:
        return None  # the preview itself says what is wrong with the file
    site = ((doc or {}).get("config") or {}).get(SITE_KEY) if isinstance(doc, dict) else None
    return site.rpartition("/")[2] if isinstance(site, str) else None


def policy_config(project: Path, core: str) -> Path | None:
    """The site's policy config (its core's), when it has one."""
    found = project / "policies" / f"policy-config.{core}.json"
    return found if found.is_file() else None


def _pack_args(project: Path, stack: str, core: str) -> str:
    """The policy pack and config `pulumi up` judges a part with: its own, or the site's."""
    for name in (stack, core):
        config = project / "policies" / f"policy-config.{name}.json"
        if config.is_file():
            return f" --policy-pack policies --policy-pack-config {config.relative_to(project)}"
    return " --policy-pack policies"


def _preview_part(project: Path, stack: str, part: str, timeout: float, quiet: bool
                  ) -> tuple[int, list[dict[str, Any]], list[str]]:
    """One part's offline preview in its own process (the Pulumi runtime is process-wide),
    with this runner: (exit status, its diff, its runbook lines)."""
    cmd = [sys.executable, "-m", "offline", "preview", "--stack", stack, "--quiet",
           "--project-dir", str(project), "--timeout", str(timeout)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(RUNNER_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    build = project / "build" / stack
    ran = proc.returncode in (0, 3)  # 3: mandatory violations, the build written
    diff = _read_json(build / "diff.json") if ran else []
    verdict = {0: "ok", 3: "mandatory policy violations"}.get(proc.returncode, "failed")
    print(f"== {stack} ({part}): {len(diff)} change(s); {verdict}")
    for line in (proc.stdout + proc.stderr).splitlines() if not quiet or proc.returncode \
            else ():
        print(f"   {line}")
    runbook = (build / "runbook.txt").read_text().splitlines() \
        if ran and (build / "runbook.txt").is_file() else []
    return proc.returncode, diff, [ln for ln in runbook if ln.strip()]


def preview(project: Path, core: str, timeout: float, quiet: bool = False,
            apply: bool = False) -> int:
    """Every part previewed, one runbook; with `apply`, then `pulumi up` on each in order."""
    found = parts(project, core)
    if isinstance(found, str):
        print(f"site: {found}", file=sys.stderr)
        return EXIT_CONFIG
    statuses: dict[str, int] = {}
    removes = False
    lines: list[str] = []
    for stack, part in found:
        statuses[stack], diff, runbook = _preview_part(project, stack, part, timeout, quiet)
        removes = removes or _removes_nodes(diff)
        lines.append(f"{stack} ({part}):")
        lines += [f"  {ln}" for ln in runbook] or ["  no hardware steps"]
    order = [s for s, _ in (reversed(found) if removes else found)]
    way = ("removal: the workloads shrink first, the nodes drain and leave, then the core "
           "forgets them" if removes else "the core first, then the nodes parts, the "
           "platform and the workloads")
    site_runbook = [f"Site {core}: apply the parts in this order ({way}):"]
    site_runbook += [f"  {i}. pulumi up --stack {s}{_pack_args(project, s, core)}"
                     for i, s in enumerate(order, 1)]
    site_runbook += ["Each part's own steps:"] + [f"  {ln}" for ln in lines]
    out = project / "build" / core / "site-runbook.txt"
    if out.parent.is_dir():
        out.write_text("\n".join(site_runbook) + "\n")
    for line in site_runbook[:len(order) + 1] if quiet else site_runbook:
        print(line)
    status = max(statuses.values(), default=EXIT_OK)
    if not apply:
        return status
    if status != EXIT_OK:
        print(f"site: not applying: the preview of {', '.join(s for s, v in statuses.items() if v)}"
              " failed or broke a mandatory policy", file=sys.stderr)
        return status
    return _apply(project, core, order)


def _apply(project: Path, core: str, order: list[str]) -> int:
    """`pulumi up` on each part in order, stopping at the first that fails: the parts after
    it would build on a part that is not as planned."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        print("site: no pulumi CLI on PATH (`make engine` builds one; its last line is the "
              "bin directory)", file=sys.stderr)
        return EXIT_CONFIG
    for i, stack in enumerate(order):
        cmd = [pulumi, "up", "--yes", "--stack", stack, *_pack_args(project, stack, core).split()]
        print(f"site: pulumi {' '.join(cmd[1:])}", flush=True)
        code = subprocess.run(cmd, cwd=project, check=False).returncode
        if code != 0:
            print(f"site: pulumi up --stack {stack} failed (exit {code}); not applied: "
                  f"{', '.join(order[i + 1:]) or 'none'}", file=sys.stderr)
            return EXIT_ERROR
    return EXIT_OK
