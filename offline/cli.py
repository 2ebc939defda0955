"""`python -m offline preview | site | check-rendered | bench` — see README for the workflow."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from . import site, site_inputs
from .diff import Diff, diff_json, format_diff
from .impact import impact, refusals
from .model import layer_order
from .policy import LEVEL_ORDER, SUPPRESSED, Violation
from .preview import (
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_MANDATORY,
    EXIT_MEANING,
    EXIT_OK,
    EXIT_REFUSED,
    ConfigFailure,
    Rendering,
    RunFailure,
    Staging,
    diff_against_rendered,
    render,
    sync_tree,
)
from .runbook import runbook
from .stackconfig import StackFileError, load_stack_config


def _print_summary(r: Rendering, verbose: bool) -> None:
    s = r.plan.summary()
    print(f"Stack {r.config.project}/{r.config.stack}: {s['total']} resources "
          f"({s['custom']} custom, {s['total'] - s['custom']} components)")
    if not verbose:
        return
    print("By layer:")
    for layer, n in sorted(s["byLayer"].items(), key=lambda kv: layer_order(kv[0])):
        print(f"  {layer:<10} {n:>6}")
    print("By type:")
    width = max((len(t) for t in s["byType"]), default=0)
    for type_, n in s["byType"].items():
        print(f"  {type_:<{width}} {n:>6}")


def _print_policies(r: Rendering, quiet: bool, verbose: bool = False) -> None:
    if not r.levels:
        return
    grouped: dict[str, list] = {lvl: [] for lvl in (*LEVEL_ORDER, SUPPRESSED)}
    for v in r.violations:
        grouped.setdefault(v.level, []).append(v)
    disabled = sorted(n for n, lvl in r.levels.items() if lvl == "disabled")
    counts = ", ".join(f"{len(grouped[k])} {k}" for k in ("mandatory", "advisory"))
    print(f"Policy report ({len(r.levels)} policies, {counts} violations, "
          f"{len(grouped[SUPPRESSED])} suppressed):")
    for level in ("mandatory", "advisory", SUPPRESSED):
        items = grouped.get(level, [])
        if not items or (quiet and level != "mandatory"):
            continue
        print(f"  {level}:")
        if level == SUPPRESSED and not verbose:
            _print_suppressed(items)
            continue
        # One entry per rule and resource: its findings, then the reason (when suppressed).
        entries: dict[tuple[str, str, str], list[str]] = {}
        for v in items:
            entries.setdefault((v.policy, v.resource or "(stack)", v.reason), []).append(
                v.message)
        for (policy, resource, reason), messages in entries.items():
            print(f"    [{policy}] {resource}")
            for line in (ln for m in messages for ln in m.splitlines()):
                print(f"        {line}")
            if reason:
                print(f"        reason: {reason}")
    if not quiet:
        print(f"  disabled: {', '.join(disabled) if disabled else 'none'}")


def _print_suppressed(items: list[Violation]) -> None:
    """A suppressed rule once, with how many findings on which resources and why: a reviewer
    acts on none of them (`--verbose` lists each)."""
    rules: dict[tuple[str, str], list[Violation]] = {}
    for v in items:
        rules.setdefault((v.policy, v.reason), []).append(v)
    for (policy, reason), found in rules.items():
        names = sorted({(v.resource or "(stack)").rsplit("::", 1)[-1] for v in found})
        print(f"    [{policy}] {len(found)} finding{'s' * (len(found) != 1)} on "
              f"{', '.join(names)}; reason: {reason}")


def _render(project: Path, args: argparse.Namespace, policy_config: Path | None = None,
            with_policies: bool = True,
            write_artifacts: Callable[[Mapping[str, str]], None] | None = None
            ) -> Rendering | int:
    """The rendering, or the exit status after printing why there is none."""
    try:
        pack = getattr(args, "policy_pack", None)
        return render(project, args.stack, policy_config, with_policies=with_policies,
                      timeout=args.timeout, policy_pack=Path(pack) if pack else None,
                      baseline=getattr(args, "baseline", None),
                      write_artifacts=write_artifacts)
    except ConfigFailure as err:
        print(str(err), file=sys.stderr)
        return EXIT_CONFIG
    except RunFailure as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR


def _policy_config(project: Path, args: argparse.Namespace, core: str | None) -> Path | None:
    """The policy config to judge with, saying where it comes from when not the stack's own;
    `core`: the core stack of the split site this stack is a part of."""
    if args.policy_config:
        return Path(args.policy_config)
    own = project / "policies" / f"policy-config.{args.stack}.json"
    theirs = project / "policies" / f"policy-config.{args.baseline}.json"
    site_config = site.policy_config(project, core) if core else None
    if own.is_file() or args.policy_pack:
        return None  # the stack's own, or the given pack's
    if site_config:
        # A part of a split site is judged as its site is.
        print(f"policies: {site_config.relative_to(project)} (the site's; {args.stack} has "
              "none)")
        return site_config
    if args.baseline and theirs.is_file():
        # A scratch copy of a stack is judged as that stack would be.
        print(f"policies: {theirs.relative_to(project)} (the baseline's; {args.stack} has none)")
        return theirs
    print(f"policies: no policies/policy-config.{args.stack}.json, so every rule runs at "
          "the pack's own level (policies/RULES.md); to change a level or suppress a rule "
          f"for {args.stack}, add that file (docs/policies.md)")
    return None


def _baseline_problem(project: Path, args: argparse.Namespace) -> str | None:
    if args.baseline and args.render:
        return ("--baseline compares with another stack's rendering; --render writes this "
                f"stack's own (rendered/{args.stack}/): use one or the other")
    if args.baseline and not (project / "rendered" / args.baseline).is_dir():
        return (f"--baseline {args.baseline}: no rendered/{args.baseline}/ to compare with "
                f"(make render STACK={args.baseline})")
    return None


class _Preview(NamedTuple):
    rendering: Rendering
    diff: Diff
    current: dict[str, str]  # the rendering it was compared with
    new_inputs: dict[str, Any]  # each resource's inputs, by URN
    runbook: list[str]
    impact: list[str]


def _preview_and_write(project: Path, args: argparse.Namespace, out: Path,
                       policy_config: Path | None, core: str | None
                       ) -> _Preview | int:
    """The rendering, its diff, runbook and impact, with build/<stack> written: or the exit
    status, build/<stack> as it was. build/ is written beside the rest: the program's
    artifacts (tens of thousands of files for a large site) by the program's own process once
    it ends, the remainder here while the diff, the runbook and the impact are worked out. It
    replaces the old one once all of it is written."""
    staging = Staging(out)
    r: Rendering | int = EXIT_ERROR
    try:
        r = _render(project, args, policy_config, write_artifacts=staging.write)
        if isinstance(r, int):
            return r
        with ThreadPoolExecutor(max_workers=1) as pool:  # the writes wait on the disk
            written = pool.submit(staging.write, r.generated if r.writing else r.build)
            diff, current = diff_against_rendered(project, args.stack, r, args.baseline)
            new_inputs = {d["urn"]: d.get("inputs") or {} for d in r.rendered_docs.values()}
            # A split site's fabric is its core's: that is the stack its checks name.
            steps = runbook(diff, core or args.stack, new_inputs)
            verdict = impact(diff, new_inputs)
            written.result()
        if r.writing is not None:
            r.writing.join()
        staging.commit()
        return _Preview(r, diff, current, new_inputs, steps, verdict)
    finally:
        if not staging.committed:
            if isinstance(r, Rendering) and r.writing is not None:
                r.writing.close()  # nothing writes into the staging tree once it is dropped
            staging.drop()


def cmd_preview(args: argparse.Namespace) -> int:
    project = Path(args.project_dir).resolve()
    wrong = _baseline_problem(project, args)
    if wrong:
        print(wrong, file=sys.stderr)
        return EXIT_CONFIG
    out = project / "build" / args.stack
    try:
        load_stack_config(project, args.stack)  # before anything else is said about it
    except StackFileError as err:
        print(str(err), file=sys.stderr)
        return _failed(out, EXIT_CONFIG)
    core = site.core_of(project, args.stack)  # a split site's part: its core, else None
    site_inputs.forget(project, args.stack)
    policy_config = _policy_config(project, args, core)
    read = _preview_and_write(project, args, out, policy_config, core)
    if isinstance(read, int):
        return _failed(out, read)
    r, diff, current, new_inputs, steps, verdict = read
    # The same diff as data, for tools (and tests) that act on what a change touches.
    (out / "diff.json").write_text(diff_json(diff))
    (out / "runbook.txt").write_text("\n".join(steps) + "\n")
    (out / "impact.txt").write_text("\n".join(verdict) + "\n")
    try:  # the pack judged beside all of the above
        report = r.policy_report()
        for name, text in report.items():
            (out / name).write_text(text)
    except RunFailure as err:
        print(f"error: {err}", file=sys.stderr)
        return _failed(out, EXIT_ERROR)
    label = f"rendered/{args.baseline or args.stack}"
    if args.render:
        # A settled file keeps what it shows: a value known only to what was deployed.
        n = sync_tree(project / "rendered" / args.stack, r.rendered | diff.settled, current)
        print(f"rendered/{args.stack}: {len(r.rendered)} files, {n} written or removed")
    # A reviewer reads top-down: what the change does to hardware and running work, the
    # policy verdict, then the diff and the runbook; the inventory of the stack last.
    for line in verdict:
        print(line)
    _print_policies(r, args.quiet, args.verbose)
    for w in r.warnings:
        print(f"warning: {w}")
    if not args.quiet:
        lines = format_diff(diff, label)
        if args.render and not diff.empty:
            lines[0] = f"(now rendered) {lines[0]}"
        for line in [*lines, *steps]:
            print(line)
        _print_summary(r, args.verbose)
        # The fabric's bill of materials and the bring-up order: what a first build is.
        for line in r.report if args.verbose or not current else ():
            print(line)
        print(f"Wrote build/{args.stack}/ ({len(r.build) + len(report)} files)")
    if args.timings:
        print("timings " + json.dumps({k: round(v, 3) for k, v in r.timings.items()}))
    refused = _print_refusals(diff, new_inputs)
    mandatory = any(v.level == "mandatory" for v in r.violations)
    _record_rendered(project, args, mandatory)
    if mandatory:
        print("mandatory policy violations: failing", file=sys.stderr)
        return EXIT_MANDATORY
    return EXIT_REFUSED if refused else EXIT_OK


def _print_refusals(diff: Diff, new_inputs: Mapping[str, Mapping[str, Any]]) -> bool:
    refused = refusals(diff, new_inputs)
    for reason in refused:
        print(f"refused: {reason}", file=sys.stderr)
    return bool(refused)


def _record_rendered(project: Path, args: argparse.Namespace, mandatory: bool) -> None:
    """A split site's part just rendered (`--render`) with no mandatory finding has no
    changes while nothing it reads changes: the site preview reuses this verdict
    (`site_inputs`). One with findings is previewed again, to show them."""
    key = site.part_key(project, args.stack) if args.render and not mandatory else None
    if key is not None:
        site_inputs.record(project, args.stack, key, EXIT_OK, "", rendered=True)


def _failed(out: Path, status: int) -> int:
    """A preview that stopped: what a reader opens next (the README's quick start opens the
    impact and the runbook) says so, instead of showing an earlier run's as if it were this
    one's."""
    if out.is_dir():
        note = (f"No {{what}}: the last preview failed (exit {status}: "
                f"{EXIT_MEANING.get(status, 'failed')}); fix what it printed and preview again.\n")
        for name, what in (("impact.txt", "impact"), ("runbook.txt", "runbook")):
            (out / name).write_text(note.format(what=what))
        (out / "diff.json").unlink(missing_ok=True)  # tools read it as this run's changes
    return status


def cmd_check_rendered(args: argparse.Namespace) -> int:
    project = Path(args.project_dir).resolve()
    r = _render(project, args, with_policies=False)
    if isinstance(r, int):
        return r
    diff, _ = diff_against_rendered(project, args.stack, r)
    if diff.empty:
        print(f"rendered/{args.stack} is up to date ({len(r.rendered)} resources)")
        return EXIT_OK
    for line in format_diff(diff, f"rendered/{args.stack}"):
        print(line)
    print(f"rendered/{args.stack} is stale: run `make render` (STACK={args.stack}) and commit it")
    return EXIT_ERROR


def cmd_site(args: argparse.Namespace) -> int:
    return site.preview(Path(args.project_dir).resolve(), args.stack, args.timeout, args.quiet,
                        args.apply, args.fresh)


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import main as bench_main
    from .bench_datacentre import main as datacentre_main
    from .bench_engine import main as engine_main
    from .bench_split import main as split_main

    status = bench_main(args)
    if status == EXIT_OK and not args.synthetic and args.engine is not False:
        print()
        status = engine_main(args)  # the real `pulumi preview` beside the offline one
    if status == EXIT_OK and not args.synthetic:
        print()
        status = split_main(args)  # each part of a split site beside the whole
    if status == EXIT_OK and not args.synthetic and args.datacentre is not False:
        print()
        status = datacentre_main(args)  # the real `pulumi up` of the simulated data centre
    return status


def cmd_floor(args: argparse.Namespace) -> int:
    from .bench import floor_main

    return floor_main(args.count, args.collector_of)


Subcommands = argparse._SubParsersAction  # what `add_subparsers` returns


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", default="prod", help="selects Pulumi.<stack>.yaml (prod)")
    p.add_argument("--project-dir", default=".", help="the Pulumi project (.)")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="fail if the program has not finished after this many seconds")


def _preview_parser(sub: Subcommands) -> None:
    """`preview`: one stack."""
    p = sub.add_parser("preview", help="run the program offline, write build/<stack>/, diff")
    _common(p)
    p.add_argument("--render", action="store_true",
                   help="rewrite rendered/<stack>/ to match (removing files of gone resources)")
    p.add_argument("--baseline", metavar="STACK",
                   help="diff against rendered/<STACK>/ instead of this stack's own: preview a "
                        "change in a scratch stack (a copy of Pulumi.<STACK>.yaml) beside it")
    p.add_argument("--quiet", action="store_true",
                   help="only the impact verdict and mandatory violations")
    p.add_argument("--verbose", action="store_true",
                   help="also resource counts by layer and type, the fabric's bill of materials "
                        "and the bring-up order")
    p.add_argument("--timings", action="store_true",
                   help="print seconds spent in the program, rendering and policies (JSON)")
    p.add_argument("--policy-config", help="JSON policy config (the `pulumi preview "
                   "--policy-pack-config` format); default policies/policy-config.<stack>.json "
                   "when it exists")
    p.add_argument("--policy-pack", metavar="DIR",
                   help="the policy pack (gpu_guardrails and its policy-config.<stack>.json) "
                        "to judge with; default policies/. CI passes the base branch's, so a "
                        "change cannot weaken the rules or add the suppressions that judge it")
    p.set_defaults(func=cmd_preview)


def _site_parser(sub: Subcommands) -> None:
    """`site`: a split site's parts; `check-rendered`."""
    p = sub.add_parser("site", help="preview every part of a split site (--stack: its core) "
                       "as one change, with the order to apply them in")
    _common(p)
    p.add_argument("--quiet", action="store_true",
                   help="each part's verdict (its output only when it fails) and the order")
    p.add_argument("--apply", action="store_true",
                   help="then, when every part previews clean, `pulumi up` each part in that "
                        "order with the Pulumi CLI, stopping at the first that fails")
    p.add_argument("--fresh", action="store_true",
                   help="preview every part again, even one for which nothing it reads "
                        "changed since its last preview (whose verdict is reused otherwise)")
    p.set_defaults(func=cmd_site)

    p = sub.add_parser("check-rendered", help="exit 1 when rendered/<stack>/ is stale")
    _common(p)
    p.set_defaults(func=cmd_check_rendered)


def _bench_parser(sub: Subcommands) -> None:
    """`bench` and its child, `floor`."""
    p = sub.add_parser("bench", help="time previews of 8…2048 GPU node slots against the SDK floor")
    p.add_argument("--project-dir", default=".")
    p.add_argument("--stack", default="prod", help="stack file to scale (prod)")
    p.add_argument("--sizes", default="8,64,128,256,1024,2048",
                   help="GPU node slots of the whole sites previewed")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs per size below 1,024 (larger ones run once); each time "
                        "reported is the fastest (3)")
    p.add_argument("--split-sizes", default="256,2048",
                   help="GPU node slots of the split sites whose parts are previewed ('' none)")
    p.add_argument("--whole-up-to", type=int, default=256, metavar="N",
                   help="preview the whole split site too, up to this size (256)")
    p.add_argument("--site-change-sizes", default="256,2048",
                   help="split-site sizes (of --split-sizes) at which to time the site "
                        "preview of a two-node change, the site first rendered ('' none)")
    p.add_argument("--synthetic", type=int, default=0, metavar="N",
                   help="instead: a synthetic program registering N ConfigMaps vs the floor")
    p.add_argument("--engine", action=argparse.BooleanOptionalAction, default=None,
                   help="also time the real `pulumi preview` (make engine) of prod and of "
                        "--engine-sizes beside the offline preview; default: when the engine "
                        "is built (else one line says why not); --engine fails without it")
    p.add_argument("--datacentre", action=argparse.BooleanOptionalAction, default=None,
                   help="also time the real `pulumi up` of the simulated data centre (the "
                        "e2e's first build); default: when it can run here (root, make engine, "
                        "make k8s-tools; else one line says why not); --datacentre fails "
                        "without it")
    p.add_argument("--engine-sizes", default="128",
                   help="GPU node counts of the generated stacks the engine previews, after "
                        "prod (128; '' prod only)")
    p.add_argument("--engine-repeat", type=int, default=1, metavar="N",
                   help="runs per stack for the engine section (1: the engine takes minutes "
                        "a run at 128 nodes)")
    p.add_argument("--engine-profile", metavar="DIR",
                   help="then one more engine run per stack and variant with the CLI's "
                        "--profiling, writing Go CPU profiles into DIR")
    p.set_defaults(func=cmd_bench)

    # A child process of `bench`: no help, so the usage and command list leave it out.
    p = sub.add_parser("floor")
    p.add_argument("count", type=int)
    p.add_argument("--collector-of", metavar="PROJECT_DIR",
                   help="apply that project's garbage-collector settings, as its program does")
    p.set_defaults(func=cmd_floor)


def _repair_parser(sub: Subcommands) -> None:
    """`repair`: a sick node's steps."""
    p = sub.add_parser("repair", help="what to do for a node the health checks found unfit: "
                       "its conditions, the planned ports and cables, the runbook to follow")
    p.add_argument("node", help="the node's name (its hostname)")
    p.add_argument("--stack", default="prod", help="selects Pulumi.<stack>.yaml (prod)")
    p.add_argument("--project-dir", default=".", help="the Pulumi project (.)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--node-json", metavar="FILE",
                       help="the node as `kubectl get node <node> -o json` printed it")
    where.add_argument("--kubeconfig", metavar="FILE",
                       help="read the node from this cluster (default: kubectl's own config)")
    p.set_defaults(func=cmd_repair)


def cmd_repair(args: argparse.Namespace) -> int:
    from .repair import main as repair_main

    return repair_main(Path(args.project_dir).resolve(), args.stack, args.node, args.node_json,
                       args.kubeconfig)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m offline", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True,
                            metavar="{preview,site,check-rendered,bench,repair}")

    for add in (_preview_parser, _site_parser, _bench_parser, _repair_parser):
        add(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))
