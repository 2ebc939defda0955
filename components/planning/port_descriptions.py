"""The switch port description: what a technician reads on a QM9700 port, written and parsed
here only (pure).

A cabled port's description names its peer and the cable, e.g.
`gpu-node-03 rail 2 (mlx5_4) [dac in-rack]` (a compute HCA), `spine-01 port 7 [aoc …]` (another
switch) or `sm-01 mlx5_0 […]` (a subnet-manager host's HCA). The switch config states every port
as one MLNX-OS line, `interface ib 1/<port> description "<description>"`, or clears a free one.
The fabric's published facts and the preview's runbook read them back with the parsers below.
"""

from __future__ import annotations

import re
from functools import lru_cache

_PORT_LINE = re.compile(r'^interface ib 1/(\d+) description "(.*)"\s*$')
_HCA_PEER = re.compile(r"^(\S+) rail (\d+) \((\S+)\)$")
_SWITCH_PEER = re.compile(r"^(\S+) port (\d+)$")


def peer(device: str, port: int, rail: int | None = None, hca: str | None = None) -> str:
    """The far end of a cable: a switch port, a compute HCA (with its rail) or a host HCA."""
    if hca is None:
        return f"{device} port {port}"
    if rail is None:
        return f"{device} {hca}"
    return f"{device} rail {rail} ({hca})"


def description(peer: str, media: str, length_class: str) -> str:
    return f"{peer} [{media} {length_class}]"


def port_line(port: int, description: str | None) -> str:
    """The MLNX-OS command for one port: its description, or (free port) its clearing."""
    if description is None:
        return f"no interface ib 1/{port} description"
    return f'interface ib 1/{port} description "{description}"'


def parse_port_line(line: str) -> tuple[int, str] | None:
    """(port, description) of a description command; None for any other line."""
    m = _PORT_LINE.match(line.strip())
    return (int(m.group(1)), m.group(2)) if m else None


def port_descriptions(cli: str) -> dict[int, str]:
    """port -> description, from a switch's MLNX-OS commands."""
    return dict(p for line in cli.splitlines() if (p := parse_port_line(line)) is not None)


def split_cable(description: str) -> tuple[str, str | None]:
    """(peer, cable) of a description; the cable is None when it names none."""
    if description.endswith("]") and " [" in description:
        peer, _, cable = description[:-1].partition(" [")
        return peer, cable
    return description, None


def hca_peer(description: str) -> tuple[str, int, str] | None:
    """(host, rail, hca) when the port is cabled to a compute HCA."""
    m = _HCA_PEER.match(split_cable(description)[0])
    return (m.group(1), int(m.group(2)), m.group(3)) if m else None


@lru_cache(maxsize=65536)  # a large fabric's runbook reads each cable several times
def switch_peer(description: str) -> tuple[str, int] | None:
    """(switch, port) when the port is cabled to another switch."""
    m = _SWITCH_PEER.match(split_cable(description)[0])
    return (m.group(1), int(m.group(2))) if m else None
