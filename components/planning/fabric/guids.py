"""GUID normalisation and deterministic placeholders.

Placeholders live in the locally administered EUI-64 space (first octet 0x02: the U/L bit
set, unicast), so they can never equal a vendor-assigned GUID:

    0x0201 + 48 bits   compute HCA port GUIDs   (hash of "hostname/rail")
    0x0202 + 48 bits   subnet-manager host port GUIDs (hash of hostname)
    0x0205 + 48 bits   switch node GUIDs        (hash of switch name)

HCA and SM port placeholders are odd, so the simulator's node GUID (port GUID - 1, see
ibsim.md: ibsim computes CA PortGUID = NodeGUID + port) is even and never equals another
placeholder. Collisions are resolved by probing upwards in sorted key order, so the result
depends only on the set of names, never on input order.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from .model import PlanError

_GUID = re.compile(r"^0x[0-9a-fA-F]{16}$")

KIND_PREFIX = {"hca": 0x0201, "sm": 0x0202, "switch": 0x0205}


def normalize(guid: str, where: str) -> str:
    """Lower-case `0x` + 16 hex digits; raises PlanError naming `where` otherwise."""
    if not isinstance(guid, str) or not _GUID.match(guid):
        raise PlanError(where, guid, "is not a GUID",
                        "write 0x followed by 16 hex digits, as `ibstat` prints it")
    return guid.lower()


def to_int(guid: str) -> int:
    return int(guid, 16)


def fmt(value: int) -> str:
    return f"0x{value:016x}"


def is_placeholder(guid: str) -> bool:
    return (to_int(guid) >> 48) in KIND_PREFIX.values()


def _hash48(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=6).digest(), "big")


def placeholders(kind: str, keys: Iterable[str], taken: set[int]) -> dict[str, str]:
    """Deterministic placeholder GUIDs for `keys`, avoiding `taken` (updated in place).

    Port GUIDs (hca, sm) are odd and also reserve value - 1 (the simulator's node GUID).
    """
    prefix = KIND_PREFIX[kind] << 48
    port = kind != "switch"
    out: dict[str, str] = {}
    for key in sorted(set(keys)):
        low = _hash48(key)
        low = (low | 1) if port else low
        while True:
            value = prefix | (low & 0xFFFF_FFFF_FFFF)
            if value not in taken and not (port and value - 1 in taken):
                break
            low += 2
        taken.add(value)
        if port:
            taken.add(value - 1)
        out[key] = fmt(value)
    return out
