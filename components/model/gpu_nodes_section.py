"""The `gpuNodes` section of the cluster model: the hardware template, the ranges that name and
number the nodes, per-node overrides and the nodes on their way out. `gpu_nodes` merges them with
the inventory into one record per node."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from components.model.fields import (
    DnsLabel,
    DriveModel,
    DriveSizeTb,
    Guid,
    HcaName,
    IPv4,
    KernelArg,
    Model,
    NetdevName,
    RetiredNvmeKey,
    empty_read_only,
    read_only,
)
from components.model.tunables import GPU_NODE_KERNEL_ARGS


class GpuSpec(Model):
    model: Literal["H100-SXM-80GB"] = "H100-SXM-80GB"
    count: int = Field(8, ge=1, le=8)
    # What GPU Feature Discovery labels the node with (nvidia.com/gpu.product).
    product_label: Literal["NVIDIA-H100-80GB-HBM3"] = "NVIDIA-H100-80GB-HBM3"
    memory_gib: int = 80
    numa_nodes: int = Field(2, ge=1, le=8)


class DataDrives(Model):
    """The local NVMe data drives, by what they are: the host script finds them under
    /dev/disk/by-id and never by kernel name, which is enumeration order (on a DGX H100,
    nvme0n1..nvme7n1 can include an M.2 OS drive). A drive that backs /, /boot or swap is
    never taken, whatever its size or model (docs/hosts.md)."""

    size_tb: DriveSizeTb  # marketed decimal TB, matched within 2 % of /sys/block/<dev>/size
    count: int = Field(ge=1, le=64)  # exactly this many must be found, or nothing is changed
    models: tuple[DriveModel, ...] = ()  # substrings of the drive model; empty: any model


class NodeTemplate(Model):
    """Hardware shared by every GPU node unless an override or the inventory says otherwise."""

    gpu: GpuSpec = GpuSpec()
    # Compute HCA per rail, rail r = position r. DGX H100 numbering is not contiguous.
    hcas: tuple[HcaName, ...]
    # The IPoIB interface of each rail's HCA, as the OS names it (never renamed by the stack):
    # DGX OS's stable names, e.g. ibp24s0 for mlx5_0. The RDMA device plugin, the pods'
    # attachment (rail 0) and LNet bind these names (docs/hosts.md, "Rail interface names").
    netdevs: tuple[NetdevName, ...]
    hca_model: Literal["ConnectX-7"] = "ConnectX-7"
    # The kernel command line GPU nodes boot with, besides DGX OS's own; a change reboots them
    # one at a time (docs/hosts.md, "Planned reboots").
    kernel_args: tuple[KernelArg, ...] = GPU_NODE_KERNEL_ARGS
    link_gbps: Literal[400] = 400
    memory_gib: int = Field(2048, ge=64)
    # The logical CPUs the kubelet counts: DGX H100's two Xeon Platinum 8480C, 56 cores each
    # (112 in all, NVIDIA's DGX H100 specifications), two threads per core.
    cpu_cores: int = Field(224, ge=8)
    # The local NVMe drives the scratch RAID0 is made of; None: no scratch array.
    data_drives: DataDrives | None = None
    # Retired (kernel names are not identities): rejected with the fix, never ignored.
    nvme_devices: RetiredNvmeKey = Field(None, exclude=True)
    nvme_size_tb: RetiredNvmeKey = Field(None, exclude=True)


class NodeRange(Model):
    """`count` nodes named prefix + zero-padded number, consecutive IPs and SU slots."""

    prefix: str = Field(pattern=r"^[a-z][-a-z0-9]*$")
    start: int = Field(0, ge=0)
    count: int = Field(ge=1, le=4096)
    digits: int = Field(2, ge=1, le=5)
    su: int = Field(1, ge=1)
    first_slot: int = Field(0, ge=0)
    management_ip_start: IPv4
    bmc_address_start: IPv4 | None = None
    racks: tuple[DnsLabel, ...] = Field(min_length=1)
    nodes_per_rack: int = Field(4, ge=1, le=16)

    def hostname(self, i: int) -> str:
        return f"{self.prefix}{self.start + i:0{self.digits}d}"


class NodeOverride(Model):
    management_ip: IPv4 | None = None
    bmc_address: IPv4 | None = None
    rack: DnsLabel | None = None
    su: int | None = Field(None, ge=1)
    slot: int | None = Field(None, ge=0)
    hcas: tuple[HcaName, ...] | None = None
    netdevs: tuple[NetdevName, ...] | None = None
    port_guids: tuple[Guid, ...] | None = None


class GpuNodes(Model):
    template: NodeTemplate
    ranges: tuple[NodeRange, ...] = Field(min_length=1)
    overrides: Annotated[dict[str, NodeOverride], AfterValidator(read_only)] = Field(
        default_factory=empty_read_only)
    # Nodes on their way out: drained (and no longer counted for workloads) in one update,
    # removed from `ranges` in a later one, so the drain comes first (docs/day2.md).
    decommission: tuple[DnsLabel, ...] = ()


