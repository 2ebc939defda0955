"""Rail-optimized, non-blocking (1:1) fat-tree planner for QM9700-class switches.

Layout (radix k = 64, half = k/2 = 32 ports down and 32 up on every non-top switch):

* Scalable unit (SU): up to 32 nodes at fixed slots 0..31. Rail r of every node in an SU
  lands on the leaf of that SU carrying rail r.
* Rails per leaf g: the largest divisor of the rail count with g <= rails/2 (at least two
  leaves per SU, so one leaf failure never takes a node off the fabric) and g x slots <= 32,
  where slots = highest used slot + 1 in that SU, plus one in the first SU when there are
  subnet-manager hosts (their slot, below). Full SU: g = 1 (one leaf per rail); the 8-node
  prod SU with its SM slot: g = 2 (four leaves of 2 rails x 16 slots). Each rail of a leaf owns
  a block of span = 32/g ports: leaf port = 1 + (rail mod g) x span + slot. A node's ports
  therefore only depend on its own SU, slot and rail; a new node in an SU only changes the
  layout when it raises the SU's slot count past 32/g (then the SU is re-grouped, visibly, in
  the preview), which `fabric.railsPerLeaf` pinned to the site's final size rules out.
* Every leaf has 32 uplinks (ports 33..64) whatever its fill, so filling an SU never touches
  an uplink and every leaf is 1:1.
* Two tiers (up to 64 leaves = 2048 HCA ports = 256 nodes): S spines, the fewest divisor of
  32 with S >= 2 (redundancy) and leaves x 32/S <= 64; p = 32/S parallel cables per
  leaf-spine pair; leaf uplink u goes to spine u // p; spine port = 1 + leaf_ordinal x p + k.
* Three tiers (more leaves): pods of 32/rails SUs (4 SUs = 128 nodes for 8 rails). A pod has
  32 spines; leaf uplink u goes to pod spine u (one cable each). Leaf position in the pod =
  SU-in-pod x rails + rail group, spine down port = 1 + position. Spine j of every pod
  (ports 33..64 up) connects to the c cores of plane j, c = the fewest divisor of 32 with
  c x 64 >= pods x 32; q = 32/c cables per spine-core pair; core port = 1 + (pod-1) x q + k.
  1024 nodes: 8 pods x (32 leaves + 32 spines) + 32 planes x 4 cores = 128 cores.
* Subnet-manager host HCAs hang off leaves of the first SU, never a spine or core: ftree
  programs no route between its root switches, so an SM on a root could not reach the other
  roots by LID. They take spare leaf down ports beyond g x span, else the slot the first SU
  keeps for them (the last of each leaf's span, as DGX SuperPOD keeps a slot for UFM), so
  nodes added to the SU never take it, and a new SU never moves them (the first SU is the
  one that never changes as a site grows). Master and standby land on different leaves. ftree
  treats them as non-compute (they are absent from cn_guids).
* Storage server ports (fabric.storageServers) take the first SU's spare ports the same way,
  after the subnet managers, a server's ports on different leaves; I/O nodes to ftree too.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from . import guids as G
from .bom import assign_media, build_bom
from .model import (
    Cable,
    CableKind,
    Endpoint,
    FabricNode,
    FabricPlan,
    FabricSpec,
    NodePlacement,
    PlaceholderSummary,
    PlanError,
    RailPlacement,
    SmHost,
    SmPlacement,
    StoragePlacement,
    StorageServer,
    Switch,
)


@dataclass
class _Leaf:
    name: str
    su: int
    group: int
    rails: tuple[int, ...]
    g: int
    span: int
    pod: int | None = None
    position: int = 0  # ordinal (two tiers) or position in the pod (three tiers)
    used_down: set[int] = field(default_factory=set)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _rails_per_leaf(spec: FabricSpec, su: int, slots: int) -> int:
    rails, half = spec.rails_per_node, spec.half
    if spec.rails_per_leaf is not None:
        g = spec.rails_per_leaf
        if rails % g or g * slots > half:
            raise PlanError(
                "fabric.railsPerLeaf", g,
                f"does not fit SU {su}: {slots} slots x {g} rails > {half} down ports, or "
                f"{rails} rails not divisible by it",
                "remove fabric.railsPerLeaf to derive it, or use a divisor of "
                f"{rails} no larger than {half // max(slots, 1)}")
        return g
    cap = max(1, rails // 2)
    fits = [d for d in _divisors(rails) if d <= cap and d * slots <= half]
    return max(fits) if fits else 1


def _leaf_name(su: int, rails: Sequence[int], prefix: str = "") -> str:
    if len(rails) == 1:
        return f"{prefix}leaf-su{su}-r{rails[0]}"
    return f"{prefix}leaf-su{su}-r{rails[0]}-{rails[-1]}"


def kept_slots(spec: FabricSpec, sm_hosts: int) -> int:
    """Slots the first SU keeps beyond its nodes for the subnet managers' and storage servers'
    ports. A compute fabric keeps one for its subnet managers (storage servers on the rails
    share it, with the ports beyond the rail blocks); a storage fabric keeps as many as all
    of them need. One kept slot is one port on every rail of every leaf: `rails_per_node`."""
    if spec.purpose == "storage":
        ports = sum(len(server.port_guids) for server in spec.storage_servers)
        return -(-(sm_hosts + ports) // spec.rails_per_node)
    return 1 if sm_hosts else 0


def _validate(nodes: Sequence[FabricNode], sms: Sequence[SmHost], spec: FabricSpec) -> None:
    if spec.radix < 4 or spec.radix % 2:
        raise PlanError("fabric.radix", spec.radix, "is not an even port count >= 4",
                        "set the switch's port count (QM9700: 64)")
    if not 1 <= spec.nodes_per_su <= spec.half:
        raise PlanError("fabric.nodesPerSu", spec.nodes_per_su, f"is outside 1..{spec.half}",
                        f"use at most {spec.half} nodes per SU (half the switch radix)")
    if not 1 <= spec.rails_per_node <= spec.half:
        raise PlanError("gpuNodes.template.gpu.count", spec.rails_per_node,
                        f"rails (one per GPU) outside 1..{spec.half}",
                        f"use at most {spec.half} GPUs and rails per node")
    seen: dict[str, str] = {}
    slots: dict[tuple[int, int], str] = {}
    for n in nodes:
        where = f"nodes.{n.hostname}"
        if n.hostname in seen:
            raise PlanError(where, n.hostname, "hostname listed twice", "make hostnames unique")
        seen[n.hostname] = where
        if n.su < 1:
            raise PlanError(f"{where}.su", n.su, "is below 1", "number SUs from 1")
        if not 0 <= n.slot < spec.nodes_per_su:
            raise PlanError(f"{where}.slot", n.slot, f"is outside 0..{spec.nodes_per_su - 1}",
                            f"start SU {n.su + 1} for more nodes")
        other = slots.setdefault((n.su, n.slot), n.hostname)
        if other != n.hostname:
            raise PlanError(f"{where}.slot", n.slot, f"SU {n.su} slot {n.slot} is already {other}",
                            "give every node its own SU slot")
        rails: set[int] = set()
        hcas: set[str] = set()
        for p in n.ports:
            if not 0 <= p.rail < spec.rails_per_node:
                raise PlanError(f"{where}.rails", p.rail,
                                f"rail outside 0..{spec.rails_per_node - 1}",
                                "number rails from 0, one per GPU")
            if p.rail in rails or p.hca in hcas:
                raise PlanError(f"{where}.rails[{p.rail}]", p.hca, "rail or HCA used twice",
                                "list each rail once with its own HCA")
            rails.add(p.rail)
            hcas.add(p.hca)
    for s in sms:
        if s.hostname in seen:
            raise PlanError("fabric.subnetManagers", s.hostname,
                            "listed twice or also a GPU node",
                            "run each subnet manager on its own non-GPU host")
        seen[s.hostname] = f"subnetManagers.{s.hostname}"
    prios = [s.priority for s in sms]
    if len(set(prios)) != len(prios):
        raise PlanError("fabric.subnetManagers[].priority", prios, "priorities are not distinct",
                        "give the master a higher sm_priority than the standby")


def _rack_resolver(spec: FabricSpec) -> Callable[[str], str]:
    patterns = sorted((k for k in spec.switch_racks if any(c in k for c in "*?[")),
                      key=lambda k: (-len(k), k))

    def rack(name: str) -> str:
        if name in spec.switch_racks:
            return spec.switch_racks[name]
        for pat in patterns:
            if fnmatch.fnmatchcase(name, pat):
                return spec.switch_racks[pat]
        return spec.default_switch_rack

    return rack


class _Wiring:
    """Switch-to-switch wiring state; `use` guards the one-cable-per-port invariant."""

    def __init__(self, spec: FabricSpec) -> None:
        self.spec = spec
        self.switches: list[tuple[str, str, int, int | None]] = []  # name, role, tier, pod
        self.cables: list[tuple[Endpoint, Endpoint, CableKind]] = []
        self.used: dict[str, set[int]] = {}
        self.top: list[str] = []

    def use(self, name: str, port: int) -> None:
        ports = self.used.setdefault(name, set())
        if port in ports or not 1 <= port <= self.spec.radix:
            raise AssertionError(f"planner bug: {name} port {port} reused or out of range")
        ports.add(port)

    def link(self, a: Endpoint, b: Endpoint, kind: CableKind) -> None:
        self.use(a.device, a.port)
        self.use(b.device, b.port)
        self.cables.append((a, b, kind))

    def two_tier(self, leaves: list[_Leaf]) -> None:
        half, radix, n = self.spec.half, self.spec.radix, len(leaves)
        if self.spec.spines is not None:
            s_count = self.spec.spines
            if half % s_count or n * (half // s_count) > radix:
                raise PlanError(
                    "fabric.spines", s_count,
                    f"spines cannot take {n} leaves x {half} uplinks evenly",
                    f"use a divisor of {half} that is >= {-(-n * half // radix)}, or remove "
                    "fabric.spines to derive it")
        else:  # the fewest spines that keep the leaves 1:1
            s_count = [d for d in _divisors(half)
                       if d >= min(2, half) and n * (half // d) <= radix][0]
        p = half // s_count
        self.top = [f"{self.spec.switch_prefix}spine-{j + 1:02d}" for j in range(s_count)]
        for leaf_i, leaf in enumerate(leaves):
            leaf.position = leaf_i
            for u in range(half):
                j, k = divmod(u, p)
                self.link(Endpoint(leaf.name, half + 1 + u),
                          Endpoint(self.top[j], 1 + leaf_i * p + k), "leaf-spine")
        self.switches += [(sn, "spine", 2, None) for sn in self.top]

    def three_tier(self, leaves: list[_Leaf]) -> None:
        half, radix, rails = self.spec.half, self.spec.radix, self.spec.rails_per_node
        pre = self.spec.switch_prefix
        per_pod = half // rails
        if per_pod < 1:
            raise PlanError("gpuNodes.template.gpu.count", rails,
                            f"rails exceed a {half}-leaf pod", f"use at most {half} rails")
        for leaf in leaves:
            leaf.pod = (leaf.su - 1) // per_pod + 1
            leaf.position = ((leaf.su - 1) % per_pod) * rails + leaf.group
        pods = sorted({leaf.pod for leaf in leaves if leaf.pod is not None})
        max_pod = pods[-1] if pods else 1
        fits = [d for d in _divisors(half) if d * radix >= max_pod * half]
        if not fits:
            raise PlanError("gpuNodes", f"{max_pod} pods",
                            f"exceed a three-tier tree of radix {radix} (at most {radix} "
                            f"pods = {radix * half * half // 2} HCA ports)",
                            "split the site into separate fabrics")
        c = fits[0]
        q = half // c
        for leaf in leaves:
            for u in range(half):
                self.link(Endpoint(leaf.name, half + 1 + u),
                          Endpoint(f"{pre}spine-p{leaf.pod}-{u + 1:02d}", 1 + leaf.position),
                          "leaf-spine")
        self.top = [f"{pre}core-{j * c + i + 1:03d}" for j in range(half) for i in range(c)]
        for pod in pods:
            for j in range(half):
                sn = f"{pre}spine-p{pod}-{j + 1:02d}"
                self.switches.append((sn, "spine", 2, pod))
                for i in range(c):
                    for k in range(q):
                        self.link(Endpoint(sn, half + 1 + i * q + k),
                                  Endpoint(self.top[j * c + i], 1 + (pod - 1) * q + k),
                                  "spine-core")
        self.switches += [(cn, "core", 3, None) for cn in self.top]


def _build_leaves(nodes: Sequence[FabricNode], spec: FabricSpec, kept: int,
                  first_su: int | None = None
                  ) -> tuple[list[_Leaf], dict[tuple[int, int], _Leaf], dict[int, int]]:
    """Leaves per SU. The first SU keeps `kept` slots beyond its nodes (`kept_slots`) for the
    subnet-manager hosts and storage servers (DGX SuperPOD: 4 SUs = 127 DGX and the UFM
    slot): they hang off leaves like any host, so ftree routes them to every switch and to
    each other. `first_su`: the site's first SU, when `nodes` are only some of the site's."""
    su_slots: dict[int, int] = {}
    for n in nodes:
        su_slots[n.su] = max(su_slots.get(n.su, 0), n.slot + 1)
    first = min(su_slots, default=0) if first_su is None else first_su
    if kept and first in su_slots:
        if su_slots[first] + kept > spec.half:
            used, half = su_slots[first], spec.half
            if kept == 1:
                message = (f"fills all {half} slots of SU {first}; its leaves keep one slot "
                           "for the subnet-manager hosts")
                fix = f"leave slot {half - 1} of SU {first} free"
            else:
                message = (f"needs {used} slots of SU {first}, whose leaves keep {kept} of "
                           f"their {half} for the subnet-manager hosts and storage servers")
                fix = f"use only slots 0..{half - kept - 1} of SU {first}"
            raise PlanError(f"gpuNodes (SU {first})", used, message,
                            f"{fix} (DGX SuperPOD: 4 SUs = 127 DGX and the UFM slot), or put "
                            "the node in another SU")
        su_slots[first] += kept
    leaves: list[_Leaf] = []
    leaf_of: dict[tuple[int, int], _Leaf] = {}  # (su, rail) -> leaf
    g_of: dict[int, int] = {}
    for su in sorted(su_slots):
        g = g_of[su] = _rails_per_leaf(spec, su, su_slots[su])
        for gi in range(spec.rails_per_node // g):
            rails = tuple(range(gi * g, gi * g + g))
            leaf = _Leaf(_leaf_name(su, rails, spec.switch_prefix), su, gi, rails, g,
                         spec.half // g)
            leaves.append(leaf)
            for r in rails:
                leaf_of[(su, r)] = leaf
    return leaves, leaf_of, g_of


@dataclass
class _Guids:
    hca: dict[tuple[str, int], tuple[str, bool]]
    sm: dict[str, tuple[str, bool]]
    switch: dict[str, tuple[str, bool]]
    summary: PlaceholderSummary


def _assign_guids(nodes: Sequence[FabricNode], sms: Sequence[SmHost], switch_names: list[str],
                  spec: FabricSpec, warnings: list[str]) -> _Guids:
    """Real GUIDs from the inputs (checked for duplicates), placeholders for the rest."""
    taken: set[int] = set()
    real: dict[str, str] = {}  # guid -> where, for duplicate detection

    def claim(guid: str, where: str) -> str:
        g = G.normalize(guid, where)
        if g in real:
            raise PlanError(where, g, f"GUID already used by {real[g]}",
                            "read each port's GUID again with `ibstat`; GUIDs are unique")
        real[g] = where
        taken.add(G.to_int(g))
        return g

    hca_real = {(n.hostname, hp.rail): claim(hp.port_guid,
                                             f"nodes.{n.hostname}.rails[{hp.rail}].portGuid")
                for n in nodes for hp in n.ports if hp.port_guid}
    sm_real = {s.hostname: claim(s.port_guid, f"subnetManagers.{s.hostname}.portGuid")
               for s in sms if s.port_guid}
    known = set(switch_names)
    sw_real: dict[str, str] = {}
    for name in sorted(spec.switch_guids):
        if name in known:
            sw_real[name] = claim(spec.switch_guids[name], f"fabric.switchGuids.{name}")
        else:
            warnings.append(f"fabric.switchGuids.{name}: no switch of that name in the plan; "
                            "its GUID is ignored")
    ca_real = list(hca_real.values()) + list(sm_real.values())
    for g in ca_real:  # real CA port GUIDs also reserve GUID - 1, the simulator's node GUID
        taken.add(G.to_int(g) - 1)
    hca_ph = G.placeholders("hca", [f"{n.hostname}/{hp.rail}" for n in nodes for hp in n.ports
                                    if (n.hostname, hp.rail) not in hca_real], taken)
    sm_ph = G.placeholders("sm", [s.hostname for s in sms if s.hostname not in sm_real], taken)
    sw_ph = G.placeholders("switch", [n for n in switch_names if n not in sw_real], taken)
    _sim_guid_check(ca_real, list(sw_real.values()), warnings)
    return _Guids(
        hca={(n.hostname, hp.rail): ((hca_real[(n.hostname, hp.rail)], False)
                                     if (n.hostname, hp.rail) in hca_real
                                     else (hca_ph[f"{n.hostname}/{hp.rail}"], True))
             for n in nodes for hp in n.ports},
        sm={s.hostname: ((sm_real[s.hostname], False) if s.hostname in sm_real
                         else (sm_ph[s.hostname], True)) for s in sms},
        switch={n: ((sw_real[n], False) if n in sw_real else (sw_ph[n], True))
                for n in switch_names},
        summary=PlaceholderSummary(len(hca_ph), len(sm_ph), len(sw_ph)),
    )


def leaf_names(nodes: Sequence[FabricNode], spec: FabricSpec, kept: int, first_su: int
               ) -> dict[tuple[int, int], str]:
    """(SU, rail) -> the leaf `plan_fabric` cables it to, for these nodes' SUs only: a leaf
    depends on its SU's own slots alone (and, in the site's first SU, on the slot kept for the
    subnet-manager hosts), so a part owning some SUs names their leaves without planning the
    whole fabric."""
    _, leaf_of, _ = _build_leaves(nodes, spec, kept, first_su)
    return {key: leaf.name for key, leaf in leaf_of.items()}


def plan_fabric(
    nodes: Sequence[FabricNode],
    sm_hosts: Sequence[SmHost] = (),
    spec: FabricSpec | None = None,
) -> FabricPlan:
    """Plan switches, cables, rail placement, BOM and GUIDs. Pure and deterministic."""
    spec = spec or FabricSpec()
    _validate(nodes, sm_hosts, spec)
    nodes = sorted(nodes, key=lambda n: (n.su, n.slot))
    sms = sorted(sm_hosts, key=lambda s: (-s.priority, s.hostname))
    warnings: list[str] = []

    kept = kept_slots(spec, len(sms))
    leaves, leaf_of, g_of = _build_leaves(nodes, spec, kept)
    tiers = _tiers(spec, len(leaves))
    w = _wire_switches(spec, leaves, tiers)
    hca_cables = _cable_hcas(nodes, leaf_of, w)
    sm_ports, sm_cables = _cable_sms(sms, leaves, w, spec.half, kept)
    storage, storage_cables = _cable_storage(spec.storage_servers, leaves, w, spec.half, kept)

    guids = _assign_guids(nodes, sms, [lf.name for lf in leaves] + [s[0] for s in w.switches],
                          spec, warnings)
    switches = _switches(leaves, w, guids, spec)
    rack_of = {s.name: s.rack for s in switches}
    rack_of.update({n.hostname: n.rack for n in nodes})
    rack_of.update({s.hostname: s.rack for s in sms})
    rack_of.update({s.hostname: s.rack for s in spec.storage_servers})
    cables = _cables(hca_cables + sm_cables + storage_cables + w.cables, rack_of)

    placements = _node_placements(nodes, leaf_of, guids)
    sm_out = tuple(SmPlacement(s.hostname, s.priority, sw, port, *guids.sm[s.hostname], s.hca)
                   for s, (sw, port) in zip(sms, sm_ports, strict=True))

    bom = build_bom(switches, cables, spec)
    return FabricPlan(
        spec=spec, tiers=tiers, rails_per_leaf=MappingProxyType(dict(g_of)),
        switches=tuple(switches), cables=cables, nodes=placements, sm=sm_out, bom=bom,
        hca_ports=len(hca_cables),
        bisection_tbps=_bisection_tbps(len(hca_cables), w, tiers, spec),
        oversubscription=round(_oversubscription(leaves, w, tiers, spec.half), 4),
        placeholders=guids.summary, warnings=tuple(warnings), storage=storage,
    )


_CableSpec = tuple[Endpoint, Endpoint, CableKind]


def _tiers(spec: FabricSpec, n_leaves: int) -> int:
    """Tree depth: `fabric.tiers` if set, else two tiers while one spine layer can take every
    leaf (at most radix leaves), three beyond."""
    radix = spec.radix
    tiers = spec.tiers or (2 if n_leaves <= radix else 3)
    if tiers == 2 and n_leaves > radix:
        raise PlanError("fabric.tiers", tiers,
                        f"{n_leaves} leaves exceed a two-tier tree of radix {radix} "
                        f"(at most {radix} leaves)", "remove fabric.tiers to add a core tier")
    return tiers


def _wire_switches(spec: FabricSpec, leaves: list[_Leaf], tiers: int) -> _Wiring:
    """The switch-to-switch cables above the leaves: leaf-spine, plus spine-core in three tiers."""
    w = _Wiring(spec)
    if tiers == 2:
        w.two_tier(leaves)
    else:
        w.three_tier(leaves)
    return w


def _leaf_port(leaf_of: dict[tuple[int, int], _Leaf], n: FabricNode,
               rail: int) -> tuple[_Leaf, int]:
    """The leaf and down port of a node's rail: its rail's block of the leaf, at its slot."""
    leaf = leaf_of[(n.su, rail)]
    return leaf, 1 + (rail % leaf.g) * leaf.span + n.slot


def _cable_hcas(nodes: Sequence[FabricNode], leaf_of: dict[tuple[int, int], _Leaf],
                w: _Wiring) -> list[_CableSpec]:
    """One cable per node rail to its leaf port, claiming the port on the leaf."""
    hca_cables: list[_CableSpec] = []
    for n in nodes:
        for hp in sorted(n.ports, key=lambda x: x.rail):
            leaf, port = _leaf_port(leaf_of, n, hp.rail)
            w.use(leaf.name, port)
            leaf.used_down.add(port)
            hca_cables.append((Endpoint(leaf.name, port), Endpoint(n.hostname, 1, hp.rail,
                                                                    hp.hca), "hca"))
    return hca_cables


def _cable_sms(sms: Sequence[SmHost], leaves: list[_Leaf], w: _Wiring, half: int, kept: int
               ) -> tuple[list[tuple[str, int]], list[_CableSpec]]:
    """Place the subnet-manager hosts on first-SU leaf ports (see _place_sm) and cable them;
    their ports count as used leaf down ports."""
    sm_ports = _place_sm(sms, leaves, w.used, half, kept)
    sm_cables: list[_CableSpec] = [
        (Endpoint(sw, port), Endpoint(s.hostname, 1, None, s.hca), "sm")
        for s, (sw, port) in zip(sms, sm_ports, strict=True)]
    leaf_by_name = {leaf.name: leaf for leaf in leaves}
    for sw, port in sm_ports:
        if sw in leaf_by_name:
            leaf_by_name[sw].used_down.add(port)
    return sm_ports, sm_cables


def _cable_storage(servers: Sequence[StorageServer], leaves: list[_Leaf], w: _Wiring, half: int,
                   kept: int) -> tuple[tuple[StoragePlacement, ...], list[_CableSpec]]:
    """Place each storage server port on a free first-SU leaf port (after the subnet
    managers; see _first_su_spares), a server's ports on different leaves where it can, so one
    leaf lost leaves each server reachable; their ports count as used leaf down ports."""
    out: list[StoragePlacement] = []
    cables: list[_CableSpec] = []
    leaf_by_name = {leaf.name: leaf for leaf in leaves}
    free = _first_su_spares(leaves, w.used, half, kept)
    for server in servers:
        on: set[str] = set()
        for i, guid in enumerate(server.port_guids):
            pick = next((x for x in free if x[0] not in on), None) or next(iter(free), None)
            if pick is None:
                raise PlanError(
                    "fabric.storageServers", server.hostname,
                    f"port {i} has no free leaf port in the first SU (the slots kept for "
                    "subnet managers and storage are taken)",
                    "lower fabric.railsPerLeaf, or leave the last slot of the first SU free")
            free.remove(pick)
            sw, port = pick
            on.add(sw)
            w.used.setdefault(sw, set()).add(port)
            leaf_by_name[sw].used_down.add(port)
            hca = f"port{i}"
            out.append(StoragePlacement(server.hostname, hca, sw, port, guid))
            cables.append((Endpoint(sw, port), Endpoint(server.hostname, 1, None, hca),
                           "storage"))
    return tuple(out), cables


def _switches(leaves: list[_Leaf], w: _Wiring, guids: _Guids, spec: FabricSpec) -> list[Switch]:
    """Every switch with its rack and GUID: the leaves, then spines and cores as wired."""
    rack = _rack_resolver(spec)
    radix = spec.radix
    switches = [Switch(lf.name, "leaf", 1, rack(lf.name), *guids.switch[lf.name],
                       spec.switch_model, radix, lf.su, lf.rails, lf.pod) for lf in leaves]
    switches += [Switch(name, role, tier, rack(name), *guids.switch[name],  # type: ignore[arg-type]
                        spec.switch_model, radix, pod=pod)
                 for name, role, tier, pod in w.switches]
    return switches


def _cables(ordered: list[_CableSpec], rack_of: dict[str, str]) -> tuple[Cable, ...]:
    """The cables with their racks, media (by assign_media) and in-rack/cross-rack reach."""
    media = assign_media([(a, b, rack_of[a.device], rack_of[b.device]) for a, b, _ in ordered])
    return tuple(
        Cable(a, b, kind, rack_of[a.device], rack_of[b.device], m,
              "in-rack" if rack_of[a.device] == rack_of[b.device] else "cross-rack")
        for (a, b, kind), m in zip(ordered, media, strict=True))


def _node_placements(nodes: Sequence[FabricNode], leaf_of: dict[tuple[int, int], _Leaf],
                     guids: _Guids) -> tuple[NodePlacement, ...]:
    """Where each node sits (SU, slot, pod) and each of its rails lands (leaf, port, GUID)."""
    return tuple(
        NodePlacement(n.hostname, n.su, n.slot, n.rack, leaf_of[(n.su, 0)].pod, tuple(
            RailPlacement(hp.rail, hp.hca, _leaf_port(leaf_of, n, hp.rail)[0].name,
                          _leaf_port(leaf_of, n, hp.rail)[1], *guids.hca[(n.hostname, hp.rail)])
            for hp in sorted(n.ports, key=lambda x: x.rail)))
        for n in nodes)


def _bisection_tbps(hca_ports: int, w: _Wiring, tiers: int, spec: FabricSpec) -> float:
    """Bisection bandwidth in Tb/s."""
    # Bisection: the narrowest tier cut (hosts, leaf uplinks, spine uplinks), halved.
    cuts = [hca_ports] + [sum(1 for c in w.cables if c[2] == k)
                          for k in ("leaf-spine", "spine-core")[: tiers - 1]]
    return min(cuts) * spec.link_gbps / 2 / 1000


def _oversubscription(leaves: list[_Leaf], w: _Wiring, tiers: int, half: int) -> float:
    """The fullest switch's used down ports over its `half` uplinks (leaves, and in three
    tiers the spines); at most 1.0 in a non-blocking tree."""
    over = max([len(lf.used_down) / half for lf in leaves] + [0.0])
    if tiers == 3:  # spines: used down ports vs their half up
        down: dict[str, int] = {}
        for _a, b, kind in w.cables:
            if kind == "leaf-spine":
                down[b.device] = down.get(b.device, 0) + 1
        over = max([over] + [v / half for v in down.values()])
    return over


def _first_su_spares(leaves: Sequence[_Leaf], used: dict[str, set[int]], half: int, kept: int
                     ) -> list[tuple[str, int]]:
    """The free first-SU leaf ports nodes never take: those beyond the rail blocks first, then
    the kept slots from the last of each leaf's span down (kept for subnet managers and
    storage), so keeping one more slot never moves a port already placed."""
    first = min(leaf.su for leaf in leaves)
    spare: list[tuple[str, int]] = []
    for leaf in leaves:
        if leaf.su == first:
            spare += [(leaf.name, p) for p in range(leaf.g * leaf.span + 1, half + 1)]
    for k in range(max(kept, 1)):
        for leaf in leaves:
            if leaf.su == first:
                spare += [(leaf.name, r * leaf.span + leaf.span - k) for r in range(leaf.g)]
    return [(sw, p) for sw, p in spare if p not in used.get(sw, ())]


def _place_sm(
    sms: Sequence[SmHost],
    leaves: Sequence[_Leaf],
    used: dict[str, set[int]],
    half: int,
    kept: int,
) -> list[tuple[str, int]]:
    """Leaf ports for the SM hosts in the first SU, master and standby on different leaves:
    ports beyond the rail blocks first, then the slot kept for them (the last of each leaf's
    span, so nodes added to the SU never take it). Never a spine or core: ftree installs no
    route between its root switches, so an SM there could not reach the other roots by LID."""
    if not sms:
        return []
    first = min(leaf.su for leaf in leaves)
    free = _first_su_spares(leaves, used, half, kept)
    out: list[tuple[str, int]] = []
    taken: set[tuple[str, int]] = set()
    switches_used: set[str] = set()
    for s in sms:
        pick = next((x for x in free if x not in taken and x[0] not in switches_used), None)
        pick = pick or next((x for x in free if x not in taken), None)
        if pick is None:
            raise PlanError(
                "fabric.subnetManagers", s.hostname,
                f"has no free leaf port in SU {first} (its slot for subnet managers is taken)",
                f"lower fabric.railsPerLeaf or leave the last slot of SU {first} free")
        taken.add(pick)
        switches_used.add(pick[0])
        used.setdefault(pick[0], set()).add(pick[1])
        out.append(pick)
    return out


def _sim_guid_check(ca_ports: list[str], switch_guids: list[str], warnings: list[str]) -> None:
    """ibsim derives CA port GUID = node GUID + 1, so the simulated node GUID is port - 1;
    warn if that collides with another real GUID (the simulation could not load it)."""
    ints = {G.to_int(g) for g in ca_ports} | {G.to_int(g) for g in switch_guids}
    for g in ca_ports:
        if G.to_int(g) - 1 in ints:
            warnings.append(f"HCA port GUID {g}: {G.fmt(G.to_int(g) - 1)} is also a planned "
                            "GUID, so the ibsim rendering cannot give this CA its node GUID")
