"""Run the CrossGuard rules over the recorded resources the way the pulumi-policy analyzer does.

Mirrors `pulumi_policy.policy._PolicyAnalyzerServicer` (1.21):
* `Analyze`: per resource, per enabled ResourceValidationPolicy: props are the resource inputs
  deserialised with `pulumi_policy.deserialize.deserialize_properties` (secrets unwrapped to
  plaintext, floats as floats, camelCase keys) wrapped in `unknown_checking_proxy`, so reading
  an unknown raises UnknownValueError, which becomes an advisory "can't run policy … during
  preview" diagnostic; `validate` may be a list and may return awaitables; remediate-level
  policies report as mandatory.
* `AnalyzeStack`: one StackValidationArgs with a PolicyResource per resource, parent and
  dependencies linked to the other PolicyResource objects.
* Options: PolicyResourceOptions(protect, ignore_changes, delete_before_replace, aliases,
  custom_timeouts, additional_secret_outputs, parent) — `opts.protect` IS visible to rules.
* Levels: the pack's policy config (`{"all": level, "<name>": level | {"enforcementLevel": …,
  <properties>}}`, the format of `pulumi preview --policy-pack-config`) over the rule's own
  level over the pack default (advisory).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.policy import _NotApplicableError
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

from .model import Plan, Resource
from .normalize import SECRET_SIG, SIG_KEY, UNKNOWN_VALUES
from .runtime import Registration

LEVEL_ORDER = ("mandatory", "advisory", "disabled")
# A finding a suppression (with its reason) keeps from failing: listed, never enforced.
SUPPRESSED = "suppressed"
_REPORT_ORDER = (*LEVEL_ORDER, SUPPRESSED)
PACK_NAME = "gpu-guardrails"
RULES_MODULE = "gpu_guardrails"


class PolicyLoadError(Exception):
    pass


@dataclass(frozen=True, order=True)
class Violation:
    level: str
    policy: str
    resource: str | None
    message: str
    reason: str = ""  # why it is suppressed (level SUPPRESSED only)

    def as_dict(self) -> dict[str, Any]:
        row = {"policy": self.policy, "level": self.level, "resource": self.resource,
               "message": self.message}
        return row | ({"reason": self.reason} if self.level == SUPPRESSED else {})

    def sort_key(self) -> tuple[int, str, str, str]:
        return (_REPORT_ORDER.index(self.level) if self.level in _REPORT_ORDER else 9,
                self.policy, self.resource or "", self.message)


@dataclass
class PolicyPackInfo:
    policies: list[Any]
    initial_config: dict[str, Any]
    default_level: EnforcementLevel
    # The pack's `recording_suppressions()` context manager (None in a pack without one).
    record_suppressions: Any = None
    # The pack's `take_deferred()`: forgets checks an earlier run in this process deferred.
    take_deferred: Any = None


def load_pack(pdir: Path) -> PolicyPackInfo | None:
    """Import `<pdir>/gpu_guardrails` (never `__main__.py`: it blocks serving)."""
    if not (pdir / RULES_MODULE / "__init__.py").is_file():
        return None
    if str(pdir) not in sys.path:
        sys.path.insert(0, str(pdir))
    try:
        mod = importlib.import_module(RULES_MODULE)
    except Exception as err:
        raise PolicyLoadError(f"importing {pdir}/{RULES_MODULE} failed: {err!r}") from err
    policies = list(getattr(mod, "POLICIES", []))
    names = [p.name for p in policies]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PolicyLoadError(f"duplicate policy names in {RULES_MODULE}.POLICIES: {dupes}")
    registry = sys.modules.get(f"{RULES_MODULE}.registry")
    return PolicyPackInfo(
        policies,
        dict(getattr(mod, "INITIAL_CONFIG", {}) or {}),
        getattr(mod, "DEFAULT_ENFORCEMENT_LEVEL", EnforcementLevel.ADVISORY),
        getattr(registry, "recording_suppressions", None),
        getattr(registry, "take_deferred", None),
    )


def load_config_file(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise PolicyLoadError(f"policy config {path}: {err}") from None
    if not isinstance(doc, dict):
        raise PolicyLoadError(f"policy config {path}: must be a JSON object")
    return doc


def _level(value: Any) -> EnforcementLevel | None:
    if isinstance(value, EnforcementLevel):
        return value
    if isinstance(value, str):
        try:
            return EnforcementLevel(value)
        except ValueError:
            raise PolicyLoadError(
                f"unknown enforcement level {value!r} (advisory, mandatory, remediate, disabled)"
            ) from None
    return None


def resolve(pack: PolicyPackInfo, config: Mapping[str, Any]
            ) -> list[tuple[Any, EnforcementLevel, dict[str, Any]]]:
    """(policy, effective level, policy properties) — user config over the pack's initial one."""
    merged: dict[str, Any] = {**pack.initial_config, **config}
    known = {p.name for p in pack.policies} | {"all"}
    unknown = sorted(set(merged) - known)
    if unknown:
        raise PolicyLoadError(f"policy config names unknown policies: {unknown}")
    all_level = _level(merged.get("all"))
    out = []
    for policy in pack.policies:
        entry = merged.get(policy.name)
        props: dict[str, Any] = {}
        level = None
        if isinstance(entry, Mapping):
            level = _level(entry.get("enforcementLevel"))
            props = {k: v for k, v in entry.items() if k != "enforcementLevel"}
        else:
            level = _level(entry)
        schema = getattr(policy, "config_schema", None)
        if schema is not None and schema.properties:
            for key, spec in schema.properties.items():
                if key not in props and isinstance(spec, Mapping) and "default" in spec:
                    props[key] = spec["default"]
        eff = level or all_level or policy.enforcement_level or pack.default_level
        out.append((policy, eff, props))
    return out


class LazyProps(Mapping[str, Any]):
    """The analyzer's proxied props, built on first access: most rules filter on type first."""

    __slots__ = ("_raw", "_proxy")

    def __init__(self, raw: dict[str, Any]) -> None:
        self._raw = raw
        self._proxy: Any = None

    def _get(self) -> Any:
        if self._proxy is None:
            self._proxy = unknown_checking_proxy(deserialize_properties(
                _secret_unknowns_empty(self._raw)))
        return self._proxy

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def _secret_unknowns_empty(value: Any) -> Any:
    """The inputs as the engine hands them to the analyzer in a preview: a secret whose value is
    not known yet (a join's credentials, built from a token command's stdout) arrives as an
    empty string, not as unknown, so rules read it instead of deferring (CLI 3.274.1 with
    pulumi-command 1.2.1; tests/test_engine_preview.py compares the findings). The input is
    returned as it is when it holds none."""
    if isinstance(value, dict):
        secret = value.get("value") if value.get(SIG_KEY) == SECRET_SIG else None
        if isinstance(secret, str) and secret in UNKNOWN_VALUES:
            return ""
        out = {k: _secret_unknowns_empty(v) for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if isinstance(value, list):
        items = [_secret_unknowns_empty(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def _options(res: Resource) -> PolicyResourceOptions:
    r = res.reg
    return PolicyResourceOptions(
        r.protect, list(r.ignore_changes), r.delete_before_replace, list(r.aliases),
        PolicyCustomTimeouts(0, 0, 0), list(r.additional_secret_outputs), r.parent,
    )


def _run(result: Any) -> None:
    if result is not None and inspect.isawaitable(result):  # most rules return None
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(result)
        finally:
            loop.close()


def _scrub(message: str, secrets: set[str]) -> str:
    # Rules see plaintext secrets (as under the real analyzer); never let one reach a report.
    for s in secrets:
        if s in message:
            message = message.replace(s, "[secret]")
    return message


def run_policies(plan: Plan, pack: PolicyPackInfo, config: Mapping[str, Any],
                 extra_secrets: set[str] = frozenset()) -> list[Violation]:  # type: ignore[assignment]
    """Violations, and the findings suppressions keep from failing (level SUPPRESSED)."""
    run = PackRun(pack, config, plan.by_urn)
    for res in plan.resources:
        run.resource(res)
    return run.finish(plan, extra_secrets)


class PackRun:
    """The pack judging a plan as the analyzer does in a preview: each resource's rules as the
    resource arrives (`Analyze`), then the stack's once every resource is there
    (`AnalyzeStack`). `by_urn` holds every resource that arrived so far."""

    def __init__(self, pack: PolicyPackInfo, config: Mapping[str, Any],
                 by_urn: Mapping[str, Resource]) -> None:
        resolved = [(p, _level_name(lvl), props) for p, lvl, props in resolve(pack, config)
                    if lvl != EnforcementLevel.DISABLED]
        self._resource_rules = [r for r in resolved if isinstance(r[0], ResourceValidationPolicy)]
        self._stack_rules = [r for r in resolved if isinstance(r[0], StackValidationPolicy)]
        self._rules_of: dict[str, list[tuple[Any, str, Any]]] = {}
        self._providers = _Providers(by_urn)
        self._props = _Props()
        self._found: list[Violation] = []  # as reported: secrets are scrubbed once at the end
        self._later: list[Resource] = []
        self._recording = ExitStack()
        self._suppressed: list[Any] = []
        self.seconds = 0.0  # spent in rules so far
        if pack.take_deferred is not None:
            pack.take_deferred()  # as a new analyzer process: nothing deferred yet
        if pack.record_suppressions is not None:
            self._suppressed = self._recording.enter_context(pack.record_suppressions())

    def resource(self, res: Resource) -> None:
        start = time.perf_counter()
        rules = self._rules_of.get(res.type)
        if rules is None:
            rules = self._rules_of[res.type] = [
                r for r in self._resource_rules if _applies(r[0], res.type)]
        if rules:
            _judge_resource(res, rules, self._props.of(res), self._providers, self._found)
        self.seconds += time.perf_counter() - start

    def later(self, res: Resource) -> None:
        """Judge `res` in `finish` (which another process may run)."""
        self._later.append(res)

    def finish(self, plan: Plan, extra_secrets: set[str] = frozenset()  # type: ignore[assignment]
               ) -> list[Violation]:
        """The rules of resources left for later and the stack's rules, then every finding,
        suppressed ones included, scrubbed of every secret the plan holds."""
        for res in self._later:
            self.resource(res)
        start = time.perf_counter()
        try:
            found = self._found + _run_stack_policies(plan, self._stack_rules,
                                                      self._providers, self._props)
        finally:
            self.close()
        secrets = set(plan.secret_strings) | set(extra_secrets)
        found = [replace(v, message=_scrub(v.message, secrets)) for v in found]
        found += [Violation(SUPPRESSED, s.rule, s.urn, _scrub(s.message, secrets),
                            _scrub(s.reason, secrets)) for s in set(self._suppressed)]
        self.seconds += time.perf_counter() - start
        return sorted(set(found), key=Violation.sort_key)

    def close(self) -> None:
        """Stop recording suppressions (`finish` does; a process that hands `finish` to
        another calls it for itself)."""
        self._recording.close()


def _level_name(lvl: EnforcementLevel) -> str:
    return "mandatory" if lvl == EnforcementLevel.REMEDIATE else lvl.value


def _unknown_note(policy: Any, err: UnknownValueError, urn: str | None) -> Violation:
    return Violation("advisory", policy.name, urn,
                     f"can't run policy '{policy.name}' during preview: {err.message}")


class _Providers:
    """Each resource's provider as the analyzer hands it to rules, built once per provider."""

    def __init__(self, by_urn: Mapping[str, Resource]) -> None:
        self._by_urn = by_urn
        self._made: dict[str, PolicyProviderResource] = {}

    def of(self, res: Resource) -> PolicyProviderResource | None:
        urn = res.reg.provider
        if not urn or urn not in self._by_urn:
            return None
        if urn not in self._made:
            p = self._by_urn[urn]
            self._made[urn] = PolicyProviderResource(p.type, LazyProps(p.reg.inputs), urn,
                                                     p.name)
        return self._made[urn]


class _Props:
    """Each resource's props as its rules read them, made once for its resource rules and the
    stack's (the analyzer makes them per call; the proxies are read-only to this pack's rules,
    so one copy reads the same)."""

    def __init__(self) -> None:
        self._of: dict[str, tuple[Registration, LazyProps]] = {}

    def of(self, res: Resource) -> LazyProps:
        made = self._of.get(res.urn)
        if made is None or made[0] is not res.reg:  # a resource planned again: its own
            made = self._of[res.urn] = (res.reg, LazyProps(res.reg.inputs))
        return made[1]


def _applies(policy: Any, type_: str) -> bool:
    """Whether a resource rule judges resources of `type_`: a rule of this pack says so
    (`applies_to`); any other is called for every resource, as the analyzer calls it."""
    applies = getattr(policy, "applies_to", None)
    return applies is None or bool(applies(type_))


def _judge_resource(res: Resource, rules: list[tuple[Any, str, Any]], props: LazyProps,
                    providers: _Providers, found: list[Violation]) -> None:
    opts = _options(res)
    prov = providers.of(res)
    for policy, level, pconf in rules:

        def report(message: str, urn: str | None = None, *, _p: Any = policy,
                   _l: str = level, _u: str = res.urn) -> None:
            # As in the analyzer, a resource rule's urn argument is ignored.
            found.append(Violation(_l, _p.name, _u, message or _p.description))

        args = ResourceValidationArgs(res.type, props, res.urn, res.name, opts, prov, pconf, {})
        try:
            _run(policy.validate(args, report))
        except UnknownValueError as err:
            found.append(_unknown_note(policy, err, res.urn))
        except _NotApplicableError:
            pass


def _stack_resources(plan: Plan, providers: _Providers, props: _Props
                     ) -> list[PolicyResource]:
    """Every resource as a stack rule sees it: with its parent and dependencies linked."""
    objs: dict[str, PolicyResource] = {}
    for res in plan.resources:
        objs[res.urn] = PolicyResource(res.type, props.of(res), res.urn, res.name,
                                       _options(res), providers.of(res), None, [], {})
    for res in plan.resources:
        obj = objs[res.urn]
        obj.parent = objs.get(res.parent or "")
        obj.dependencies = [objs[d] for d in res.reg.depends_on if d in objs]
        obj.property_dependencies = {
            k: [objs[d] for d in v if d in objs]
            for k, v in res.reg.property_dependencies.items()
        }
    return list(objs.values())


def _run_stack_policies(plan: Plan, policies: list[tuple[Any, str, Any]],
                        providers: _Providers, props: _Props) -> list[Violation]:
    found: list[Violation] = []
    if not policies:
        return found
    resources = _stack_resources(plan, providers, props)
    for stack_policy, level, pconf in policies:

        def report_stack(message: str, urn: str | None = None, *, _p: Any = stack_policy,
                         _l: str = level) -> None:
            found.append(Violation(_l, _p.name, urn or None, message or _p.description))

        try:
            _run(stack_policy.validate(StackValidationArgs(resources, pconf, {}),
                                       report_stack))
        except UnknownValueError as err:
            found.append(_unknown_note(stack_policy, err, None))
        except _NotApplicableError:
            pass
    return found


def policy_levels(pack: PolicyPackInfo, config: Mapping[str, Any]) -> dict[str, str]:
    return {p.name: lvl.value for p, lvl, _ in resolve(pack, config)}
