"""The hard rule: the e2e never starts the engine on a stack that would dial anything outside
this machine. Every endpoint a plan names (each remote command's SSH host and jump host, each
URL a local command reaches, as for the BMCs' Redfish) must be an IPv4 address in 127.0.0.0/8;
a hostname counts as outside, since DNS could send it anywhere."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from ipaddress import ip_address, ip_network
from typing import Any

LOOPBACK = ip_network("127.0.0.0/8")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\[?([^/\s'\"\]:]+)")


@dataclass(frozen=True)
class Endpoint:
    urn: str
    via: str  # what dials it: "ssh", "ssh proxy", "url"
    address: str


def endpoints(plan: Mapping[str, Any]) -> Iterator[Endpoint]:
    """Every endpoint the plan's resources dial, in plan order."""
    for r in plan["resources"]:
        inputs = r.get("inputs") or {}
        if r["type"] == "command:remote:Command":
            conn = inputs.get("connection") or {}
            if isinstance(conn.get("host"), str):
                yield Endpoint(r["urn"], "ssh", conn["host"])
            proxy = conn.get("proxy") or {}
            if isinstance(proxy, Mapping) and isinstance(proxy.get("host"), str):
                yield Endpoint(r["urn"], "ssh proxy", proxy["host"])
        elif r["type"] == "command:local:Command":
            for key in ("create", "update", "delete"):
                if isinstance(inputs.get(key), str):
                    for host in _URL.findall(inputs[key]):
                        yield Endpoint(r["urn"], "url", host)


def is_local(address: str) -> bool:
    try:
        return ip_address(address) in LOOPBACK
    except ValueError:
        return False


def outside(plan: Mapping[str, Any]) -> list[Endpoint]:
    """The endpoints that are not on this machine; the e2e refuses to run while any remain."""
    return [e for e in endpoints(plan) if not is_local(e.address)]
