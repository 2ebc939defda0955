"""ibnetdiscover topology format: render the plan (ibsim loads it as is) and parse dumps.

ibsim 0.10 rules that shape the rendering (see shared ibsim.md):
* a CA's PortGUID is computed as NodeGUID + 1, so the simulated CA node GUID is the planned
  port GUID - 1 (a real ConnectX-7 has port GUID == node GUID; the verifier keys CAs by port
  GUID, which is equal in both worlds);
* NDR is unknown to it: links are written as 4xHDR unless another rate is asked for;
* `=` after a remote id is read as a port option, lines are cut at 255 characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import guids as G
from .model import FabricPlan

SWITCH_DEVID = "0xd2f0"  # Quantum-2 (QM9700)
HCA_DEVID = "0x1021"  # ConnectX-7
VENDID = "0x2c9"


def switch_desc(name: str, model: str) -> str:
    return f"MF0;{name}:M{model}/U1"


def hca_desc(host: str, hca: str) -> str:
    """What rdma-ndd sets by default ("%h %d"): hostname and device."""
    return f"{host} {hca}"


def _nid(prefix: str, guid: int) -> str:
    return f"{prefix}-{guid:016x}"


def render_topology_net(plan: FabricPlan, rate: str = "4xHDR") -> str:
    """The plan in ibnetdiscover format. SM hosts come first: ibsim attaches clients (and so
    the simulated SM) to the first node unless SIM_HOST says otherwise."""
    sw_id = {s.name: _nid("S", G.to_int(s.guid)) for s in plan.switches}
    sw_desc = {s.name: switch_desc(s.name, s.model) for s in plan.switches}
    ca: dict[str, tuple[str, str, str]] = {}  # host/hca -> (nodeid, port guid hex, desc)
    for n in plan.nodes:
        for r in n.rails:
            pg = G.to_int(r.port_guid)
            ca[f"{n.hostname}/{r.hca}"] = (_nid("H", pg - 1), f"{pg:x}",
                                           hca_desc(n.hostname, r.hca))
    for sm in plan.sm:
        pg = G.to_int(sm.port_guid)
        ca[f"{sm.hostname}/{sm.hca}"] = (_nid("H", pg - 1), f"{pg:x}",
                                         hca_desc(sm.hostname, sm.hca))
    for st in plan.storage:
        pg = G.to_int(st.port_guid)
        ca[f"{st.hostname}/{st.hca}"] = (_nid("H", pg - 1), f"{pg:x}",
                                         hca_desc(st.hostname, st.hca))

    sw_ports: dict[str, list[tuple[int, str]]] = {s.name: [] for s in plan.switches}
    ca_line: dict[str, str] = {}
    for c in plan.cables:
        a, b = c.a, c.b
        if b.hca is None:
            sw_ports[a.device].append(
                (a.port, f'[{a.port}]\t"{sw_id[b.device]}"[{b.port}]\t\t# '
                         f'"{sw_desc[b.device]}" lid 0 {rate}'))
            sw_ports[b.device].append(
                (b.port, f'[{b.port}]\t"{sw_id[a.device]}"[{a.port}]\t\t# '
                         f'"{sw_desc[a.device]}" lid 0 {rate}'))
        else:
            key = f"{b.device}/{b.hca}"
            nid, port_guid, desc = ca[key]
            sw_ports[a.device].append(
                (a.port, f'[{a.port}]\t"{nid}"[1]({port_guid})\t\t# "{desc}" lid 0 {rate}'))
            ca_line[key] = (f'[1]({port_guid})\t"{sw_id[a.device]}"[{a.port}]\t\t# lid 0 lmc 0 '
                            f'"{sw_desc[a.device]}" lid 0 {rate}')

    out = [
        "#",
        f"# Planned fabric: {len(plan.nodes)} GPU nodes, {len(plan.switches)} switches, "
        f"{len(plan.cables)} links ({plan.tiers}-tier fat tree).",
        f"# ibnetdiscover format; loads in ibsim. Links written as {rate}"
        + (" (ibsim 0.10 knows no NDR)." if rate != "4xNDR" else "."),
        "# CA node GUIDs are port GUID - 1 (ibsim derives PortGUID = NodeGUID + 1).",
        "#",
        "",
    ]

    def ca_record(key: str) -> None:
        nid, pg, desc = ca[key]
        node = int(nid[2:], 16)
        out.extend([f"vendid={VENDID}", f"devid={HCA_DEVID}", f"sysimgguid=0x{node:016x}",
                    f"caguid=0x{node:016x}", f'Ca\t1 "{nid}"\t\t# "{desc}"', ca_line[key], ""])

    for sm in plan.sm:
        ca_record(f"{sm.hostname}/{sm.hca}")
    for s in sorted(plan.switches, key=lambda s: (-s.tier, s.name)):
        nid = sw_id[s.name]
        out.extend([f"vendid={VENDID}", f"devid={SWITCH_DEVID}", f"sysimgguid={s.guid}",
                    f"switchguid={s.guid}({s.guid[2:].lstrip('0') or '0'})",
                    f'Switch\t{s.ports} "{nid}"\t\t# "{sw_desc[s.name]}" enhanced port 0 '
                    "lid 0 lmc 0"])
        out.extend(line for _, line in sorted(sw_ports[s.name]))
        out.append("")
    for n in plan.nodes:
        for r in n.rails:
            ca_record(f"{n.hostname}/{r.hca}")
    for st in plan.storage:
        ca_record(f"{st.hostname}/{st.hca}")
    return "\n".join(out)


# ---------------------------------------------------------------- parsing


@dataclass
class TopoNode:
    nodeid: str
    kind: str  # "switch" | "ca" | "router"
    nports: int
    guid: str  # node GUID, 0x + 16 hex
    desc: str
    lid: int | None = None  # switch port 0 / CA port 1 LID
    port_guids: dict[int, str] = field(default_factory=dict)
    port_lids: dict[int, int] = field(default_factory=dict)


@dataclass
class Topology:
    nodes: dict[str, TopoNode]  # nodeid -> node
    links: dict[tuple[str, int], tuple[str, int]]  # both directions
    rates: dict[tuple[str, int], str]  # (nodeid, port) -> "4xNDR" as that end reports it

    def port_guid(self, nodeid: str, port: int = 1) -> str:
        node = self.nodes[nodeid]
        return node.port_guids.get(port, node.guid)

    def link_set(self) -> set[tuple[tuple[str, int], tuple[str, int]]]:
        return {(x, y) if x <= y else (y, x) for x, y in self.links.items()}


_HEADER = re.compile(r'^(Switch|Ca|Hca|Rt)\s+(\d+)\s+"([^"]+)"\s*(?:#\s*"([^"]*)"(.*))?$')
_PORT = re.compile(
    r'^\[(\d+)\](?:\[ext \d+\])?(?:\(([0-9a-fA-F]+)\))?\s+"([^"]+)"\[(\d+)\]'
    r'(?:\[ext \d+\])?(?:\(([0-9a-fA-F]+)\))?\s*(?:#\s*(.*))?$'
)
_GUIDSET = re.compile(r"^(switchguid|caguid|hcaguids|rtguid)=(0x[0-9a-fA-F]+)")
_RATE = re.compile(r"(\d+x[A-Z0-9]+)\s*$")


def parse_ibnetdiscover(text: str) -> Topology:
    """Parse `ibnetdiscover` output (or an ibsim net file without relative GUID directives)."""
    nodes: dict[str, TopoNode] = {}
    links: dict[tuple[str, int], tuple[str, int]] = {}
    rates: dict[tuple[str, int], str] = {}
    remote_port_guid: dict[str, str] = {}
    pending_guid: str | None = None
    cur: TopoNode | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            cur = None if not line else cur
            continue
        m = _GUIDSET.match(line)
        if m:
            pending_guid = G.fmt(int(m.group(2), 16))
            cur = None
            continue
        m = _HEADER.match(line)
        if m:
            kind = {"Switch": "switch", "Ca": "ca", "Hca": "ca", "Rt": "router"}[m.group(1)]
            nodeid = m.group(3)
            guid = pending_guid or _guid_from_id(nodeid)
            pending_guid = None
            desc = m.group(4) if m.group(4) is not None else nodeid
            cur = TopoNode(nodeid, kind, int(m.group(2)), guid, desc)
            lid = re.search(r"\blid (\d+)", m.group(5) or "")
            if kind == "switch" and lid:
                cur.lid = int(lid.group(1))
            nodes[nodeid] = cur
            continue
        m = _PORT.match(line)
        if m and cur is not None:
            lp, lguid, rid, rp, rguid, comment = m.groups()
            a, b = (cur.nodeid, int(lp)), (rid, int(rp))
            links[a] = b
            links[b] = a
            if lguid:
                cur.port_guids[int(lp)] = G.fmt(int(lguid, 16))
            if rguid:
                remote_port_guid[f"{rid}\0{rp}"] = G.fmt(int(rguid, 16))
            comment = comment or ""
            if cur.kind != "switch":
                lid = re.match(r"lid (\d+)", comment)
                if lid:
                    cur.port_lids[int(lp)] = int(lid.group(1))
                    if int(lp) == 1 or cur.lid is None:
                        cur.lid = int(lid.group(1))
            rate = _RATE.search(comment)
            if rate:
                rates[a] = rate.group(1)  # as seen from this end
            continue
        cur = None  # any other line ends a record
    for key, pg in remote_port_guid.items():
        rid, rp = key.split("\0")
        node = nodes.get(rid)
        if node is not None and node.kind != "switch":
            node.port_guids.setdefault(int(rp), pg)
    # Drop half-links to nodes that are not in the file (e.g. a partial dump).
    links = {a: b for a, b in links.items() if a[0] in nodes and b[0] in nodes}
    return Topology(nodes, links, rates)


def _guid_from_id(nodeid: str) -> str:
    m = re.match(r"^[SHR]-([0-9a-fA-F]{1,16})$", nodeid)
    return G.fmt(int(m.group(1), 16)) if m else nodeid
