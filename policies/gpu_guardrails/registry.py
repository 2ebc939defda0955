"""One decorator per rule: `@resource_rule(...)` / `@stack_rule(...)` on a function.

The decorated function keeps working as a plain function (handy in tests); the registry holds
the real `pulumi_policy` policy objects that both `policies/__main__.py` (the CrossGuard pack)
and the offline preview run. The function's docstring is the reason for the rule.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

REGISTRY: list[ResourceValidationPolicy | StackValidationPolicy] = []

ResourceCheck = Callable[[ResourceValidationArgs, ReportViolation], None]
StackCheck = Callable[[StackValidationArgs, ReportViolation], None]


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
            if applies(args.resource_type):
                fn(args, report)

        _register(ResourceValidationPolicy(
            name=name, description=description, validate=validate, enforcement_level=level))
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
        _register(StackValidationPolicy(
            name=name, description=description, validate=fn, enforcement_level=level))
        return fn

    return wrap


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


def is_map(value: Any) -> bool:
    return isinstance(value, Mapping)


def is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))
