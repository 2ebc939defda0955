"""The stack's conventions the preview's readers share (pure): what a resource is for by its
name's suffix, the switches' port-description format, a run of hosts as a reader sees it."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from types import ModuleType


@cache  # called per port line: an import statement costs a lookup each time
def ports() -> ModuleType:
    """The stack's port-description format (components/planning/port_descriptions.py), imported
    only once a diff holds a switch's port map: the preview runs on projects without one."""
    from components.planning import port_descriptions

    return port_descriptions


def suffix(name: str, end: str) -> str | None:
    """What a resource named `<x><end>` is for (`gpu-node-03-prepare` -> `gpu-node-03`)."""
    return name[: -len(end)] if name.endswith(end) else None


def span(hosts: Sequence[str], whole_up_to: int = 0) -> str:
    """A sorted run of hosts: each by name up to `whole_up_to` of them, else its first and
    last."""
    return (", ".join(hosts) if len(hosts) <= whole_up_to
            else f"{hosts[0]} … {hosts[-1]}")
