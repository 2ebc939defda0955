"""fabric.svg: every switch and node for small fabrics, one box per SU / pod at scale.

Hand-written SVG (no dependencies), deterministic: same plan, same bytes.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from .model import FabricPlan

DETAIL_MAX_NODES = 64
DETAIL_MAX_SWITCHES = 64
_RAIL_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f")
_FILL = {"core": "#fde2e2", "spine": "#fff2cc", "leaf": "#dae8fc", "node": "#e1f5e1",
         "sm": "#eeeeee", "su": "#e1f5e1"}


class _Svg:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.w = 0
        self.h = 0

    def box(self, x: int, y: int, w: int, h: int, fill: str, lines: list[str]) -> None:
        self.w, self.h = max(self.w, x + w), max(self.h, y + h)
        self.items.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="4" '
                          f'fill="{fill}" stroke="#333"/>')
        for i, text in enumerate(lines):
            ty = y + 14 + i * 13
            self.items.append(f'<text x="{x + w // 2}" y="{ty}" text-anchor="middle">'
                              f"{escape(text)}</text>")

    def line(self, x1: int, y1: int, x2: int, y2: int, color: str = "#888", width: float = 1,
             label: str = "") -> None:
        self.items.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{color}" '
                          f'stroke-width="{width:g}"/>')
        if label:
            mx, my = (x1 + x2) // 2, (y1 + y2) // 2
            self.items.append(f'<text x="{mx}" y="{my}" class="small">{escape(label)}</text>')

    def text(self, x: int, y: int, s: str) -> None:
        self.w, self.h = max(self.w, x + 6 * len(s)), max(self.h, y + 4)
        self.items.append(f'<text x="{x}" y="{y}">{escape(s)}</text>')

    def render(self, title: str) -> str:
        w, h = self.w + 20, self.h + 20
        return "\n".join([
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
            f'viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">',
            f"<title>{escape(title)}</title>",
            "<style>.small{font-size:9px;fill:#555}</style>",
            f'<rect width="{w}" height="{h}" fill="white"/>',
            *self.items,
            "</svg>",
            "",
        ])


def _row(names: list[str], width: int, gap: int, total: int) -> dict[str, int]:
    """Centre x of each box, the row centred on `total` width."""
    span = len(names) * width + max(0, len(names) - 1) * gap
    x0 = max(10, (total - span) // 2)
    return {n: x0 + i * (width + gap) for i, n in enumerate(names)}


def render_svg(plan: FabricPlan) -> str:
    if len(plan.nodes) <= DETAIL_MAX_NODES and len(plan.switches) <= DETAIL_MAX_SWITCHES:
        return _detailed(plan)
    return _summary(plan)


def _title(plan: FabricPlan) -> str:
    return (f"{len(plan.nodes)} nodes, {plan.hca_ports} HCA ports, {plan.tiers}-tier fat tree "
            f"of {plan.spec.switch_model}: {plan.count('leaf')} leaf, {plan.count('spine')} "
            f"spine, {plan.count('core')} core; bisection {plan.bisection_tbps:g} Tb/s, "
            f"{plan.oversubscription_text()}")


def _detailed(plan: FabricPlan) -> str:
    svg = _Svg()
    bw, bh, gap = 120, 34, 12
    nw = 84
    tiers = sorted({s.tier for s in plan.switches}, reverse=True)
    rows = [[s.name for s in plan.switches if s.tier == t] for t in tiers]
    hosts = [n.hostname for n in plan.nodes]
    total = max([len(r) * (bw + gap) for r in rows] + [len(hosts) * (nw + gap), 400]) + 20
    svg.text(10, 18, _title(plan))
    pos: dict[str, tuple[int, int]] = {}
    y = 40
    for names in rows:
        xs = _row(names, bw, gap, total)
        for n in names:
            s = plan.switch(n)
            rails = ("" if not s.rails else f" rail {s.rails[0]}" if len(s.rails) == 1
                     else f" rails {s.rails[0]}-{s.rails[-1]}")
            lines = [n, s.rack + rails]
            svg.box(xs[n], y, bw, bh, _FILL[s.role], lines)
            pos[n] = (xs[n] + bw // 2, y)
        y += bh + 90
    xs = _row(hosts, nw, gap, total)
    for node in plan.nodes:
        svg.box(xs[node.hostname], y, nw, bh, _FILL["node"],
                [node.hostname, f"SU{node.su} slot {node.slot}"])
        pos[node.hostname] = (xs[node.hostname] + nw // 2, y)
    # switch-switch: one line per pair, labelled with the parallel cable count
    pairs: dict[tuple[str, str], int] = {}
    host_leaf: dict[tuple[str, str], list[int]] = {}
    for c in plan.cables:
        if c.kind in ("leaf-spine", "spine-core"):
            pairs[(c.a.device, c.b.device)] = pairs.get((c.a.device, c.b.device), 0) + 1
        elif c.kind == "hca":
            host_leaf.setdefault((c.b.device, c.a.device), []).append(c.b.rail or 0)
    for (lo, hi), k in sorted(pairs.items()):
        (x1, y1), (x2, y2) = pos[lo], pos[hi]
        svg.line(x1, y1, x2, y2 + bh, width=1 + min(k, 16) / 4, label=f"x{k}")
    for (host, leaf), host_rails in sorted(host_leaf.items()):
        (x1, y1), (x2, y2) = pos[host], pos[leaf]
        color = _RAIL_COLORS[min(host_rails) % len(_RAIL_COLORS)]
        svg.line(x1, y1, x2, y2 + bh, color=color, width=len(host_rails) / 2 + 0.5)
    for i, sm in enumerate(plan.sm):  # SM hosts to the right of their switch
        x, ytop = pos[sm.switch]
        sx, sy = total + 10, 40 + i * (bh + 10)
        svg.box(sx, sy, bw, bh, _FILL["sm"], [f"{sm.hostname} (SM {sm.priority})",
                                               f"{sm.switch}:{sm.port}"])
        svg.line(sx, sy + bh // 2, x, ytop, color="#999")
    legend_y = y + bh + 24
    for r in range(plan.spec.rails_per_node):
        svg.line(10 + r * 70, legend_y, 40 + r * 70, legend_y,
                 color=_RAIL_COLORS[r % len(_RAIL_COLORS)], width=3)
        svg.text(44 + r * 70, legend_y + 4, f"rail {r}")
    return svg.render(_title(plan))


def _summary(plan: FabricPlan) -> str:
    svg = _Svg()
    bw, bh, gap = 150, 48, 14
    svg.text(10, 18, _title(plan))
    sus = plan.su_members()
    leaves_per_su: dict[int, int] = {}
    for s in plan.switches:
        if s.role == "leaf" and s.su is not None:
            leaves_per_su[s.su] = leaves_per_su.get(s.su, 0) + 1
    su_names = [f"SU{su}" for su in sus]
    total = max(len(su_names) * (bw + gap), 600) + 20
    y_top, y_mid, y_su = 40, 40 + bh + 80, 40 + 2 * (bh + 80)
    pos: dict[str, int] = {}
    xs = _row(su_names, bw, gap, total)
    for su, members in sus.items():
        n = f"SU{su}"
        g = plan.rails_per_leaf[su]
        svg.box(xs[n], y_su, bw, bh, _FILL["su"],
                [n, f"{len(members)} nodes", f"{leaves_per_su.get(su, 0)} leaves ({g} rail/leaf)"])
        pos[n] = xs[n] + bw // 2
    if plan.tiers == 2:
        spines = plan.count("spine")
        mx = _row(["spines"], bw, gap, total)["spines"]
        svg.box(mx, y_mid - 40, bw, bh, _FILL["spine"],
                [f"{spines} spines", f"{plan.spec.half // spines} links per leaf"])
        for x in pos.values():
            svg.line(x, y_su, mx + bw // 2, y_mid - 40 + bh)
    else:
        pods = sorted({s.pod for s in plan.switches if s.pod is not None})
        pod_names = [f"pod{p}" for p in pods]
        px = _row(pod_names, bw, gap, total)
        for p in pods:
            n = f"pod{p}"
            spines = sum(1 for s in plan.switches if s.role == "spine" and s.pod == p)
            svg.box(px[n], y_mid, bw, bh, _FILL["spine"], [n, f"{spines} spines"])
        su_pod = {sw.su: sw.pod for sw in plan.switches if sw.role == "leaf"}
        for su in sus:
            pod = su_pod.get(su)
            if pod is not None:
                svg.line(pos[f"SU{su}"], y_su, px[f"pod{pod}"] + bw // 2, y_mid + bh)
        cores = plan.count("core")
        cx = _row(["cores"], bw, gap, total)["cores"]
        svg.box(cx, y_top, bw, bh, _FILL["core"],
                [f"{cores} cores", f"{plan.spec.half} planes x {cores // plan.spec.half}"])
        for n in pod_names:
            svg.line(px[n] + bw // 2, y_mid, cx + bw // 2, y_top + bh)
    return svg.render(_title(plan))
