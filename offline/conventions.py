"""The stack's conventions the preview's readers share (pure): what a resource is for, looked up
in the stack's vocabulary of names, the switches' port-description format, a run of hosts as a
reader sees it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from types import ModuleType
from typing import Any

from .diff import Change, split_path


@cache  # called per port line: an import statement costs a lookup each time
def ports() -> ModuleType:
    """The stack's port-description format (components/planning/port_descriptions.py), imported
    only once a diff holds a switch's port map: the preview runs on projects without one."""
    from components.planning import port_descriptions

    return port_descriptions


@cache
def names() -> ModuleType:
    """The stack's vocabulary of resource names and roles (components/planning/names.py),
    imported on first use: the program's own `components` package is the first this process
    imports."""
    from components.planning import names as vocabulary

    return vocabulary


def subject(name: str, role: str, layer: str | None = None) -> str | None:
    """The host, switch, release or workload whose resource of `role` (one of `names()`'s
    roles) the resource `name` is, else None (`gpu-node-03-prepare`, PREPARE -> `gpu-node-03`);
    among `layer`'s roles when given."""
    return names().subject(name, role, layer)


def published_facts(new_inputs: Mapping[str, Mapping[str, Any]] | None,
                    *types: str) -> list[Mapping[str, Any]]:
    """The facts the components of `types` publish (their `facts` input), from each resource's
    new inputs by URN."""
    return [facts for urn, inputs in (new_inputs or {}).items()
            if resource_type(urn) in types
            and isinstance(facts := inputs.get("facts"), Mapping)]


def facts_by_name(new_inputs: Mapping[str, Mapping[str, Any]] | None,
                  type_: str) -> dict[str, Mapping[str, Any]]:
    """name -> the facts each component of `type_` publishes (a host's, a workload's)."""
    return {resource_name(urn): facts for urn, inputs in (new_inputs or {}).items()
            if resource_type(urn) == type_
            and isinstance(facts := inputs.get("facts"), Mapping)}


def fact_changes(change: Change, key: str) -> dict[tuple[str, ...], tuple[Any, Any]]:
    """The (old, new) of each value under a change's published fact `key`, by the path below
    it (`facts.railGuids["h"]["1"]` -> ("h", "1"); `facts.address` -> ()); a side is None
    where the value is absent."""
    out = {}
    for path, sides in change.values.items():
        segments = split_path(path)
        if segments[:2] == ["facts", key]:
            out[tuple(segments[2:])] = sides
    return out


def cluster_change(changes: Iterable[Change]) -> Change | None:
    """The kubeadm cluster's own change (its published facts), if it changes."""
    return next((c for c in changes if c.type == names().CLUSTER_TYPE), None)


def resource_type(urn: str) -> str:
    """The type token of the resource a URN names (its parents' types stripped)."""
    return urn.split("::")[-2].rpartition("$")[2]


def resource_name(urn: str) -> str:
    """The name a URN ends with."""
    return urn.rpartition("::")[2]


def span(hosts: Sequence[str], whole_up_to: int = 0) -> str:
    """A sorted run of hosts: each by name up to `whole_up_to` of them, else its first and
    last."""
    return (", ".join(hosts) if len(hosts) <= whole_up_to
            else f"{hosts[0]} … {hosts[-1]}")
