"""Input and output types of the fabric planner (plain frozen dataclasses, no pulumi).

The config layer adapts its pydantic models to the input types; everything downstream
(Pulumi components, Kubernetes labels, Volcano HyperNodes, rendered files) reads the
output types. Names are derived from SU/rail/role, never from list positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from components.planning import port_descriptions

Role = Literal["leaf", "spine", "core"]
Media = Literal["dac", "optical"]
LengthClass = Literal["in-rack", "cross-rack"]
CableKind = Literal["hca", "sm", "storage", "leaf-spine", "spine-core"]

_EMPTY: Mapping[str, str] = MappingProxyType({})


class PlanError(ValueError):
    """The inputs cannot be planned: the config key path (under `gpu-cluster:cluster`), the
    value found there, what is wrong and the fix — the same four parts as a config problem."""

    def __init__(self, path: str, value: object, message: str, fix: str):
        self.path, self.value, self.message, self.fix = path, value, message, fix
        super().__init__(f"{path}: {message} (got {value!r}). Fix: {fix}")


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class HcaPort:
    """One compute HCA port. `hca` is the Linux device name (DGX H100: mlx5_0,3,4,5,6,9,10,11)."""

    rail: int
    hca: str
    port_guid: str | None = None  # "0x" + 16 hex digits, None until read with ibstat


@dataclass(frozen=True, slots=True)
class FabricNode:
    """A GPU server. `slot` is its fixed position in the SU: adding a node never moves others."""

    hostname: str
    su: int
    slot: int
    rack: str
    ports: tuple[HcaPort, ...]


@dataclass(frozen=True, slots=True)
class SmHost:
    """A subnet-manager host (master = highest priority, then standbys), one fabric port."""

    hostname: str
    priority: int
    rack: str
    port_guid: str | None = None
    hca: str = "mlx5_0"


@dataclass(frozen=True, slots=True)
class StorageServer:
    """A storage server (a Lustre MGS/MDS/OSS) on the fabric planned: one single-port HCA per
    `port_guids` entry, each cabled to its own leaf of the first SU."""

    hostname: str
    rack: str
    port_guids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Partition:
    """An InfiniBand partition (pkey). The Default partition (0x7fff) is always rendered,
    limited for every port and full only for the subnet managers, so it cannot be listed.

    members:
      compute  every compute HCA port (or only `hosts`) is a full member, and so are
               `port_guids` (e.g. the Lustre servers' ports, outside this inventory).
      storage  compute HCA ports (or `hosts`) are limited members and `port_guids` (storage
               servers, e.g. Lustre MDS/OSS, outside this inventory) full members: clients reach
               the servers but not each other on this pkey.
      all      every end port in the subnet is a full member (e.g. a management IPoIB pkey).

    data_path: the partition NCCL, the pods' IPoIB attachment and LNet use. Each of them takes
    the P_Key at index 0 of the port's table (NCCL_IB_PKEY defaults to index 0; an IPoIB parent
    interface uses index 0), so opensm puts this one there (`indx0`) instead of the Default
    partition, where compute ports are only limited members and cannot reach each other.
    """

    name: str
    pkey: int
    members: Literal["compute", "storage", "all"] = "compute"
    ipoib: bool = True
    hosts: tuple[str, ...] = ()
    port_guids: tuple[str, ...] = ()
    data_path: bool = False


@dataclass(frozen=True, slots=True)
class FabricSpec:
    """Switch hardware and placement. Defaults describe QM9700 NDR (64 x 400G ports)."""

    switch_model: str = "QM9700"
    radix: int = 64
    link_gbps: int = 400
    nodes_per_su: int = 32
    rails_per_node: int = 8
    # Rails sharing one leaf in every SU; None = derived from the SU's highest slot (see planner).
    rails_per_leaf: int | None = None
    # Spines of a two-tier fabric; None = the fewest that keep every leaf 1:1. Pin it to the
    # final size so growth never re-stripes the uplinks.
    spines: int | None = None
    tiers: Literal[2, 3] | None = None  # None = 2 up to radix leaves, else 3
    default_switch_rack: str = "ib-01"
    # switch name or fnmatch pattern (e.g. "leaf-su2-*") -> rack; exact name wins, then the
    # longest pattern.
    switch_racks: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    switch_guids: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    partitions: tuple[Partition, ...] = (Partition(name="compute", pkey=0x0001, data_path=True),)
    storage_servers: tuple[StorageServer, ...] = ()
    # compute: the GPUs' rails. storage: a fabric of its own for the storage servers and each
    # node's storage ports (DGX SuperPOD), its switches named storage-leaf-…, storage-spine-….
    purpose: Literal["compute", "storage"] = "compute"
    sm_conf_dir: str = "/etc/opensm"
    sm_log_file: str = "/var/log/opensm.log"
    sm_sweep_interval: int = 10

    @property
    def switch_prefix(self) -> str:
        return "storage-" if self.purpose == "storage" else ""

    @property
    def half(self) -> int:
        """Ports per switch facing down (= ports facing up) in a 1:1 tree."""
        return self.radix // 2


# ---------------------------------------------------------------- outputs


@dataclass(frozen=True, slots=True)
class Switch:
    name: str
    role: Role
    tier: int  # 1 leaf, 2 spine, 3 core
    rack: str
    guid: str
    guid_placeholder: bool
    model: str
    ports: int
    su: int | None = None  # leaves
    rails: tuple[int, ...] = ()  # leaves: the rails they carry
    pod: int | None = None  # three-tier leaves and spines


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One end of a cable: a switch port, or a host HCA (port 1)."""

    device: str  # switch name or hostname
    port: int
    rail: int | None = None  # compute HCAs
    hca: str | None = None  # host HCAs (compute or SM)

    @property
    def is_switch(self) -> bool:
        return self.hca is None

    def label(self) -> str:
        return port_descriptions.peer(self.device, self.port, self.rail, self.hca)


@dataclass(frozen=True, slots=True)
class Cable:
    """One 400G link. `a` is always a switch port on the lower tier (or the switch of an HCA)."""

    a: Endpoint
    b: Endpoint
    kind: CableKind
    a_rack: str
    b_rack: str
    media: Media
    length_class: LengthClass

    @property
    def id(self) -> str:
        return f"{self.a.device}:{self.a.port}"


@dataclass(frozen=True, slots=True)
class RailPlacement:
    rail: int
    hca: str
    leaf: str
    leaf_port: int
    port_guid: str
    guid_placeholder: bool


@dataclass(frozen=True, slots=True)
class NodePlacement:
    """Where a node's rails land: feeds node labels and Volcano HyperNodes."""

    hostname: str
    su: int
    slot: int
    rack: str
    pod: int | None
    rails: tuple[RailPlacement, ...]

    @property
    def leaves(self) -> tuple[str, ...]:
        return tuple(sorted({r.leaf for r in self.rails}))


@dataclass(frozen=True, slots=True)
class SmPlacement:
    hostname: str
    priority: int
    switch: str
    port: int
    port_guid: str
    guid_placeholder: bool
    hca: str


@dataclass(frozen=True, slots=True)
class StoragePlacement:
    """Where one storage server port lands: its HCA is `port<i>` (i from 0, config order)."""

    hostname: str
    hca: str
    switch: str
    port: int
    port_guid: str


@dataclass(frozen=True, slots=True)
class BomLine:
    category: Literal["switch", "cable", "transceiver", "hca"]
    item: str
    part: str
    quantity: int
    note: str = ""


@dataclass(frozen=True, slots=True)
class PlaceholderSummary:
    hca_guids: int
    sm_guids: int
    switch_guids: int

    def message(self) -> str:
        if not (self.hca_guids or self.sm_guids or self.switch_guids):
            return "all fabric GUIDs are real"
        return (
            f"{self.hca_guids} HCA GUIDs, {self.sm_guids} SM host GUIDs and "
            f"{self.switch_guids} switch GUIDs are placeholders (read them with ibstat / "
            "ibswitches and add them to the inventory before bring-up)"
        )


@dataclass(frozen=True, slots=True)
class FabricPlan:
    spec: FabricSpec
    tiers: int
    rails_per_leaf: Mapping[int, int]  # su -> rails per leaf in that SU
    switches: tuple[Switch, ...]
    cables: tuple[Cable, ...]
    nodes: tuple[NodePlacement, ...]
    sm: tuple[SmPlacement, ...]
    bom: tuple[BomLine, ...]
    hca_ports: int
    bisection_tbps: float
    oversubscription: float  # worst leaf (or spine) used-downlinks / uplinks; <= 1 is 1:1
    placeholders: PlaceholderSummary
    warnings: tuple[str, ...] = ()
    storage: tuple[StoragePlacement, ...] = ()

    def switch(self, name: str) -> Switch:
        for s in self.switches:
            if s.name == name:
                return s
        raise KeyError(name)

    def placement(self, hostname: str) -> NodePlacement:
        for n in self.nodes:
            if n.hostname == hostname:
                return n
        raise KeyError(hostname)

    def su_members(self) -> dict[int, tuple[str, ...]]:
        """SU -> hostnames by slot (Volcano tier-1 HyperNodes)."""
        out: dict[int, list[NodePlacement]] = {}
        for n in self.nodes:
            out.setdefault(n.su, []).append(n)
        return {su: tuple(n.hostname for n in sorted(ns, key=lambda n: n.slot))
                for su, ns in sorted(out.items())}

    def count(self, role: Role) -> int:
        return sum(1 for s in self.switches if s.role == role)

    def cables_of(self, kind: CableKind) -> tuple[Cable, ...]:
        return tuple(c for c in self.cables if c.kind == kind)

    def oversubscription_text(self) -> str:
        if self.oversubscription <= 1:
            return "1:1 (non-blocking)"
        return f"{self.oversubscription:g}:1"
