"""Planned vs discovered fabric: every miswired, missing and extra cable, every missing or
unexpected node, by switch name/port and host/rail.

Nodes are identified by GUID first (switch node GUID, HCA port GUID: equal on real
ConnectX-7 and in ibsim), then by node description (`MF0;<switch name>:...`,
`<hostname> <hca>`), so a plan whose GUIDs are still placeholders can be checked against a
fabric whose switches and hosts carry their planned names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from .guids import KIND_PREFIX
from .ibnet import Topology, parse_ibnetdiscover, render_topology_net
from .model import FabricPlan
from .sm_files import render_node_name_map

Kind = Literal["MISWIRE", "MISSING_CABLE", "EXTRA_CABLE", "MISSING_NODE", "UNEXPECTED_NODE",
               "GUID", "RATE"]
_ORDER = {"MISSING_NODE": 0, "UNEXPECTED_NODE": 1, "GUID": 2, "MISWIRE": 3, "MISSING_CABLE": 4,
          "EXTRA_CABLE": 5, "RATE": 6}

End = tuple[str, int]  # (identity, port)


@dataclass(frozen=True)
class Finding:
    kind: Kind
    where: str  # switch/port or host/rail the technician goes to
    expected: str
    found: str

    def text(self) -> str:
        return f"{self.kind:<15} {self.where}: found {self.found}; plan: {self.expected}"


@dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...]
    planned_links: int
    discovered_links: int
    planned_nodes: int
    discovered_nodes: int

    @property
    def ok(self) -> bool:
        return not self.findings

    def count(self, kind: Kind) -> int:
        return sum(1 for f in self.findings if f.kind == kind)

    def text(self) -> str:
        head = (f"planned {self.planned_nodes} InfiniBand nodes (HCAs and switches) / "
                f"{self.planned_links} links, discovered {self.discovered_nodes} nodes / "
                f"{self.discovered_links} links: ")
        if self.ok:
            return head + "fabric matches the plan\n"
        kinds = sorted({f.kind for f in self.findings}, key=_ORDER.__getitem__)
        head += ", ".join(f"{self.count(k)} {k}" for k in kinds)
        return "\n".join([head] + [f.text() for f in self.findings]) + "\n"


def is_placeholder(guid: str) -> bool:
    """A planned GUID the planner made up (locally administered space, guids.py), not one
    read from the hardware: a discovered GUID cannot be compared with it."""
    return int(guid, 16) >> 48 in KIND_PREFIX.values()


def _natural(text: str) -> tuple[tuple[int, str], ...]:
    """Sort key: "port 9" before "port 10"."""
    return tuple((int(p), "") if p.isdigit() else (0, p) for p in re.split(r"(\d+)", text))


def _switch_name(desc: str) -> str:
    m = re.match(r"^MF0;([^:]+):", desc)
    return m.group(1) if m else desc


def parse_name_map(text: str) -> dict[str, str]:
    """node-name-map lines `0x<guid> "name"` -> {guid: name}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r'^\s*(0x[0-9a-fA-F]+)\s+"([^"]*)"', line)
        if m:
            out[f"0x{int(m.group(1), 16):016x}"] = m.group(2)
    return out


class _Side:
    """One topology in identity space: identity = switch name or "host hca"."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.ident: dict[str, str] = {}  # nodeid -> identity

    def key_guid(self, nodeid: str) -> str:
        node = self.topo.nodes[nodeid]
        return node.guid if node.kind == "switch" else self.topo.port_guid(nodeid, 1)

    def natural(self, nodeid: str) -> str:
        node = self.topo.nodes[nodeid]
        return _switch_name(node.desc) if node.kind == "switch" else node.desc


def compare(expected: Topology, discovered: Topology, names: Mapping[str, str] | None = None,
            rate: str | None = None) -> Report:
    """Compare topologies. `names` (node-name-map) labels HCAs with their rail; `rate` (e.g.
    "4xNDR") also reports links that trained at another width/speed."""
    names = names or {}
    exp, dis = _Side(expected), _Side(discovered)
    match = _match_nodes(exp, dis)
    label = _labeler(expected, match.by_ident, names)
    e_links, d_links = _ends(exp, expected), _ends(dis, discovered)
    findings: list[Finding] = []

    missing_nodes = sorted(set(expected.nodes) - match.matched, key=lambda n: exp.ident[n])
    missing_idents = {exp.ident[n] for n in missing_nodes}
    findings += _missing_node_findings(missing_nodes, exp, expected, e_links, label)
    findings += _guid_findings(match.replaced, exp, dis, label)
    findings += _unexpected_node_findings(match.unexpected, dis)
    findings += _discovered_cable_findings(e_links, d_links, expected, dis, match.by_ident,
                                           label, rate)
    findings += _missing_cable_findings(e_links, d_links, missing_idents, expected,
                                        match.by_ident, label)

    findings.sort(key=lambda f: (_ORDER[f.kind], _natural(f.where), _natural(f.found)))
    return Report(tuple(findings), len(e_links) // 2, len(d_links) // 2, len(expected.nodes),
                  len(discovered.nodes))


Labeler = Callable[..., str]


@dataclass(frozen=True)
class _Match:
    """How the discovered nodes map onto the planned ones (the identities are on the sides)."""
    by_ident: dict[str, str]  # planned identity -> planned nodeid
    matched: set[str]  # planned nodeids found in the fabric
    unexpected: list[str]  # discovered nodeids the plan does not have
    replaced: list[tuple[str, str]]  # (planned nodeid, discovered nodeid): a new GUID


def _match_nodes(exp: _Side, dis: _Side) -> _Match:
    """Give every planned node its natural identity, and every discovered node the identity of
    the planned node it is (by GUID, else by description) or an unplanned `?` one."""
    for nid in exp.topo.nodes:
        exp.ident[nid] = exp.natural(nid)
    by_ident = {ident: nid for nid, ident in exp.ident.items()}
    matched: set[str] = set()
    unmatched = _match_by_guid(exp, dis, matched)
    unexpected, replaced = _match_by_description(unmatched, exp, dis, by_ident, matched)
    return _Match(by_ident, matched, unexpected, replaced)


def _match_by_guid(exp: _Side, dis: _Side, matched: set[str]) -> list[str]:
    """Match discovered nodes to planned ones by switch node GUID / HCA port GUID, adding the
    planned nodeids to `matched`; returns the discovered nodeids left over."""
    by_guid = {exp.key_guid(nid): nid for nid in exp.topo.nodes}
    unmatched: list[str] = []
    for nid in sorted(dis.topo.nodes):  # GUID first
        hit = by_guid.get(dis.key_guid(nid))
        if hit is not None and hit not in matched:
            dis.ident[nid] = exp.ident[hit]
            matched.add(hit)
        else:
            unmatched.append(nid)
    return unmatched


def _match_by_description(unmatched: list[str], exp: _Side, dis: _Side,
                          by_ident: Mapping[str, str], matched: set[str]
                          ) -> tuple[list[str], list[tuple[str, str]]]:
    """Match the rest by node description (switch name, "host hca") and kind, so placeholder
    GUIDs still match; returns the unexpected discovered nodeids, and the (planned, discovered)
    pairs whose planned GUID was a real one that differs (a replaced HCA or switch)."""
    unexpected: list[str] = []
    replaced: list[tuple[str, str]] = []  # (planned nodeid, discovered nodeid): a new GUID
    for nid in unmatched:  # then the node description, for placeholder GUIDs
        hit = by_ident.get(dis.natural(nid))
        if (hit is not None and hit not in matched
                and exp.topo.nodes[hit].kind == dis.topo.nodes[nid].kind):
            dis.ident[nid] = exp.ident[hit]
            matched.add(hit)
            if not is_placeholder(exp.key_guid(hit)):
                replaced.append((hit, nid))
        else:
            dis.ident[nid] = f"?{dis.natural(nid)} [{dis.key_guid(nid)}]"
            unexpected.append(nid)
    return unexpected, replaced


def _ends(side: _Side, topo: Topology) -> dict[End, End]:
    """The topology's links (both directions) as (identity, port) ends."""
    return {(side.ident[a[0]], a[1]): (side.ident[b[0]], b[1])
            for a, b in topo.links.items()}


def _labeler(expected: Topology, by_ident: Mapping[str, str],
             names: Mapping[str, str]) -> Labeler:
    """How findings name an end: a planned HCA as "host rail N (hca)" from the node-name-map,
    an unplanned node's port as such (when a side is given), anything else "name port N"."""

    def label(ident: str, port: int, side: _Side | None = None) -> str:
        nid = by_ident.get(ident)
        if nid is not None and expected.nodes[nid].kind != "switch":
            pg = expected.port_guid(nid, 1)
            mapped = names.get(pg)
            m = re.match(r"^([^/]+)/rail(\d+)/(.+)$", mapped or "")
            if m:
                return f"{m.group(1)} rail {m.group(2)} ({m.group(3)})"
            return ident
        if nid is None and side is not None and ident.startswith("?"):
            return f"unplanned {ident[1:]} port {port}"
        return f"{ident} port {port}"

    return label


def _unexpected_node_findings(unexpected: list[str], dis: _Side) -> list[Finding]:
    """Discovered nodes the plan does not have, by description and GUID."""
    out: list[Finding] = []
    for nid in unexpected:
        node = dis.topo.nodes[nid]
        out.append(Finding("UNEXPECTED_NODE", f"{dis.natural(nid)} [{dis.key_guid(nid)}]",
                           "not in the plan", f"{node.kind} '{node.desc}'"))
    return out


def _discovered_cable_findings(e_links: Mapping[End, End], d_links: Mapping[End, End],
                               expected: Topology, dis: _Side, by_ident: Mapping[str, str],
                               label: Labeler, rate: str | None) -> list[Finding]:
    """Each discovered cable once: a planned one only when it trained at another rate than
    `rate`, any other as MISWIRE or EXTRA_CABLE, named from the end to walk to first."""
    dis_nid = {ident: nid for nid, ident in dis.ident.items()}
    findings: list[Finding] = []
    seen: set[tuple[End, End]] = set()
    for x, y in sorted(d_links.items()):
        pair = (x, y) if x <= y else (y, x)
        if pair in seen:
            continue
        seen.add(pair)
        if e_links.get(x) == y:
            if rate:
                got = _link_rates(x, y, dis, dis_nid)
                if got - {rate}:
                    findings.append(Finding("RATE", _where(x, y, expected, by_ident, label),
                                            rate, "/".join(sorted(got))))
            continue
        where = _where(x, y, expected, by_ident, label)
        if not where.startswith(f"{x[0]} port {x[1]}"):
            x, y = y, x  # the end to walk to first
        findings.append(_unplanned_cable_finding(x, y, where, e_links, dis, label))
    return findings


def _link_rates(x: End, y: End, dis: _Side, dis_nid: Mapping[str, str]) -> set[str]:
    """The rates (e.g. "4xNDR") the two ends of a discovered cable report, where known."""
    return {r for e in (x, y)
            if (r := dis.topo.rates.get((dis_nid[e[0]], e[1]))) is not None}


def _unplanned_cable_finding(x: End, y: End, where: str, e_links: Mapping[End, End],
                             dis: _Side, label: Labeler) -> Finding:
    """A discovered cable the plan lacks: EXTRA_CABLE when the plan leaves both its ports
    empty, else MISWIRE with what the plan puts on each port (or that it leaves it unused)."""
    px, py = e_links.get(x), e_links.get(y)
    if px is None and py is None:
        return Finding("EXTRA_CABLE", where, "no cable on these ports",
                       f"{label(*x, dis)} <-> {label(*y, dis)}")
    plan_txt = "; ".join(
        f"{label(*e)} <-> {label(*p)}" for e, p in ((x, px), (y, py)) if p is not None)
    plan_txt += "".join(f"; {label(*e, dis)} unused" for e, p in ((x, px), (y, py))
                        if p is None)
    return Finding("MISWIRE", where, plan_txt, f"{label(*x, dis)} <-> {label(*y, dis)}")


def _missing_cable_findings(e_links: Mapping[End, End], d_links: Mapping[End, End],
                            missing_idents: set[str], expected: Topology,
                            by_ident: Mapping[str, str], label: Labeler) -> list[Finding]:
    """Planned cables not discovered, except those already reported with a missing node or
    (a port in use elsewhere) as MISWIRE."""
    findings: list[Finding] = []
    seen: set[tuple[End, End]] = set()
    for x, y in sorted(e_links.items()):
        pair = (x, y) if x <= y else (y, x)
        if pair in seen or d_links.get(x) == y:
            continue
        seen.add(pair)
        if x[0] in missing_idents or y[0] in missing_idents:
            continue  # reported with the missing node
        if x in d_links or y in d_links:
            continue  # a port of this cable is in use elsewhere: reported as MISWIRE
        findings.append(Finding("MISSING_CABLE", _where(x, y, expected, by_ident, label),
                                f"{label(*x)} <-> {label(*y)}", "no link"))
    return findings


def _where(x: End, y: End, expected: Topology, by_ident: Mapping[str, str],
           label: Labeler) -> str:
    """The switch port to walk to (the lower-tier one, by name, when both are switches)."""
    sw = [e for e in (x, y)
          if e[0] in by_ident and expected.nodes[by_ident[e[0]]].kind == "switch"]
    if not sw:
        return label(*x)
    tier = {"leaf": 0, "spine": 1, "core": 2}
    low = min(sw, key=lambda e: (tier.get(e[0].split("-")[0], 3), e))
    return f"{low[0]} port {low[1]}"


def _guid_findings(replaced: list[tuple[str, str]], exp: _Side, dis: _Side,
                   label: Labeler) -> list[Finding]:
    """A replaced HCA or switch, found by its name: the plan's (real) GUID is stale, and the
    SM files built from it (root GUIDs, partitions) with it."""
    out = []
    for hit, nid in replaced:
        ident, found = exp.ident[hit], dis.key_guid(nid)
        if exp.topo.nodes[hit].kind == "switch":
            where, fix = ident, f"set fabric.switchGuids.{ident} (or the inventory) to {found}"
        else:
            where = label(ident, 1)
            fix = (f"set the inventory's portGuid of {where.split(' (')[0]} to {found}"
                   if " rail " in where else f"set the port GUID of {ident} to {found}")
        out.append(Finding("GUID", where, f"GUID {exp.key_guid(hit)}",
                           f"GUID {found} (replaced?); {fix}, then preview and apply (the SM "
                           "files list GUIDs)"))
    return out


def _missing_node_findings(missing: list[str], exp: _Side, expected: Topology,
                           e_links: Mapping[End, End], label: Labeler) -> list[Finding]:
    out: list[Finding] = []
    hosts: dict[str, list[str]] = {}
    for nid in missing:
        node = expected.nodes[nid]
        if node.kind == "switch":
            ports = sorted(p for (i, p) in e_links if i == exp.ident[nid])
            out.append(Finding("MISSING_NODE", exp.ident[nid], f"switch with {len(ports)} cables",
                               "not discovered (powered off, or every cable to it down)"))
        else:
            hosts.setdefault(node.desc.split(" ")[0], []).append(nid)
    for host, nids in sorted(hosts.items()):
        total = sum(1 for n in expected.nodes.values()
                    if n.kind != "switch" and n.desc.split(" ")[0] == host)
        where_parts = []
        for nid in sorted(nids, key=lambda n: exp.ident[n]):
            ident = exp.ident[nid]
            peer = e_links.get((ident, 1))
            where_parts.append(f"{label(ident, 1)} on {label(*peer)}" if peer else
                               label(ident, 1))
        what = ("host down or not cabled" if len(nids) == total else
                "HCA down or cable unplugged")
        out.append(Finding("MISSING_NODE", host, "; ".join(where_parts),
                           f"{len(nids)} of {total} HCA ports not discovered ({what})"))
    return out


def verify_plan(plan: FabricPlan, discovered_text: str, rate: str | None = None) -> Report:
    """Compare a plan with `ibnetdiscover` output."""
    expected = parse_ibnetdiscover(render_topology_net(plan))
    return compare(expected, parse_ibnetdiscover(discovered_text),
                   parse_name_map(render_node_name_map(plan)), rate)


def verify_files(topology_text: str, discovered_text: str, name_map_text: str = "",
                 rate: str | None = None) -> Report:
    """Compare a rendered topology.net (+ node-name-map) with `ibnetdiscover` output."""
    return compare(parse_ibnetdiscover(topology_text), parse_ibnetdiscover(discovered_text),
                   parse_name_map(name_map_text), rate)
