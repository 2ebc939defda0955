"""Helpers the themed checks share: duplicate values and the key paths of hosts and nodes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from components.model.cluster import Cluster


def duplicates(items: list[tuple[str, Any]]) -> Iterator[tuple[str, Any, str]]:
    """Yield (path, value, first_path) for every value already seen at an earlier path."""
    seen: dict[Any, str] = {}
    for path, value in items:
        if value is None:
            continue
        if value in seen:
            yield path, value, seen[value]
        else:
            seen[value] = path


def hostname_paths(c: Cluster) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(key path, hostname) of every host, then of every GPU node."""
    return ([(f"hosts[{i}].hostname", h.hostname) for i, h in enumerate(c.hosts)],
            [(f"{n.origin} ({n.hostname})", n.hostname) for n in c.nodes])


def management_ips(c: Cluster) -> list[tuple[str, Any]]:
    """(key path, management address) of every host and GPU node."""
    return ([(f"hosts[{i}].managementIp", h.management_ip) for i, h in enumerate(c.hosts)]
            + [(f"{n.origin} ({n.hostname}).managementIp", n.management_ip) for n in c.nodes])
