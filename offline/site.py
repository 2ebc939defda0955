"""`python -m offline site --stack <core> [--apply]`: preview every part of a split site as one
change, and with `--apply` run `pulumi up` on each part in that order.

The parts are previewed in the order their data flows (the core, the nodes parts in SU order,
the platform, the workloads: each reads what the ones before it export,
`build/<stack>/outputs.json`; the nodes parts and the platform, which read only the core's, run
side by side on the machine's cores), each with the site's policy config, and one runbook says
in which order to apply them, by each part's direction: adds and config changes from the core
outwards (a node is known to the subnet managers before it joins; the control plane is
upgraded before the kubelets), removals the other way round (jobs shrink, then nodes drain and
leave, then the core forgets them). One change may do both: a nodes part whose nodes leave
goes before the core, the others after it (`apply_order`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import yaml

from . import site_inputs
from .conventions import names, subject
from .diff import Diff, diff_json
from .impact import impact
from .preview import EXIT_CONFIG, EXIT_ERROR, EXIT_MANDATORY, EXIT_OK, EXIT_REFUSED

CLUSTER_KEY = "gpu-cluster:cluster"
SITE_KEY = "gpu-cluster:site"
RUNNER_ROOT = Path(__file__).resolve().parent.parent  # makes `-m offline` importable
PART_ORDER = ("core", "nodes", "platform", "workloads")
MAX_WORKERS = 8  # part previews at once
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # a 2,048-node core's file: libyaml
T = TypeVar("T")
# A node leaving: its host and its join are deleted, or it is decommissioned first.
LEAVING = ("gpucluster:hardware:BareMetalNode",)
BUILT = (EXIT_OK, EXIT_MANDATORY, EXIT_REFUSED)  # the preview wrote its build
VERDICTS = {EXIT_OK: "ok", EXIT_MANDATORY: "mandatory policy violations",
            EXIT_REFUSED: "refused"}


def parts(project: Path, core: str) -> list[tuple[str, str]] | str:
    """(stack, part) in data order, or why `core` is not a split site's core."""
    path = project / f"Pulumi.{core}.yaml"
    if not path.is_file():
        return f"{path.name} not found (STACK={core})"
    doc = yaml.load(path.read_text(), Loader=_LOADER) or {}  # a safe loader
    cluster = (doc.get("config") or {}).get(CLUSTER_KEY)
    split = cluster.get("split") if isinstance(cluster, dict) else None
    if not isinstance(split, dict) or split.get("part") != "core":
        return (f"{core} is not the core part of a split site (its {CLUSTER_KEY}.split.part is "
                f"{split.get('part') if isinstance(split, dict) else None}): name the core "
                "stack, whose split.parts lists the others")
    listed = {s: p if isinstance(p, dict) else {} for s, p in (split.get("parts") or {}).items()}
    return [(core, "core"), *sorted(((s, str(p.get("part"))) for s, p in listed.items()),
                                    key=lambda sp: _data_order(sp, listed[sp[0]]))]


def _data_order(stack_part: tuple[str, str], part: dict[str, Any]) -> tuple[int, int, str]:
    """Parts in the order their data flows; nodes parts by their first SU (su2 before su10)."""
    stack, kind = stack_part
    sus = [su for su in part.get("sus") or () if isinstance(su, int)]
    return (PART_ORDER.index(kind) if kind in PART_ORDER else 9, min(sus, default=0), stack)


def apply_order(found: list[tuple[str, str]], removing: set[str]) -> tuple[list[str], str]:
    """The order to apply the parts in, and why. Without a removal: in data order. With one:
    the workloads and platform shrink first, the nodes parts whose nodes leave drain them
    (last SU first), the core forgets them, then the other nodes parts join theirs (first SU
    first): a part adding nodes always comes after the core, one removing them before it."""
    if not removing:
        return [s for s, _ in found], ("the core first, then the nodes parts, the platform and "
                                       "the workloads")
    by_kind = {kind: [s for s, k in found if k == kind] for kind in PART_ORDER}
    leaving = [s for s in reversed(by_kind["nodes"]) if s in removing]
    staying = [s for s in by_kind["nodes"] if s not in removing]
    order = [*reversed(by_kind["workloads"]), *reversed(by_kind["platform"]), *leaving,
             *by_kind["core"], *staying]
    way = ("removal: the workloads shrink first, the nodes drain and leave, then the core "
           "forgets them")
    if staying and len(leaving) < len(by_kind["nodes"]):
        way += (", then the other nodes parts (a node they add joins only once the core "
                "knows it)")
    return order, way


def _removes_nodes(diff: list[dict[str, Any]]) -> bool:
    return any(c.get("action") == "delete" and c.get("type") in LEAVING for c in diff) or \
        any(subject(str(c.get("name", "")), names().DECOMMISSION) and c.get("action") == "create"
            for c in diff)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else []


def core_of(project: Path, stack: str) -> str | None:
    """The core stack a part's file names (`gpu-cluster:site`), if it names one."""
    path = project / f"Pulumi.{stack}.yaml"
    try:
        doc = yaml.load(path.read_text(), Loader=_LOADER) if path.is_file() else None
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


class _Previewed(NamedTuple):
    status: int
    diff: list[dict[str, Any]]
    runbook: list[str]
    report: list[str]  # what to print for it


def _stages(found: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The parts in the order their data flows, as groups that may run side by side: the
    core; then the nodes parts and the platform (each reads only the core's outputs); then
    the workloads (which read the platform's too)."""
    first = [sp for sp in found if sp[1] == "core"]
    middle = [sp for sp in found if sp[1] in ("nodes", "platform")]
    return [group for group in (first, middle, [sp for sp in found if sp not in first + middle])
            if group]


def side_by_side(stage: list[tuple[str, str]], run: Callable[[tuple[str, str]], T]) -> list[T]:
    """`run` on each part of one stage at once (each starts its own process), as many as the
    machine has cores, at most MAX_WORKERS (each holds the whole site's config); the results
    in the stage's order."""
    workers = max(1, min(len(stage), os.cpu_count() or 1, MAX_WORKERS))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run, stage))


def _preview_part(project: Path, stack: str, part: str, timeout: float, quiet: bool,
                  key: str) -> _Previewed:
    """One part's offline preview in its own process (the Pulumi runtime is process-wide),
    with this runner; its verdict recorded with its key."""
    cmd = [sys.executable, "-m", "offline", "preview", "--stack", stack, "--quiet",
           "--project-dir", str(project), "--timeout", str(timeout)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(RUNNER_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    output = proc.stdout + proc.stderr
    if proc.returncode in BUILT:
        site_inputs.record(project, stack, key, proc.returncode, output, rendered=False)
    return _previewed(project, stack, part, proc.returncode, output, quiet)


def _previewed(project: Path, stack: str, part: str, status: int, output: str, quiet: bool,
               note: str = "") -> _Previewed:
    """A part's verdict, with the diff and runbook of its build."""
    build = project / "build" / stack
    ran = status in BUILT
    diff = _read_json(build / "diff.json") if ran else []
    report = [f"== {stack} ({part}): {len(diff)} change(s); {VERDICTS.get(status, 'failed')}"
              f"{note}"]
    report += [f"   {line}" for line in output.splitlines() if not quiet or status]
    runbook = (build / "runbook.txt").read_text().splitlines() \
        if ran and (build / "runbook.txt").is_file() else []
    return _Previewed(status, diff, [ln for ln in runbook if ln.strip()], report)


def _part(project: Path, stack: str, part: str, key: str, timeout: float, quiet: bool,
          fresh: bool) -> _Previewed:
    """The part's last verdict when nothing it reads changed since (`site_inputs`), else a
    new preview."""
    last = None if fresh else site_inputs.recorded(project, stack, key)
    if last is None:
        return _preview_part(project, stack, part, timeout, quiet, key)
    if last["rendered"]:
        _unchanged_build(project, stack)
        site_inputs.record(project, stack, key, int(last["status"]), "", rendered=False)
    return _previewed(project, stack, part, int(last["status"]), str(last["output"]), quiet,
                      note=" (nothing it reads changed since its last preview: not rerun)")


def _unchanged_build(project: Path, stack: str) -> None:
    """A part reused from its rendering: its build's diff, runbook and impact say what a
    preview says now (no changes), not what the rendering's own preview changed."""
    build = project / "build" / stack
    none = Diff(changes=[])
    (build / "diff.json").write_text(diff_json(none))
    (build / "runbook.txt").write_text("\n")
    (build / "impact.txt").write_text("\n".join(impact(none)) + "\n")


def part_key(project: Path, stack: str) -> str | None:
    """The key of a split site's part (`site_inputs`), None for a stack of no split site."""
    core = core_of(project, stack) or stack
    found = parts(project, core)
    if isinstance(found, str):
        return None
    earlier: list[str] = []
    for stage in _stages(found):
        for s, kind in stage:
            if s == stack:
                return site_inputs.Site(project, core).key(s, kind, earlier)
        earlier += [s for s, _ in stage]
    return None


def preview(project: Path, core: str, timeout: float, quiet: bool = False,
            apply: bool = False, fresh: bool = False) -> int:
    """Every part previewed, one runbook; with `apply`, then `pulumi up` on each in order.
    A part nothing it reads changed for keeps its last verdict, unless `fresh`."""
    found = parts(project, core)
    if isinstance(found, str):
        print(f"site: {found}", file=sys.stderr)
        return EXIT_CONFIG
    statuses: dict[str, int] = {}
    removing: set[str] = set()
    lines: list[str] = []
    inputs = site_inputs.Site(project, core)
    earlier: list[str] = []
    for stage in _stages(found):
        keys = {s: inputs.key(s, kind, earlier) for s, kind in stage}
        earlier += [s for s, _ in stage]

        def run(sp: tuple[str, str], keys: dict[str, str] = keys) -> _Previewed:
            return _part(project, sp[0], sp[1], keys[sp[0]], timeout, quiet, fresh)

        previewed = side_by_side(stage, run)
        for (stack, part), done in zip(stage, previewed, strict=True):
            print("\n".join(done.report), flush=True)
            statuses[stack] = done.status
            if _removes_nodes(done.diff):
                removing.add(stack)
            lines.append(f"{stack} ({part}):")
            lines += [f"  {ln}" for ln in done.runbook] or ["  no hardware steps"]
    order, way = apply_order(found, removing)
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
