"""Switch-side configuration (pure): MLNX-OS CLI commands per QM9700.

A switch's whole port map is one text, so one resource per switch carries it: a moved cable
shows in the preview as a changed line on exactly the two switches it touches.
"""

from __future__ import annotations

from components.planning.fabric.model import FabricPlan
from components.planning.port_descriptions import description, port_line


def port_maps(plan: FabricPlan) -> dict[str, dict[int, str]]:
    """switch -> port -> what the plan cables to it and with what, e.g.
    'gpu-node-03 rail 2 (mlx5_4) [dac in-rack]': a technician reads it on the switch, and the
    preview's runbook reads it from the diff."""
    maps: dict[str, dict[int, str]] = {s.name: {} for s in plan.switches}
    for cable in plan.cables:
        for here, there in ((cable.a, cable.b), (cable.b, cable.a)):
            if here.is_switch:
                maps[here.device][here.port] = description(there.label(), cable.media,
                                                           cable.length_class)
    return {name: dict(sorted(ports.items())) for name, ports in sorted(maps.items())}


def switch_cli(name: str, ports: dict[int, str], host_sm: bool, radix: int) -> str:
    """Idempotent MLNX-OS commands: setting a value that is already set is a no-op. Every port
    is stated: a cabled port gets its description, a free one has it cleared (MLNX-OS's `no`
    form), so a cable that moved or went leaves no stale description behind."""
    lines = ["enable", "configure terminal", f"hostname {name}"]
    if host_sm:
        # The host subnet managers (master + standby) own the fabric; a switch SM would compete.
        lines.append("no ib sm")
    lines += [port_line(port, ports.get(port)) for port in range(1, radix + 1)]
    lines += ["configuration write", "exit"]
    return "\n".join(lines) + "\n"
