"""Hosts whose fabric addresses change in place (pure): a node moved to another slot or SU
takes the IPoIB addresses of its new place (components/planning/lnet.py rail_addresses, which
its netplan and the facts it publishes carry), and with them its Lustre client's NIDs
(<address>@o2ib)."""

from __future__ import annotations

from collections.abc import Iterable

from .conventions import fact_changes, names
from .diff import Change


def readdressed(changes: Iterable[Change]) -> dict[str, list[tuple[str, str]]]:
    """host -> (old, new) of each rail address that changes, in rail order, from the addresses
    each host publishes (components/planning/facts.py host_facts); a host that gains or loses a
    rail is not re-addressed in place."""
    out = {}
    for c in changes:
        if c.type != names().HOST_TYPE or c.action != "update":
            continue
        found = fact_changes(c, "railAddresses")
        if found and all(None not in sides for sides in found.values()):
            out[c.name] = [(str(o), str(n)) for _, (o, n) in sorted(
                found.items(), key=lambda kv: int(kv[0][0]))]
    return out


def _pairs(pairs: list[tuple[str, str]]) -> str:
    first = f"{pairs[0][0]} -> {pairs[0][1]}"
    return first if len(pairs) == 1 else f"{first} and {len(pairs) - 1} more rails"


def address_lines(changes: Iterable[Change]) -> list[str]:
    """The impact's line for each host whose Lustre NIDs change."""
    return [f"  addresses change: {host}'s IPoIB addresses {_pairs(pairs)}: its Lustre NIDs "
            "change with them (the servers see a new client; the old NIDs' exports expire)"
            for host, pairs in sorted(readdressed(changes).items())]


def address_steps(changes: Iterable[Change]) -> list[str]:
    """What to check before `pulumi up` re-addresses a host: LNet cannot move a network
    interface that a mounted Lustre file system uses."""
    return [f"{host}'s IPoIB addresses change ({_pairs(pairs)}), and its Lustre NIDs with "
            f"them: once it is drained, `mount -t lustre` on {host} must list nothing (the "
            "CSI driver unmounts a drained node's volumes); `pulumi up` then applies the new "
            f"netplan and LNet configuration, and `lctl list_nids` on {host} shows the new NIDs"
            for host, pairs in sorted(readdressed(changes).items())]
