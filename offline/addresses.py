"""Hosts whose fabric addresses change in place (pure): a node moved to another slot or SU
takes the IPoIB addresses of its new place (components/planning/host_scripts.py netplan), and
with them its Lustre client's NIDs (<address>@o2ib, components/planning/lnet.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from .conventions import names, subject
from .diff import Change

# A rail interface's address in the host preparation's netplan: `      addresses: [a.b.c.d/n]`.
_ADDRESS = re.compile(r"^([-+])\s+addresses: \[([\d.]+)/\d+\]$")


def readdressed(changes: Iterable[Change]) -> dict[str, list[tuple[str, str]]]:
    """host -> (old, new) of each rail address that changes, in rail order."""
    out = {}
    for c in changes:
        host = subject(c.name, names().PREPARE)
        if not host or c.action != "update":
            continue
        found = [m for line in c.text_diffs.get("stdin", []) if (m := _ADDRESS.match(line))]
        old = [m[2] for m in found if m[1] == "-"]
        new = [m[2] for m in found if m[1] == "+"]
        if old and len(old) == len(new):
            out[host] = list(zip(old, new, strict=True))
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
