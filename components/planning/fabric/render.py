"""Everything the fabric layer writes under build/<stack>/fabric/, as {relative path: text}."""

from __future__ import annotations

import csv
import io
from typing import Any

from .bom import cable_parts, cage_use, physical_cables
from .diagram import render_svg
from .ibnet import render_topology_net
from .model import FabricPlan
from .sm_files import (
    compute_port_guids,
    guid_list,
    io_port_guids,
    render_default_file,
    render_node_name_map,
    render_opensm_conf,
    render_partitions,
    top_tier_guids,
)


def _csv(header: list[str], rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def render_cabling_csv(plan: FabricPlan) -> str:
    """One row per 400G link, switch side first: what a technician cables and labels. The
    cage columns say where the link sits (a QM9700 cage holds ports 2c-1 and 2c; a DGX H100
    cage is OSFP1-4 with ports P1/P2); `cable` is the part carrying the link (one fiber per
    link, or a DAC shared by the links of its cages) and the module columns the transceiver in
    each cage, empty where the cage holds a DAC end (bom.py)."""
    rows = []
    for c, p in zip(plan.cables, cable_parts(plan.cables), strict=True):
        rows.append([c.id, c.kind, c.a.device, c.a.port, c.a_rack, c.b.device,
                     c.b.port if c.b.hca is None else "",
                     "" if c.b.rail is None else c.b.rail, c.b.hca or "", c.b_rack,
                     c.media, c.length_class, p.a_cage.label(p.a_pos), p.a_module,
                     p.b_cage.label(p.b_pos), p.b_module, p.cable])
    return _csv(["cable_id", "kind", "a_switch", "a_port", "a_rack", "b_device", "b_port",
                 "b_rail", "b_hca", "b_rack", "media", "length_class", "a_cage", "a_module",
                 "b_cage", "b_module", "cable"], rows)


def render_bom_csv(plan: FabricPlan) -> str:
    return _csv(["category", "item", "part", "quantity", "note"],
                [[b.category, b.item, b.part, b.quantity, b.note] for b in plan.bom])


def _cages(plan: FabricPlan) -> dict[str, int]:
    use = cage_use(plan.cables)
    return {"dgx": use.dgx_cages, "adapter": use.adapter_ports, "switch": use.switch_cages,
            "fibers": use.fibers, "dacs": use.physical_cables - use.fibers}


def summary(plan: FabricPlan) -> dict[str, Any]:
    """Key numbers for the preview, outputs and README (JSON-friendly)."""
    return {
        "tiers": plan.tiers,
        "nodes": len(plan.nodes),
        "hca_ports": plan.hca_ports,
        "switches": {r: plan.count(r) for r in ("leaf", "spine", "core")},
        "rails_per_leaf": {str(k): v for k, v in plan.rails_per_leaf.items()},
        "links": {k: len(plan.cables_of(k)) for k in ("hca", "sm", "leaf-spine", "spine-core")},
        "bisection_tbps": plan.bisection_tbps,
        "oversubscription": plan.oversubscription_text(),
        "bom": [{"item": b.item, "part": b.part, "quantity": b.quantity} for b in plan.bom],
        "cages": _cages(plan),
        "placeholders": plan.placeholders.message(),
        "warnings": list(plan.warnings),
    }


def render_fabric_files(plan: FabricPlan, prefix: str = "fabric/") -> dict[str, str]:
    """All rendered fabric artifacts, keyed by path relative to build/<stack>/."""
    partitions, _ = render_partitions(plan)
    files = {
        "topology.net": render_topology_net(plan),
        "cabling.csv": render_cabling_csv(plan),
        "bom.csv": render_bom_csv(plan),
        "opensm.conf": render_opensm_conf(plan),
        "partitions.conf": partitions,
        "root_guids.conf": guid_list(top_tier_guids(plan)),
        "cn_guids.conf": guid_list(compute_port_guids(plan)),
        "node-name-map": render_node_name_map(plan),
        "fabric.svg": render_svg(plan),
    }
    if io_port_guids(plan):
        files["io_guids.conf"] = guid_list(io_port_guids(plan))
    for s in plan.sm:
        files[f"sm/{s.hostname}/opensm.conf"] = render_opensm_conf(plan, priority=s.priority)
        files[f"sm/{s.hostname}/opensm.default"] = render_default_file(s.port_guid,
                                                                        s.guid_placeholder)
    return {prefix + k: v for k, v in sorted(files.items())}


def plan_warnings(plan: FabricPlan) -> list[str]:
    """Planner warnings plus those found while rendering (e.g. partition hosts)."""
    return list(plan.warnings) + render_partitions(plan)[1]


def report_lines(plan: FabricPlan) -> list[str]:
    """The fabric as a reviewer reads it in the preview: switches, links, BOM, bandwidth."""
    s = summary(plan)
    sw, links = s["switches"], s["links"]
    if plan.spec.purpose == "storage":
        head = (f"Storage fabric: {s['tiers']}-tier fat tree, {s['nodes']} GPU nodes' "
                f"{s['hca_ports']} storage ports, {len(plan.storage)} storage server ports")
    else:
        head = (f"Fabric: {s['tiers']}-tier fat tree, {s['nodes']} GPU nodes, {s['hca_ports']} "
                "compute HCA ports")
    lines = [
        f"{head}, {sw['leaf']} leaf + {sw['spine']} spine + {sw['core']} core switches",
        f"  links (400G): {links['hca']} HCA, {links['leaf-spine']} leaf-spine, "
        f"{links['spine-core']} spine-core, {links['sm']} subnet-manager; "
        f"{physical_cables(plan.bom)} physical cables",
        f"  bisection bandwidth {s['bisection_tbps']:g} Tb/s, oversubscription "
        f"{s['oversubscription']}",
        "  bill of materials:",
    ]
    lines += [f"    {b['quantity']:>6} x {b['item']} ({b['part']})" for b in s["bom"]]
    cg = s["cages"]
    lines.append(f"  OSFP cages in use: {cg['dgx']} DGX H100 (2 rails each), {cg['switch']} "
                 f"switch (2 ports each), {cg['adapter']} single-port adapters; "
                 f"{cg['fibers']} fibers + {cg['dacs']} DACs")
    lines.append(f"  GUIDs: {s['placeholders']}")
    lines += [f"  warning: {w}" for w in plan_warnings(plan)]
    return lines
