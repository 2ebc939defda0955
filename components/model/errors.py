"""Pydantic's validation errors as the project's Problems: each with its key path (camelCase,
as written in the stack file), the bad value and a fix — "did you mean" for a mistyped key."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from components.model.fields import Problem


def pydantic_problems(err: ValidationError, model: type[BaseModel]) -> list[Problem]:
    errors = err.errors(include_url=False)
    locs = [e["loc"] for e in errors]
    problems = []
    for e in errors:
        loc = e["loc"]
        # A failed item also fails its list's length check; report only the item.
        if e["type"] == "too_short" and any(o[:len(loc)] == loc and o != loc for o in locs):
            continue
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(model, loc[:-1])
            by_lower = {a.lower(): a for a in allowed}
            close = difflib.get_close_matches(str(loc[-1]).lower(), list(by_lower), n=1)
            hint = f"did you mean {by_lower[close[0]]!r}? " if close else ""
            shown = e["input"] if not isinstance(e["input"], dict | list) else "{…}"
            problems.append(Problem(path, shown, "unknown key",
                                    f"{hint}remove or rename it; allowed keys here: "
                                    f"{', '.join(sorted(allowed))}"))
        elif e["type"] == "missing":
            problems.append(Problem(path, None, "required key is missing",
                                    f"add {loc[-1]!r} here (Pulumi.prod.yaml has an example)"))
        else:
            msg = e["msg"].removeprefix("Value error, ")
            msg, _, fix = msg.partition(" || ")
            problems.append(Problem(path, e.get("input"), msg, fix or _fix_for(e)))
    return problems


def _fix_for(e: Mapping[str, Any]) -> str:
    ctx = e.get("ctx") or {}
    bounds = {"greater_than_equal": "ge", "less_than_equal": "le", "greater_than": "gt",
              "less_than": "lt"}
    if e["type"] in bounds:
        return f"use a value {e['msg'].removeprefix('Input should be ')}"
    if e["type"] == "literal_error":
        return f"use one of {ctx.get('expected')}"
    if e["type"] == "string_pattern_mismatch":
        return f"match the pattern {ctx.get('pattern')}"
    if e["type"].startswith("ip_v4"):
        return "write an IPv4 address, or a network like 10.0.0.0/16 with no host bits set"
    if e["type"] in ("too_short", "too_long"):
        return e["msg"].replace("should", "must")
    return f"give a valid value ({e['msg']})"


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """Aliases accepted at `loc`, walking nested models and mappings (for 'did you mean')."""
    current: Any = model
    skip_key = False
    for part in loc:
        if isinstance(part, int) or skip_key:
            skip_key = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = next((f for n, f in current.model_fields.items()
                      if part in (n, f.alias)), None)
        if field is None:
            return []
        # dict[str, Model]: the next location part is a key, then the Model applies.
        skip_key = _is_mapping(field.annotation)
        current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _is_mapping(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin is dict:
        return True
    if origin is Annotated or origin in (Union, UnionType):
        return any(_is_mapping(a) for a in get_args(annotation))
    return False


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


