"""Cable media and bill of materials.

Hardware, as NVIDIA's guides describe it (docs/cabling.md quotes and links them):

* QM9700: 32 OSFP cages, each twin-port 2 x 400G NDR: logical ports 2c-1 and 2c share cage c
  ("each OSFP port consists of 2 logical InfiniBand ports", QM97X0 user manual). A cage holds
  one module or one cable end; modules for the air-cooled switch cages are finned-top (IHS).
* DGX H100: the 8 compute ConnectX-7s (two "Cedar" network modules) leave the system through 4
  twin-port OSFP cages, two ConnectX-7s per cage (DGX H100 user guide, network modules table:
  OSFP1P1 = mlx5_11 / GPU 7, OSFP1P2 = mlx5_6 / GPU 4, ...). These cages take flat-top (RHS)
  twin-port 800G plugs ("800G flat-top, twin-port ... for linking DGX H100 Cedar7 GPU links").
* Subnet-manager hosts, and compute nodes whose HCA names are not the DGX H100's, have
  single-port ConnectX-7 OSFP PCIe adapters: one flat-top single-port 400G plug each.
* Copper (DAC, passive, about 2-3 m) only inside one rack, and only where one cable carries
  every link of the cages at both ends: a twin-port DAC between two twin-port cages whose links
  all go to each other, port 1 to port 1 and port 2 to port 2 (switch-switch MCP4Y10, finned at
  both ends; DGX-switch the MCP4Y10 -FLT variant, flat top on the DGX end), or a splitter DAC
  from a switch cage to single-port adapters (MCP7Y00). No cable splits a DGX cage over two
  switch cages (single-port 400G plugs do not go into twin-port switch cages), and a DGX cage's
  two rails never share a switch cage in the rail-optimized layout (a switch cage pairs one rail
  of two adjacent slots), so every DGX link is optical, in the rack too.
* Optical: one twin-port 2 x 400G SR8 multimode transceiver per twin-port cage (MMA4Z00-NS
  finned in the switch, MMA4Z00-NS-FLT flat-top in the DGX), one single-port 400G SR4 flat-top
  transceiver per adapter (MMA4Z00-NS400), and one straight MPO-12/APC multimode crossover
  fiber (MFP7E10) per 400G link: a twin-port transceiver takes two fibers, which may go to two
  different cages (a DGX cage's two rails go to two rail leaves; a leaf cage's two ports to two
  nodes). Lengths come from the site survey.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, NamedTuple

from .model import BomLine, Cable, Endpoint, FabricSpec, Media, Switch

PARTS = {
    "switch": "MQM9700-NS2F",
    "twin_sr8": "MMA4Z00-NS",  # twin-port 2 x 400G multimode, finned top: switch cages
    "twin_sr8_flat": "MMA4Z00-NS-FLT",  # the same, flat top: DGX H100 cages
    "sr4_flat": "MMA4Z00-NS400",  # single-port 400G multimode, flat top: ConnectX-7 adapters
    "fiber": "MFP7E10-Nxxx",  # straight MPO-12/APC multimode crossover fiber, one per link
    "dac_twin": "MCP4Y10-N00x",  # twin-port to twin-port DAC, finned both ends
    "dac_twin_flat": "MCP4Y10-N00x-FLT",  # the same with a flat-top DGX end
    "dac_split": "MCP7Y00-N00x",  # twin-port switch end to 2 x single-port 400G adapter ends
}

# DGX H100 user guide, network modules table: compute HCA -> (OSFP cage, port in the cage).
DGX_H100_CAGES: Mapping[str, tuple[int, int]] = MappingProxyType({
    "mlx5_11": (1, 1), "mlx5_6": (1, 2),  # GPU 7, GPU 4
    "mlx5_10": (2, 1), "mlx5_9": (2, 2),  # GPU 6, GPU 5
    "mlx5_4": (3, 1), "mlx5_3": (3, 2),  # GPU 2, GPU 1
    "mlx5_5": (4, 1), "mlx5_0": (4, 2),  # GPU 3, GPU 0
})

CageKind = Literal["switch", "dgx", "adapter"]
_MODULE: Mapping[CageKind, str] = MappingProxyType(
    {"switch": PARTS["twin_sr8"], "dgx": PARTS["twin_sr8_flat"], "adapter": PARTS["sr4_flat"]})


class Cage(NamedTuple):
    """One OSFP cage: a QM9700 cage (`number` 1..32), a DGX H100 compute cage (OSFP1..4) or a
    single-port ConnectX-7 adapter (`number` 1, `device` = "<host>/<hca>")."""

    kind: CageKind
    device: str
    number: int

    def label(self, pos: int) -> str:
        if self.kind == "switch":
            return f"cage {self.number} port {pos}"
        if self.kind == "dgx":
            return f"OSFP{self.number}P{pos}"  # as printed on the DGX H100 and in its guide
        return "OSFP (single-port)"


def cage(port: int) -> int:
    return (port + 1) // 2


def dgx_hosts(endpoints: Iterable[Endpoint]) -> frozenset[str]:
    """Compute hosts cabled as DGX H100s: every compute HCA name is one of the DGX H100's
    (each at most once). Others keep single-port adapters."""
    hcas: dict[str, list[str]] = {}
    for e in endpoints:
        if e.hca is not None and e.rail is not None:
            hcas.setdefault(e.device, []).append(e.hca)
    return frozenset(h for h, names in hcas.items()
                     if len(set(names)) == len(names) and all(n in DGX_H100_CAGES for n in names))


def place(e: Endpoint, dgx: frozenset[str]) -> tuple[Cage, int]:
    """The cage an endpoint plugs into and its port (1 or 2) within it."""
    hca = e.hca  # tuple.__new__ below: this runs four times per link
    if hca is None:  # a switch port
        return tuple.__new__(Cage, ("switch", e.device, (e.port + 1) >> 1)), 2 - (e.port & 1)
    if e.rail is not None and e.device in dgx:
        number, pos = DGX_H100_CAGES[hca]
        return tuple.__new__(Cage, ("dgx", e.device, number)), pos
    return tuple.__new__(Cage, ("adapter", f"{e.device}/{hca}", 1)), 1


class LinkParts(NamedTuple):
    """How one 400G link is built: its cable and what sits in the cage at each end (the
    transceiver part; "" where the cage holds a copper cable's end)."""

    a_cage: Cage
    a_pos: int
    b_cage: Cage
    b_pos: int
    media: Media
    cable: str
    a_module: str
    b_module: str


Link = tuple[Endpoint, Endpoint, str, str]  # a = switch port, b, rack of a, rack of b


Placed = tuple[Cage, int, Cage, int]  # a cage, port in it, b cage, port in it


def _place_all(pairs: Sequence[tuple[Endpoint, Endpoint]]) -> list[Placed]:
    dgx = dgx_hosts(b for _, b in pairs)
    return [(*place(a, dgx), *place(b, dgx)) for a, b in pairs]


def _decide(placed: Sequence[Placed], same_rack: Sequence[bool]) -> list[Media]:
    """Media per link, decided per switch-side cage (module doc). Linear in the links."""
    peers: dict[Cage, list[tuple[int, Cage, int]]] = {}
    in_rack: dict[Cage, bool] = {}
    for (ca, pa, cb, pb), same in zip(placed, same_rack, strict=True):
        peers.setdefault(ca, []).append((pa, cb, pb))
        peers.setdefault(cb, []).append((pb, ca, pa))
        in_rack[ca] = in_rack.get(ca, True) and same
        in_rack[cb] = in_rack.get(cb, True) and same

    def copper(c: Cage) -> bool:
        """The switch-side cage `c` holds a DAC end: a straight twin-port DAC to the one cage
        its links go to (whose links all come back to it), or a splitter to adapters."""
        here = peers[c]
        if not in_rack[c]:
            return False
        if all(f.kind == "adapter" for _, f, _ in here):
            return True  # splitter (c is a switch cage: every link has one on its a side)
        d = here[0][1]
        return (d.kind != "adapter" and in_rack[d] and all(f == d for _, f, _ in here)
                and all(f == c for _, f, _ in peers[d]) and all(p == q for p, _, q in here))

    decided: dict[Cage, Media] = {}
    out: list[Media] = []
    for ca, _pa, _cb, _pb in placed:
        media = decided.get(ca)
        if media is None:
            media = decided[ca] = "dac" if copper(ca) else "optical"
        out.append(media)
    return out


def _dac(cb: Cage) -> str:
    return PARTS["dac_split" if cb.kind == "adapter" else "dac_twin_flat" if cb.kind == "dgx"
                 else "dac_twin"]


def _parts(ca: Cage, pa: int, cb: Cage, pb: int, media: Media) -> LinkParts:
    if media == "optical":
        return LinkParts(ca, pa, cb, pb, media, PARTS["fiber"], _MODULE[ca.kind], _MODULE[cb.kind])
    return LinkParts(ca, pa, cb, pb, media, _dac(cb), "", "")


def assign_media(links: Sequence[Link]) -> list[Media]:
    """Media per link (a = switch port, b = switch port or HCA, rack_a, rack_b)."""
    return _decide(_place_all([(a, b) for a, b, _, _ in links]),
                   [ra == rb for _, _, ra, rb in links])


def link_parts(links: Sequence[Link]) -> list[LinkParts]:
    """Cable and modules per link (module doc)."""
    placed = _place_all([(a, b) for a, b, _, _ in links])
    media = _decide(placed, [ra == rb for _, _, ra, rb in links])
    return [_parts(*p, m) for p, m in zip(placed, media, strict=True)]


def cable_parts(cables: Sequence[Cable]) -> list[LinkParts]:
    """Cages, modules and cable of a plan's links (their media as `assign_media` decided)."""
    placed = _place_all([(c.a, c.b) for c in cables])
    return [_parts(*p, c.media) for p, c in zip(placed, cables, strict=True)]


@dataclass(frozen=True, slots=True)
class CageUse:
    """Cages in use and what fills them; every count follows from the links."""

    dgx_cages: int  # DGX H100 compute OSFP cages with at least one link
    adapter_ports: int  # single-port ConnectX-7 adapters cabled (SM hosts, non-DGX nodes)
    switch_cages: int  # QM9700 OSFP cages with at least one link
    switch_optical: int  # ... holding a finned twin-port transceiver
    dgx_optical: int  # DGX cages holding a flat-top twin-port transceiver
    adapter_optical: int  # adapters holding a single-port transceiver
    fibers: int  # one per optical 400G link
    twin_dacs: int  # switch-switch twin-port DACs
    twin_dacs_flat: int  # DGX-switch twin-port DACs (flat-top DGX end)
    splitter_dacs: int  # switch cage to single-port adapters

    @property
    def physical_cables(self) -> int:
        return self.fibers + self.twin_dacs + self.twin_dacs_flat + self.splitter_dacs


def cage_use(cables: Sequence[Cable], placed: Sequence[Placed] | None = None) -> CageUse:
    placed = _place_all([(c.a, c.b) for c in cables]) if placed is None else placed
    used: dict[CageKind, set[Cage]] = {"switch": set(), "dgx": set(), "adapter": set()}
    optical: dict[CageKind, set[Cage]] = {"switch": set(), "dgx": set(), "adapter": set()}
    dacs: dict[str, set[Cage]] = {PARTS["dac_twin"]: set(), PARTS["dac_twin_flat"]: set(),
                                  PARTS["dac_split"]: set()}
    fibers = 0
    for (ca, _pa, cb, _pb), c in zip(placed, cables, strict=True):
        used[ca.kind].add(ca)
        used[cb.kind].add(cb)
        if c.media == "optical":
            fibers += 1
            optical[ca.kind].add(ca)
            optical[cb.kind].add(cb)
        else:
            dacs[_dac(cb)].add(ca)  # one DAC per switch-side (lower) cage
    return CageUse(
        dgx_cages=len(used["dgx"]), adapter_ports=len(used["adapter"]),
        switch_cages=len(used["switch"]), switch_optical=len(optical["switch"]),
        dgx_optical=len(optical["dgx"]), adapter_optical=len(optical["adapter"]), fibers=fibers,
        twin_dacs=len(dacs[PARTS["dac_twin"]]), twin_dacs_flat=len(dacs[PARTS["dac_twin_flat"]]),
        splitter_dacs=len(dacs[PARTS["dac_split"]]))


def build_bom(switches: Sequence[Switch], cables: Sequence[Cable], spec: FabricSpec
              ) -> tuple[BomLine, ...]:
    lines: list[BomLine] = []
    for role in ("leaf", "spine", "core"):
        n = sum(1 for s in switches if s.role == role)
        if n:
            lines.append(BomLine("switch", f"{spec.switch_model} {role} switch ({spec.radix} x "
                                 f"{spec.link_gbps}G, {spec.radix // 2} twin-port OSFP cages)",
                                 PARTS["switch"], n))
    host_links = [c for c in cables if c.b.hca is not None]
    use = cage_use(cables)
    if host_links:
        lines.append(BomLine("hca", "ConnectX-7 NDR HCA ports cabled (in the servers)", "-",
                             len(host_links), "compute rails + subnet-manager hosts"))
    if use.dgx_cages:
        lines.append(BomLine("hca", "DGX H100 compute OSFP cages cabled (twin-port, 2 rails "
                             "each)", "-", use.dgx_cages, "OSFP1-OSFP4 on every DGX H100"))
    fibers: dict[str, int] = {}
    for c in cables:
        if c.media == "optical":
            fibers[c.length_class] = fibers.get(c.length_class, 0) + 1
    for length_class in ("in-rack", "cross-rack"):
        if fibers.get(length_class):
            lines.append(BomLine("cable", f"NDR multimode fiber MPO-12/APC straight, "
                                 f"{length_class}", PARTS["fiber"], fibers[length_class],
                                 "one per 400G optical link; length from the site survey"))
    if use.twin_dacs:
        lines.append(BomLine("cable", "NDR DAC twin-port 800G OSFP to 800G OSFP, finned both "
                             "ends, in-rack (switch-switch, 2 links)", PARTS["dac_twin"],
                             use.twin_dacs))
    if use.twin_dacs_flat:
        lines.append(BomLine("cable", "NDR DAC twin-port 800G OSFP to 800G OSFP, flat top on the "
                             "DGX end, in-rack (DGX-switch, 2 links)", PARTS["dac_twin_flat"],
                             use.twin_dacs_flat))
    if use.splitter_dacs:
        lines.append(BomLine("cable", "NDR DAC splitter twin-port 800G OSFP to 2 x 400G OSFP, "
                             "in-rack (switch-adapter)", PARTS["dac_split"], use.splitter_dacs,
                             "single-port ConnectX-7 adapters (subnet-manager hosts)"))
    if use.switch_optical:
        lines.append(BomLine("transceiver", "OSFP 800G twin-port 2 x 400G SR8 multimode, "
                             "finned top (switch cage)", PARTS["twin_sr8"], use.switch_optical,
                             "one per optical switch cage, two fibers"))
    if use.dgx_optical:
        lines.append(BomLine("transceiver", "OSFP 800G twin-port 2 x 400G SR8 multimode, "
                             "flat top (DGX H100 cage)", PARTS["twin_sr8_flat"], use.dgx_optical,
                             "one per DGX cage, two fibers to two switch cages"))
    if use.adapter_optical:
        lines.append(BomLine("transceiver", "OSFP 400G SR4 single-port multimode, flat top "
                             "(ConnectX-7 adapter)", PARTS["sr4_flat"], use.adapter_optical,
                             "one per optical single-port adapter (subnet-manager hosts)"))
    return tuple(lines)


def physical_cables(bom: Sequence[BomLine]) -> int:
    return sum(b.quantity for b in bom if b.category == "cable")
