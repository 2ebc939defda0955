"""One decorator per rule: `@resource_rule(...)` / `@stack_rule(...)` on a function.

The decorated function keeps working as a plain function (handy in tests); the registry holds
the real `pulumi_policy` policy objects that both `policies/__main__.py` (the CrossGuard pack)
and the offline preview run. The function's docstring is the reason for the rule.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date
from typing import Any, NamedTuple, Protocol, TypeGuard, cast

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

from .vocabulary import POLICY_SUPPRESS_ANNOTATION

REGISTRY: list[ResourceValidationPolicy | StackValidationPolicy] = []
# rule id -> the decorated function (its docstring is the rule's reason).
DOCS: dict[str, Callable[..., None]] = {}


class Report(Protocol):
    """How a rule reports a violation: a message and, optionally, the urn of the resource."""

    def __call__(self, message: str, urn: str | None = None, /) -> None: ...


def _optional_urn(report: ReportViolation) -> Report:
    """The engine's callback as what it is. pulumi_policy types `ReportViolation` as
    `Callable[[str, Optional[str]], None]` (the urn required), but documents the urn as optional
    and every callback it passes declares `urn: Optional[str] = None`."""
    return cast(Report, report)


ResourceCheck = Callable[[ResourceValidationArgs, Report], None]
StackCheck = Callable[[StackValidationArgs, Report], None]


class Suppressed(NamedTuple):
    """A finding a suppression kept from failing: still reported, as suppressed."""
    rule: str
    urn: str | None
    message: str
    reason: str


# Where suppressed findings go while someone records them (the offline preview's report);
# under the engine nothing does, and a suppression is seen where it lives: the stack's policy
# config or the object's annotation, both in the reviewed change.
_recording: list[list[Suppressed]] = []


@contextmanager
def recording_suppressions() -> Iterator[list[Suppressed]]:
    found: list[Suppressed] = []
    _recording.append(found)
    try:
        yield found
    finally:
        _recording.remove(found)


def _note(rule: str, urn: str | None, reason: str) -> Report:
    def report(message: str, _urn: str | None = None) -> None:
        for found in _recording:
            found.append(Suppressed(rule, urn or _urn, message, reason))
    return report


class Deferred(NamedTuple):
    """A check a preview cannot make: the value it reads is known only once earlier steps of
    `pulumi up` ran (a reboot drain's command is built from the reboot check's output)."""
    rule: str
    urn: str | None
    path: str  # the unknown property, e.g. ".create"


# Checks deferred since the last summary (rules_deferred.py reports them once, as one finding,
# where the analyzer would print one "can't run policy" line per rule and resource). The
# analyzer serves a preview's Analyze calls, then AnalyzeStack, in one process.
_deferred: list[Deferred] = []
_deferred_lock = threading.Lock()


def _defer(rule: str, urn: str | None, err: UnknownValueError) -> None:
    with _deferred_lock:
        _deferred.append(Deferred(rule, urn, "." + ".".join(err.props)))


def take_deferred() -> list[Deferred]:
    """The checks deferred since the last call, and forget them."""
    with _deferred_lock:
        taken = list(_deferred)
        _deferred.clear()
    return taken


def _register(policy: ResourceValidationPolicy | StackValidationPolicy) -> None:
    if any(p.name == policy.name for p in REGISTRY):
        raise ValueError(f"policy {policy.name!r} is registered twice")
    REGISTRY.append(policy)


def resource_rule(
    name: str,
    description: str,
    level: EnforcementLevel = EnforcementLevel.MANDATORY,
    types: Sequence[str] = ("*",),
) -> Callable[[ResourceCheck], ResourceCheck]:
    """Register a resource rule run only on resources whose type matches a glob in `types`."""
    exact = frozenset(t for t in types if not any(c in t for c in "*?["))
    globs = tuple(t for t in types if t not in exact)

    def applies(type_: str) -> bool:
        return type_ in exact or any(fnmatch.fnmatchcase(type_, g) for g in globs)

    def wrap(fn: ResourceCheck) -> ResourceCheck:
        if not (fn.__doc__ or "").strip():
            raise ValueError(f"rule {name!r} needs a docstring giving its reason")

        def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
            if not applies(args.resource_type):
                return
            try:
                reason = suppression(name, args, args.name, args.props)
                # A suppressed rule still runs: what it would have reported is recorded as such.
                fn(args, _optional_urn(report) if reason is None
                   else _note(name, args.urn, reason))
            except UnknownValueError as err:
                # Checked by `pulumi up`, which registers the resource only once it is known.
                _defer(name, args.urn, err)

        policy = ResourceValidationPolicy(
            name=name, description=description, validate=validate, enforcement_level=level)
        # Read by a runner that calls each rule only for the types it judges (the offline
        # preview: a rule per resource adds up at thousands of resources); the analyzer
        # calls every rule, and `validate` checks the type itself.
        policy.applies_to = applies  # type: ignore[attr-defined]
        _register(policy)
        DOCS[name] = fn
        return fn

    return wrap


def stack_rule(
    name: str,
    description: str,
    level: EnforcementLevel = EnforcementLevel.MANDATORY,
) -> Callable[[StackCheck], StackCheck]:
    def wrap(fn: StackCheck) -> StackCheck:
        if not (fn.__doc__ or "").strip():
            raise ValueError(f"rule {name!r} needs a docstring giving its reason")
        def validate(args: StackValidationArgs, report: ReportViolation) -> None:
            by_urn = {r.urn: r for r in args.resources}

            def filtered(message: str, urn: str | None = None) -> None:
                res = by_urn.get(urn or "")
                reason = None if res is None else suppression(name, args, res.name, res.props)
                if reason is None:
                    report(message, urn)
                else:
                    _note(name, urn, reason)(message)

            try:
                fn(args, filtered)
            except UnknownValueError as err:
                _defer(name, None, err)

        _register(StackValidationPolicy(
            name=name, description=description, validate=validate, enforcement_level=level))
        DOCS[name] = fn
        return fn

    return wrap


def policy_config(args: Any) -> Any:
    """The rule's policy-config properties (None when there are none, as in the analyzer)."""
    getter = getattr(args, "get_config", None)
    return getter() if callable(getter) else None


SUPPRESS_ANNOTATION = POLICY_SUPPRESS_ANNOTATION
# The rules an object's own annotation may suppress: an annotation lives in code no owner of
# the pack reviews (components/), so only rules that guard performance or operations, never
# security, are here. Every other suppression is in the policy config, which the pack's owners
# review (policies/, CODEOWNERS).
ANNOTATION_SUPPRESSIBLE = frozenset({
    "nccl-no-debug-knobs",  # NCCL_DEBUG/NCCL_ALGO: a slow job, not an exposure
})


def _expired(expires: Any, today: date) -> bool:
    """An expiry that is not an ISO date, or is past, ends the suppression."""
    try:
        return date.fromisoformat(str(expires)) < today
    except ValueError:
        return True


def suppression(rule: str, args: Any, resource_name: str, props: Any,
                today: date | None = None) -> str | None:
    """The reason `rule` is suppressed for one resource, or None. Suppressed by either
    * the policy config: `{"<rule>": {"suppress": [{"name": "<resource name or glob>",
      "reason": "...", "expires": "YYYY-MM-DD"}]}}` (resource name = the Pulumi name or
      metadata.name); an entry without a reason, or past or without its expiry, suppresses
      nothing; or
    * for a rule in ANNOTATION_SUPPRESSIBLE only, an annotation on the object:
      `gpucluster.io/policy-suppress: "<rule>: <reason>"` (several separated by ';')."""
    meta_name = get(props, "metadata", "name")
    names = {resource_name, meta_name} - {None}
    conf = policy_config(args)
    entries = conf.get("suppress") if isinstance(conf, Mapping) else None
    for entry in entries if is_list(entries) else ():
        pattern, reason = get(entry, "name"), get(entry, "reason")
        if (isinstance(pattern, str) and isinstance(reason, str) and reason.strip()
                and not _expired(get(entry, "expires"), today or date.today())
                and any(fnmatch.fnmatchcase(str(n), pattern) for n in names)):
            return reason.strip()
    note = get(props, "metadata", "annotations", SUPPRESS_ANNOTATION)
    if isinstance(note, str) and rule in ANNOTATION_SUPPRESSIBLE:
        for item in note.split(";"):
            rid, _, reason = item.partition(":")
            if rid.strip() == rule and reason.strip():
                return reason.strip()
    return None


def get(obj: Any, *path: Any) -> Any:
    """Walk mappings/sequences (the analyzer's read-only proxies included); None if absent."""
    cur = obj
    for key in path:
        if isinstance(key, int):
            if not is_list(cur) or key >= len(cur):
                return None
            cur = cur[key]
        else:
            if not is_map(cur) or key not in cur:
                return None
            cur = cur[key]
    return cur


def chart_name(props: Any) -> str | None:
    """A Helm release's chart by name, however Helm is given it: `gpu-operator` in a
    repository, `oci://…/gpu-operator`, or a local archive `…/gpu-operator-v26.3.2.tgz`."""
    chart, version = get(props, "chart"), get(props, "version")
    if not isinstance(chart, str):
        return None
    name = chart.rsplit("/", 1)[-1]
    return name.removesuffix(f"-{version}.tgz") if isinstance(version, str) else name


def is_map(value: Any) -> TypeGuard[Mapping[Any, Any]]:
    return isinstance(value, Mapping)


def is_list(value: Any) -> TypeGuard[Sequence[Any]]:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))
