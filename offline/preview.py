"""Orchestration: run the program, render everything in memory, check, then write."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .aside import Aside
from .diff import Diff, diff_trees, read_tree
from .model import Plan, PlanBuilder, Resource
from .normalize import is_secret, whole_floats
from .policy import (
    PackRun,
    PolicyLoadError,
    Violation,
    load_config_file,
    load_pack,
    policy_levels,
)
from .render import (
    ArtifactError,
    Pieces,
    check_artifacts,
    helm_files,
    manifest_files,
    pieces,
    plan_json,
    rendered_files,
    to_json,
)
from .runtime import OUTPUTS_FILE, ProgramFailed, Registration, run_program
from .stackconfig import StackConfig, StackFileError, load_stack_config
from .stream import ChildEnded, Stream

POLICY_REPORT = "policy-report.json"
EXIT_OK, EXIT_ERROR, EXIT_CONFIG, EXIT_MANDATORY, EXIT_REFUSED = 0, 1, 2, 3, 4
# What each failing status means, as the preview's last line says it.
EXIT_MEANING = {EXIT_ERROR: "the preview itself failed", EXIT_CONFIG: "a config error",
                EXIT_MANDATORY: "a mandatory policy violation",
                EXIT_REFUSED: "a change the stack refuses to make"}


class ConfigFailure(Exception):
    """The program rejected its configuration: a `ConfigError`, or the `pulumi.RunError` a
    program raises to refuse cleanly (the CLI prints those without a traceback)."""


class RunFailure(Exception):
    """Anything else that stops a preview; the message is what to print."""


def is_config_error(err: BaseException) -> bool:
    # Matched by name rather than imported: the runner must not import the project before the
    # program runs, and must not depend on the module a project keeps its error class in.
    seen: BaseException | None = err
    for _ in range(5):
        if seen is None:
            return False
        for cls in type(seen).__mro__:
            if cls.__name__ == "ConfigError" and cls.__module__.startswith("components."):
                return True
            if cls.__name__ == "RunError" and cls.__module__ == "pulumi.errors":
                return True
        seen = seen.__cause__
    return False


@dataclass
class Rendering:
    config: StackConfig
    plan: Plan
    build: dict[str, str]  # relative path under build/<stack> → text
    rendered: dict[str, str]  # relative path under rendered/<stack> → text
    rendered_docs: dict[str, dict[str, Any]]  # the same, as documents
    verdict: Aside[tuple[list[Violation], float]] | None  # the pack's, judged beside the rest
    levels: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    # What the program itself wants a reviewer to read (`cluster.report`), e.g. the fabric BOM.
    report: list[str] = field(default_factory=list)
    # build less the program's artifacts: the files this runner makes of the plan
    generated: Mapping[str, str] = field(default_factory=dict)
    writing: Writing | None = None  # the artifacts, written to disk by the program's process

    @property
    def violations(self) -> list[Violation]:
        """The pack's findings (none without a pack), waiting for the pack if it still runs."""
        if self.verdict is None:
            return []
        try:
            found, seconds = self.verdict.result()
        except PolicyLoadError as err:
            raise RunFailure(str(err)) from None
        self.timings["policies"] = seconds
        return found

    def policy_report(self) -> dict[str, str]:
        """`policy-report.json`, when the pack ran: the build's file that waits for it."""
        if self.verdict is None:
            return {}
        report = {POLICY_REPORT: to_json([v.as_dict() for v in self.violations])}
        _leak_check(self.config, {f"build/{self.config.stack}": report})
        return report


def _artifacts(program_globals: Mapping[str, Any], warnings: list[str]) -> dict[str, str]:
    cluster = program_globals.get("cluster")
    artifacts = getattr(cluster, "artifacts", None)
    if cluster is None or artifacts is None:
        warnings.append("the program defines no `cluster.artifacts`: no artifacts written")
        return {}
    if not isinstance(artifacts, Mapping):
        raise RunFailure(f"cluster.artifacts must be a mapping, got {type(artifacts).__name__}")
    try:
        return check_artifacts(artifacts)
    except ArtifactError as err:
        raise RunFailure(str(err)) from None


def _leak_check(cfg: StackConfig, trees: Mapping[str, Mapping[str, str]]) -> None:
    """Fail if a secret config value reached any file in plain text."""
    if not cfg.placeholders:
        return
    common = os.path.commonprefix(list(cfg.placeholders))  # one pass over most texts
    for root, files in trees.items():
        for path, text in files.items():
            if common not in text:
                continue
            for placeholder, key in cfg.placeholders.items():
                if placeholder in text:
                    raise RunFailure(
                        f"the secret config value {key} appears in plain text in {root}/{path}. "
                        "Fix: read it with Config.require_secret / get_secret and keep it an "
                        "Output (never .get() it or unwrap it into a rendered file)."
                    )


def render(
    project_dir: Path,
    stack: str,
    policy_config: Path | None = None,
    with_policies: bool = True,
    timeout: float | None = None,
    policy_pack: Path | None = None,
    baseline: str | None = None,
    write_artifacts: Callable[[Mapping[str, str]], None] | None = None,
) -> Rendering:
    """The stack's plan, artifacts and policy findings. Its rendering (or the `baseline`
    stack's) stands for what `pulumi up` deployed; without one this is a first preview, where
    what commands print is unknown. `write_artifacts` writes the program's artifacts, in the
    program's own process once the program ends, before anything is checked
    (`Rendering.writing` waits for it)."""
    t0 = time.perf_counter()
    # The program changes into the project directory: make every path absolute first.
    project_dir = project_dir.resolve()
    policy_config = policy_config.resolve() if policy_config else None
    try:
        cfg = load_stack_config(project_dir, stack)
    except StackFileError as err:
        raise ConfigFailure(str(err)) from None
    deployed = (project_dir / "rendered" / (baseline or stack)).is_dir()
    # The program runs in a child; each resource is planned, rendered and judged here as the
    # program registers it.
    program: Stream[Ended, Registration] = Stream(
        lambda send: _program(project_dir, cfg, timeout, deployed, send),
        then=(lambda ended: write_artifacts(ended.artifacts)) if write_artifacts else None)
    collecting = gc.isenabled()
    # The plan is kept whole to the end: a collection would only scan it again and again.
    gc.disable()
    try:
        return _rendering(program, cfg, project_dir, t0, policy_config, with_policies,
                          policy_pack, writing=program if write_artifacts else None)
    except BaseException:
        program.close()
        raise
    finally:
        gc.freeze()  # and out of the passes after it
        if collecting:
            gc.enable()


def _rendering(program: Stream[Ended, Registration], cfg: StackConfig, project_dir: Path,
               t0: float, policy_config: Path | None, with_policies: bool,
               policy_pack: Path | None, writing: Writing | None) -> Rendering:
    """Each resource planned, rendered and judged here as the program registers it, then
    the files assembled and checked once it has ended."""
    builder = PlanBuilder(cfg.project, cfg.stack, str(project_dir))
    warnings: list[str] = []
    unloadable: RunFailure | None = None  # said once the program's verdict is in
    try:
        run, levels = _pack(builder.by_urn, cfg, project_dir, policy_config, policy_pack,
                            warnings) if with_policies else (None, {})
    except RunFailure as err:
        run, levels, unloadable = None, {}, err
    made: dict[str, Pieces] = {}
    for reg in program:
        res = builder.add(reg)
        made[res.urn] = pieces(res)
        if run is None:
            continue
        if program.answered:  # what is still queued is judged beside the rest, at the end
            run.later(res)
        else:
            run.resource(res)
    try:
        ended = program.result()
    except ChildEnded as err:  # killed, say, for want of memory
        raise RunFailure(str(err)) from None
    if unloadable is not None:
        raise unloadable
    t1 = program.answered_at

    plan = builder.plan()
    warnings.extend(ended.warnings)
    manifests, dupes = manifest_files(plan)
    warnings.extend(dupes)
    helm = helm_files(plan)
    rendered, rendered_docs = rendered_files(plan, made)
    generated: dict[str, str] = {"plan.json": plan_json(plan, made),
                                 OUTPUTS_FILE: outputs_json(ended.outputs)}
    generated.update({f"manifests/{p}": t for p, t in manifests.items()})
    generated.update({f"helm/{p}": t for p, t in helm.items()})
    for path in ended.artifacts:  # the program's own file wins
        generated.pop(path, None)
    build = generated | ended.artifacts
    _leak_check(cfg, {f"build/{cfg.stack}": build, f"rendered/{cfg.stack}": rendered})
    # Started last: once a copy of this process is forked, each page this one writes to is
    # copied first.
    verdict = _verdict(run, plan, set(cfg.placeholders))
    timings = {"program": t1 - t0, "render": time.perf_counter() - t1}
    return Rendering(cfg, plan, build, rendered, rendered_docs, verdict, levels, warnings,
                     timings, ended.report, generated, writing)


class Writing(Protocol):
    """Files being written elsewhere."""

    def join(self) -> None:
        """Wait until they are written; raise what stopped them."""

    def close(self) -> None:
        """Stop writing them."""


@dataclass
class Ended:
    """What the program leaves besides its resources, sent back from its process."""

    outputs: dict[str, Any]
    artifacts: dict[str, str]
    report: list[str]
    warnings: list[str]


def _program(project_dir: Path, cfg: StackConfig, timeout: float | None, deployed: bool,
             send: Callable[[Registration], None]) -> Ended:
    """Run the program, `send`ing each registration; its failure as the CLI reports it."""
    try:
        result = run_program(project_dir, cfg, timeout=timeout, deployed=deployed,
                             on_register=send)
    except ProgramFailed as failed:
        if is_config_error(failed.error):
            raise ConfigFailure(str(failed.error)) from None
        tb = "".join(traceback.format_exception(failed.error))
        raise RunFailure(f"the program failed:\n{tb}") from None
    warnings: list[str] = []
    artifacts = _artifacts(result.globals, warnings)
    report = [str(line) for line in getattr(result.globals.get("cluster"), "report", ())]
    return Ended(result.outputs, artifacts, report, warnings)


def _pack(by_urn: Mapping[str, Resource], cfg: StackConfig, project_dir: Path,
          policy_config: Path | None, policy_pack: Path | None, warnings: list[str]
          ) -> tuple[PackRun | None, dict[str, str]]:
    """The pack, ready to judge each resource as it arrives, and each policy's level."""
    try:
        # Another pack (a PR's base branch's) judges this program with its own config.
        pack_dir = (policy_pack or project_dir / "policies").resolve()
        pack = load_pack(pack_dir)
        if pack is None:
            warnings.append(f"no {pack_dir}/gpu_guardrails package: policies not run")
            return None, {}
        if policy_config is None:
            default = pack_dir / f"policy-config.{cfg.stack}.json"
            policy_config = default if default.is_file() else None
        conf = load_config_file(policy_config)
        return PackRun(pack, conf, by_urn), policy_levels(pack, conf)
    except PolicyLoadError as err:
        raise RunFailure(str(err)) from None


def _verdict(run: PackRun | None, plan: Plan, secrets: set[str]
             ) -> Aside[tuple[list[Violation], float]] | None:
    """The stack's rules and the findings, worked out beside what the preview does next."""
    if run is None:
        return None

    def finish() -> tuple[list[Violation], float]:
        return run.finish(plan, secrets), run.seconds

    verdict = Aside(finish)
    run.close()  # the child finishes the run; this process records nothing more
    return verdict


def outputs_json(outputs: Mapping[str, Any]) -> str:
    """The stack's exports as `pulumi stack output --json` shows them (a secret as
    "[secret]"), with the secret ones named: what a stack reference to this stack reads."""
    secret = sorted(k for k, v in outputs.items() if is_secret(v))
    shown = {k: "[secret]" if k in secret else whole_floats(v) for k, v in sorted(outputs.items())}
    return to_json({"outputs": shown, "secretOutputNames": secret})


WRITERS = 4  # files written at once


class Staging:
    """A new `root`, written beside it (from more than one process, if need be) and then
    swapped in whole, or dropped."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tmp = root.with_name(f".{root.name}.tmp-{os.getpid()}")
        self.committed = False
        self._new_parent = not root.parent.exists()  # dropped with the tree: build/, say
        if self.tmp.exists():
            shutil.rmtree(self.tmp)

    def write(self, files: Mapping[str, str]) -> None:
        for d in sorted({os.path.dirname(p) for p in files}):
            (self.tmp / d).mkdir(parents=True, exist_ok=True)

        def write(path: str) -> None:
            target = self.tmp / path
            target.write_text(files[path])
            if path.endswith(".sh"):
                target.chmod(0o755)

        # A thousand nodes' scripts are tens of thousands of files: the writes wait on the
        # disk, not on the interpreter, so a few run at once.
        with ThreadPoolExecutor(max_workers=WRITERS) as pool:
            list(pool.map(write, files))

    def commit(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)  # an empty tree is still a tree
        old = self.root.with_name(f".{self.root.name}.old-{os.getpid()}")
        if self.root.exists():
            self.root.rename(old)
        self.tmp.rename(self.root)
        self.committed = True
        if old.exists():
            shutil.rmtree(old)

    def drop(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self._new_parent:
            with contextlib.suppress(OSError):  # unless something else is there now
                self.root.parent.rmdir()


def sync_tree(root: Path, files: Mapping[str, str], current: Mapping[str, str]) -> int:
    """Make `root` hold exactly `files` touching only what differs; returns files touched."""
    touched = 0
    for path, text in files.items():
        if current.get(path) != text:
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            touched += 1
    for path in set(current) - set(files):
        (root / path).unlink()
        touched += 1
    if root.is_dir():
        for d in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
            if not any(d.iterdir()):
                d.rmdir()
    return touched


def diff_against_rendered(project_dir: Path, stack: str, rendering: Rendering,
                          baseline: str | None = None) -> tuple[Diff, dict[str, str]]:
    """The diff against rendered/<stack>/, or against another stack's rendering (`baseline`),
    its URNs read as this stack's (a URN carries the stack name), so a change can be previewed
    in a scratch stack beside prod without touching prod's stack file."""
    current = read_tree(project_dir / "rendered" / (baseline or stack))
    if baseline and baseline != stack:
        project = rendering.config.project
        renames = ((f"urn:pulumi:{baseline}::", f"urn:pulumi:{stack}::"),  # every URN
                   (f"pulumi:pulumi:Stack::{project}-{baseline}",  # the stack resource's name
                    f"pulumi:pulumi:Stack::{project}-{stack}"))
        for old, new in renames:
            current = {path: text.replace(old, new) for path, text in current.items()}
    return diff_trees(current, rendering.rendered, rendering.rendered_docs), current
