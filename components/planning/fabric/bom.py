"""Cable media, bill of materials and the seeds' estimate check.

Hardware assumptions (NVIDIA LinkX NDR, stated so a buyer can check them):

* QM9700 has 32 OSFP cages, each a twin-port 2 x 400G NDR pair: logical ports 2c-1 and 2c
  share cage c, and one cage holds one module or one copper cable end.
* Hosts use single-port ConnectX-7 OSFP HCAs (HGX H100 PCIe cards). DGX H100's twin-port
  "Cedar" cages would halve the host-side transceiver count; that is not modelled here.
* Copper (DAC, passive, up to about 2-3 m) only inside one rack: a cage whose links all stay
  in the rack is copper, as a twin-port switch-to-switch DAC when both links go to one remote
  cage, or as a 1 x 800G -> 2 x 400G splitter DAC when they go to HCAs. Anything else is
  optical: a twin-port 800G (2 x 400G SR4) transceiver per switch cage, a 400G SR4 one per
  HCA port, one MPO-12/APC multimode fiber per 400G link (lengths come from the site survey).
"""

from __future__ import annotations

from collections.abc import Sequence

from .model import BomLine, Cable, Endpoint, FabricSpec, Media, SeedsCheck, Switch

PARTS = {
    "switch": "MQM9700-NS2F",
    "twin_sr4": "MMA4Z00-NS",
    "sr4_flat": "MMA4Z00-NS400",
    "fiber": "MFP7E10-Nxxx",
    "dac_twin": "MCP4Y10-N00x",
    "dac_split": "MCP7Y00-N00x",
}


def cage(port: int) -> int:
    return (port + 1) // 2


def assign_media(links: Sequence[tuple[Endpoint, Endpoint, str, str]]) -> list[Media]:
    """Media per link (a = switch port, b = switch port or HCA, rack_a, rack_b), decided per
    switch cage (see module doc). Linear in the number of links."""
    keys: list[tuple[tuple[str, int], tuple[str, int] | None]] = []
    remotes: dict[tuple[str, int], set[tuple[str, int] | None]] = {}
    same: dict[tuple[str, int], bool] = {}
    for a, b, ra, rb in links:
        ka = (a.device, (a.port + 1) >> 1)
        kb = (b.device, (b.port + 1) >> 1) if b.hca is None else None
        keys.append((ka, kb))
        in_rack = ra == rb
        remotes.setdefault(ka, set()).add(kb)
        same[ka] = same.get(ka, True) and in_rack
        if kb is not None:
            remotes.setdefault(kb, set()).add(ka)
            same[kb] = same.get(kb, True) and in_rack
    # Copper cage: every link in the rack, and either all to HCAs (splitter) or all to one
    # remote cage (twin-port DAC).
    copper = {k: same[k] and (r == {None} or (len(r) == 1 and None not in r))
              for k, r in remotes.items()}
    return ["dac" if copper[ka] and (kb is None or copper[kb]) else "optical"
            for ka, kb in keys]


def build_bom(switches: Sequence[Switch], cables: Sequence[Cable], spec: FabricSpec
              ) -> tuple[BomLine, ...]:
    lines: list[BomLine] = []
    for role in ("leaf", "spine", "core"):
        n = sum(1 for s in switches if s.role == role)
        if n:
            lines.append(BomLine("switch", f"{spec.switch_model} {role} switch "
                                 f"({spec.radix} x {spec.link_gbps}G)", PARTS["switch"], n))
    host_links = [c for c in cables if c.b.hca is not None]
    if host_links:
        lines.append(BomLine("hca", "ConnectX-7 NDR HCA ports cabled (in the servers)", "-",
                             len(host_links), "compute rails + subnet-manager hosts"))
    fibers: dict[str, int] = {}
    split_cages: set[tuple[str, int]] = set()
    twin_pairs: set[tuple[tuple[str, int], tuple[str, int]]] = set()
    opt_cages: set[tuple[str, int]] = set()
    host_optics = 0
    for c in cables:
        ka = (c.a.device, (c.a.port + 1) >> 1)
        kb = (c.b.device, (c.b.port + 1) >> 1) if c.b.hca is None else None
        if c.media == "optical":
            fibers[c.length_class] = fibers.get(c.length_class, 0) + 1
            opt_cages.add(ka)
            if kb is None:
                host_optics += 1
            else:
                opt_cages.add(kb)
        elif kb is not None:
            twin_pairs.add((ka, kb) if ka < kb else (kb, ka))
        else:
            split_cages.add(ka)
    for length_class in ("in-rack", "cross-rack"):
        if fibers.get(length_class):
            lines.append(BomLine("cable", f"NDR multimode fiber MPO-12/APC, {length_class}",
                                 PARTS["fiber"], fibers[length_class],
                                 "one per 400G optical link; length from the site survey"))
    if twin_pairs:
        lines.append(BomLine("cable", "NDR DAC twin-port 800G OSFP to 800G OSFP, in-rack "
                             "(switch-switch, 2 links)", PARTS["dac_twin"], len(twin_pairs)))
    if split_cages:
        lines.append(BomLine("cable", "NDR DAC splitter 800G OSFP to 2 x 400G OSFP, in-rack "
                             "(switch-HCA)", PARTS["dac_split"], len(split_cages)))
    if opt_cages:
        lines.append(BomLine("transceiver", "OSFP 800G twin-port 2 x 400G SR4 (switch cage, "
                             "finned)", PARTS["twin_sr4"], len(opt_cages),
                             "one per switch cage in use"))
    if host_optics:
        lines.append(BomLine("transceiver", "OSFP 400G SR4 single-port (ConnectX-7, flat top)",
                             PARTS["sr4_flat"], host_optics, "one per optical HCA port"))
    return tuple(lines)


def physical_cables(bom: Sequence[BomLine]) -> int:
    return sum(b.quantity for b in bom if b.category == "cable")


SEED_LEAVES, SEED_SPINES, SEED_CABLES = 2, 2, 80


def seeds_check(switches: Sequence[Switch], cables: Sequence[Cable], bom: Sequence[BomLine]
                ) -> SeedsCheck:
    """The seed document (section 1.3) lists, for 8 nodes: 2 leaf + 2 core QM9700, ~80 cables."""
    hca = sum(1 for c in cables if c.kind == "hca")
    up = sum(1 for c in cables if c.kind in ("leaf-spine", "spine-core"))
    sm = sum(1 for c in cables if c.kind == "sm")
    leaves = sum(1 for s in switches if s.role == "leaf")
    spines = sum(1 for s in switches if s.role != "leaf")
    seed_up = SEED_CABLES - hca
    seed_over = f"{hca}:{seed_up} = {hca / seed_up:g}:1" if seed_up > 0 else "n/a"
    links = hca + up + sm
    if (leaves, spines) == (SEED_LEAVES, SEED_SPINES):
        switch_text = "switch count matches (2 leaf + 2 spine)"
    else:
        switch_text = (f"switches differ: {leaves} leaf + {spines} upper-tier vs the seeds' "
                       f"{SEED_LEAVES} + {SEED_SPINES}")
    verdict = (
        f"{switch_text}; a 1:1 tree needs {hca} HCA links + {up} uplinks"
        + (f" + {sm} SM host links" if sm else "")
        + f" = {links} 400G links ({physical_cables(bom)} physical cables incl. twin/splitter "
        f"DACs), not ~{SEED_CABLES}"
        + (f"; ~{SEED_CABLES} would leave {seed_up} uplinks for {hca} HCA links, "
           f"{seed_over} oversubscribed" if seed_up > 0 else "")
    )
    return SeedsCheck(SEED_LEAVES, SEED_SPINES, SEED_CABLES, leaves, spines, hca, up, sm,
                      physical_cables(bom), seed_over, verdict)
