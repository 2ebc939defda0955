"""Cable work a diff implies, read from the switches' port maps (`<switch>-config`: one
`interface ib 1/<port> description "<peer> [<media> <length>]"` line per cable): cables moved,
pulled, plugged and re-cabled, switches racked and retired, and the subnet managers' hosts
whose cable moves (the standby's first, the master's last)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..conventions import names, subject
from ..conventions import ports as _ports
from ..diff import Change
from ..replacements import sm_roles


@dataclass(frozen=True)
class CableMove:
    switch: str
    port: int
    old: str | None  # what the port was cabled to, None if it was free
    new: str | None  # what it must be cabled to, None if it must be free
    old_cable: str | None
    new_cable: str | None


def _switch(ch: Change) -> str | None:
    """The switch whose port map this change is, if it is one (a switch's command set, in the
    fabric layer)."""
    if ch.type != "command:remote:Command":
        return None
    return subject(ch.name, names().SWITCH_CONFIG, ch.layer)


def cable_moves(changes: Iterable[Change],
                new_inputs: Mapping[str, Mapping[str, Any]] | None = None) -> list[CableMove]:
    """Port changes of every switch; a new switch's whole port map comes from `new_inputs`
    (urn -> inputs of the new rendering)."""
    moves: list[CableMove] = []
    for ch in changes:
        switch = _switch(ch)
        if switch is None:
            continue
        if ch.action == "delete":  # a retired switch: every cable on it is pulled
            moves += _whole_map(switch, "-", str(ch.old_inputs.get("stdin", "")))
            continue
        if ch.action == "create" and new_inputs and ch.urn in new_inputs:
            moves += _whole_map(switch, "+", str(new_inputs[ch.urn].get("stdin", "")))
            continue
        ports: dict[int, dict[str, tuple[str, str | None]]] = {}
        for line in ch.text_diffs.get("stdin", []):
            parsed = _ports().parse_port_line(line[1:]) if line[:1] in ("+", "-") else None
            if parsed:
                ports.setdefault(parsed[0], {})[line[0]] = _ports().split_cable(parsed[1])
        moves += [_move(switch, port, sides.get("-"), sides.get("+"))
                  for port, sides in sorted(ports.items())]
    return _once_per_cable(moves)


def _move(switch: str, port: int, old: tuple[str, str | None] | None,
          new: tuple[str, str | None] | None) -> CableMove:
    return CableMove(switch, port, old and old[0], new and new[0], old and old[1],
                     new and new[1])


@lru_cache(maxsize=4096)
def _whole_map(switch: str, side: str, text: str) -> tuple[CableMove, ...]:
    """Every cable of a switch's port map, all plugged (`+`) or all pulled (`-`); a new
    fabric's maps are read several times per preview (the runbook, the impact)."""
    ports = sorted(dict(parsed for line in text.splitlines()
                        if (parsed := _ports().parse_port_line(line))).items())
    return tuple(_move(switch, port, None if side == "+" else cable,
                       cable if side == "+" else None)
                 for port, cable in ((p, _ports().split_cable(d)) for p, d in ports))


def _once_per_cable(moves: list[CableMove]) -> list[CableMove]:
    """A switch-to-switch cable shows on both switches' port maps: keep it once."""
    seen: set[frozenset[tuple[str, int]]] = set()
    out = []
    for mv in moves:
        peer = _ports().switch_peer(mv.new or mv.old or "")
        if peer:
            key = frozenset({(mv.switch, mv.port), peer})
            if key in seen:
                continue
            seen.add(key)
        out.append(mv)
    return out


def switch_changes(changes: Iterable[Change]) -> dict[str, str]:
    """switch -> the action on its port map (create: a new switch, delete: a retired one)."""
    return {sw: c.action for c in changes if (sw := _switch(c)) is not None}


@dataclass(frozen=True)
class Cabling:
    """A diff's cable work: cables moved between ports (same peer), pulled, plugged, and
    ports whose peer changes (re-cabled)."""

    moved: list[tuple[CableMove, CableMove]]  # (where it is pulled, where it is plugged)
    pulled: list[CableMove]
    plugged: list[CableMove]
    recabled: list[CableMove]

    @property
    def existing_links_moved(self) -> int:
        return len(self.moved) + len(self.recabled)

    @property
    def new_media(self) -> list[str]:
        """The cable each moved link needs where its old one no longer fits (a node moved to
        another rack: in-rack copper becomes cross-rack optics, or the other way)."""
        return [b.new_cable or "cable" for a, b in self.moved if a.old_cable != b.new_cable]


def cabling(moves: list[CableMove]) -> Cabling:
    """A peer unplugged from one port and plugged into another is one cable moving."""
    pulled = {mv.old: mv for mv in moves if mv.old and not mv.new}
    plugged = {mv.new: mv for mv in moves if mv.new and not mv.old}
    moved = sorted(set(pulled) & set(plugged))
    return Cabling(
        moved=[(pulled[p], plugged[p]) for p in moved],
        pulled=[mv for mv in moves if mv.old and not mv.new and mv.old not in moved],
        plugged=[mv for mv in moves if mv.new and not mv.old and mv.new not in moved],
        recabled=[mv for mv in moves if mv.old and mv.new])


def cabling_steps(moves: list[CableMove], switches: Mapping[str, str],
                  roles: Mapping[str, str]) -> list[str]:
    """New switches racked and powered before anything is plugged into them; retired links
    pulled first (freeing ports), then moves (a standby subnet manager's first, the master's
    last, as their own steps say), re-cables and new links; a retired switch goes once its
    cables are out."""
    work = cabling(moves)
    rank = {"standby": 0, "master": 2}

    def order(mv: CableMove) -> int:
        return rank.get(roles.get((mv.old or "").split(" ")[0], ""), 1)
    moved = sorted(work.moved, key=lambda ab: order(ab[0]))
    recabled = sorted(work.recabled, key=order)
    steps = [f"rack and power new switch {sw} (before any cable is plugged into it)"
             for sw, action in sorted(switches.items()) if action == "create"]
    steps += [f"pull   {mv.switch} port {mv.port} <-> {mv.old}  [{mv.old_cable}]"
              for mv in work.pulled]
    steps += [f"move   {a.old}: {a.switch} port {a.port} -> {b.switch} port {b.port}  "
              + (f"[{b.new_cable}]" if a.old_cable == b.new_cable else
                 f"[a new cable: {a.old_cable} -> {b.new_cable}]") for a, b in moved]
    steps += [f"re-cable {mv.switch} port {mv.port}: {mv.old} [{mv.old_cable}] -> {mv.new} "
              f"[{mv.new_cable}]" for mv in recabled]
    steps += [f"plug   {mv.switch} port {mv.port} <-> {mv.new}  [{mv.new_cable}]"
              for mv in work.plugged]
    steps += [f"retire switch {sw} (its cables are out)"
              for sw, action in sorted(switches.items()) if action == "delete"]
    return steps


def sm_cable_steps(moves: list[CableMove],
                   new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Subnet-manager hosts whose cable moves: not Kubernetes nodes (nothing to drain), but the
    fabric's master or standby; the standby's cable first, the master's last."""
    roles = sm_roles(new_inputs)
    peers = {m.split(" ")[0] for mv in moves for m in (mv.old, mv.new) if m}
    master = {h for h, role in roles.items() if role == "master"}
    steps = []
    for h in sorted(peers & set(roles), key=lambda h: (h in master, h)):
        role = "master" if h in master else "standby"
        then = ("move it last, once the standby is back in STANDBY (sminfo): the standby takes "
                "over while it is unplugged" if h in master else
                "move it first, and check `sminfo` shows it STANDBY again before the master's")
        steps.append(f"{h}'s cable moves: it runs the {role} subnet manager (not a Kubernetes "
                     f"node, nothing to drain); {then}")
    return steps
