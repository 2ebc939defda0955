"""Reading API objects as the API server returns them. Many fields are optional and left out
when empty or never set (labels, status, a condition's lastTransitionTime, an Event's reason or
involvedObject.kind), and which of them an object has can depend on timing: a reader that
indexes them directly fails on the first object without one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MISSING = "-"  # how a missing field is written in the twin's text outputs


def get(obj: Any, *path: str, default: Any = None) -> Any:
    """obj[path[0]][path[1]]..., or `default` where a step is missing, null or not a mapping."""
    for key in path:
        if not isinstance(obj, Mapping) or obj.get(key) is None:
            return default
        obj = obj[key]
    return obj


def mapping(obj: Any, *path: str) -> Mapping[str, Any]:
    """A mapping field ({} when missing)."""
    found = get(obj, *path)
    return found if isinstance(found, Mapping) else {}


def items(obj: Any, *path: str) -> list[Any]:
    """A list field ([] when missing)."""
    found = get(obj, *path)
    return found if isinstance(found, list) else []


def key(obj: Any) -> str:
    """namespace/name ("/name" for a cluster-scoped object)."""
    return f"{get(obj, 'metadata', 'namespace', default='')}/" \
           f"{get(obj, 'metadata', 'name', default=MISSING)}"


def one_line(value: Any) -> str:
    """A field's value for a tab-separated line: tabs and line breaks written as \\t, \\n."""
    if value is None or value == "":
        return MISSING
    return str(value).replace("\t", "\\t").replace("\r", "\\r").replace("\n", "\\n")


EVENT_FIELDS = (("metadata", "namespace"), ("involvedObject", "kind"),
                ("involvedObject", "name"), ("reason",))


def describe_event(event: Any) -> tuple[list[str], list[str]]:
    """An Event's namespace, involved object, reason and message, each "-" where the Event has
    none, and the dotted names of the fields it lacks (the message is optional and unnamed)."""
    fields = [one_line(get(event, *path)) for path in EVENT_FIELDS]
    missing = [".".join(path) for path, v in zip(EVENT_FIELDS, fields, strict=True)
               if v == MISSING]
    ns, kind, name, reason = fields
    return [ns, f"{kind}/{name}", reason, one_line(get(event, "message", default=""))], missing
