"""Switch-side configuration (pure): MLNX-OS CLI commands per QM9700.

A switch's whole port map is one text, so one resource per switch carries it: a moved cable
shows in the preview as a changed line on exactly the two switches it touches.
"""

from __future__ import annotations

from components.planning.fabric.model import FabricPlan


def port_maps(plan: FabricPlan) -> dict[str, dict[int, str]]:
    """switch -> port -> what the plan cables to it and with what, e.g.
    'gpu-node-03 rail 2 (mlx5_4) [dac in-rack]': a technician reads it on the switch, and the
    preview's runbook reads it from the diff."""
    maps: dict[str, dict[int, str]] = {s.name: {} for s in plan.switches}
    for cable in plan.cables:
        for here, there in ((cable.a, cable.b), (cable.b, cable.a)):
            if here.is_switch:
                maps[here.device][here.port] = (f"{there.label()} "
                                                f"[{cable.media} {cable.length_class}]")
    return {name: dict(sorted(ports.items())) for name, ports in sorted(maps.items())}


def switch_cli(name: str, ports: dict[int, str], host_sm: bool) -> str:
    """Idempotent MLNX-OS commands: setting a value that is already set is a no-op."""
    lines = ["enable", "configure terminal", f"hostname {name}"]
    if host_sm:
        # The host subnet managers (master + standby) own the fabric; a switch SM would compete.
        lines.append("no ib sm")
    for port, peer in ports.items():
        lines.append(f'interface ib 1/{port} description "{peer}"')
    lines += ["configuration write", "exit"]
    return "\n".join(lines) + "\n"
