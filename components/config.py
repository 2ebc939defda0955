"""The cluster model: typed, frozen, validated before any resource is registered.

The stack file holds one structured key, `gpu-cluster:cluster`, plus separate `secure:` keys for
secrets. Validation runs in two passes so every problem is reported with its exact key path:
pydantic checks each field's type and range, then `_semantic_problems` checks the relations
between fields (duplicates, overlaps, references, GPU arithmetic). Nothing here imports pulumi
except `load_config`, so planning code and tests use the model without a Pulumi runtime.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from components.inventory import Inventory, InventoryError, load_inventory
from components.planning.compat import compatibility_problems

PROJECT = "gpu-cluster"
CLUSTER_KEY = f"{PROJECT}:cluster"
# Secrets are separate `secure:` keys so they never enter the model (or plan files, or logs).
SECRET_KEYS = ("sshPrivateKey", "bmcPassword", "switchPassword")

# ---------------------------------------------------------------- errors


@dataclass(frozen=True)
class Problem:
    path: str
    value: Any
    message: str
    fix: str

    def render(self) -> str:
        return (
            f"  {CLUSTER_KEY}.{self.path}: {self.message} (got {self.value!r}).\n"
            f"      Fix: {self.fix}"
        )


class ConfigError(Exception):
    """Raised before any resource is registered; lists every problem with its fix."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = [f"Invalid stack config: {len(problems)} problem(s); nothing was registered."]
        lines += [p.render() for p in problems]
        super().__init__("\n".join(lines))


# ---------------------------------------------------------------- field types

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_GUID = re.compile(r"^0x[0-9a-f]{16}$")
_HCA = re.compile(r"^mlx5_\d{1,3}$")
_HOST_KEY = re.compile(r"^(ssh-ed25519|ecdsa-sha2-nistp256|ssh-rsa) [A-Za-z0-9+/]+=*$")
_MAC = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")
_K8S_VERSION = re.compile(r"^1\.\d{2}\.\d{1,2}$")
_EXACT_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")
_QUANTITY = re.compile(r"^\d+(Ki|Mi|Gi|Ti|Pi)$")
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _dns_label(v: str) -> str:
    if not _DNS_LABEL.match(v):
        raise ValueError(
            "is not an RFC 1123 label || use lowercase letters, digits and '-', starting and "
            "ending with a letter or digit, at most 63 characters (e.g. gpu-node-00)"
        )
    return v


def _guid(v: Any) -> str:
    if isinstance(v, int):
        v = f"0x{v:016x}"
    v = str(v).lower()
    if not _GUID.match(v):
        raise ValueError("is not a 64-bit GUID || write 0x followed by 16 hex digits, as "
                         "`ibstat` prints it (e.g. 0xb83fd20300a13c10)")
    return v


def _hca(v: str) -> str:
    if not _HCA.match(v):
        raise ValueError("is not an RDMA device name || use the ConnectX device name that "
                         "`ibstat -l` lists, e.g. mlx5_0")
    return v


def _host_key(v: str) -> str:
    if not _HOST_KEY.match(v):
        raise ValueError("is not an OpenSSH public host key || paste the key type and base64 "
                         "of `ssh-keyscan <host>`, e.g. 'ssh-ed25519 AAAA…'")
    return v


def _mac(v: str) -> str:
    v = v.lower()
    if not _MAC.match(v):
        raise ValueError("is not a MAC address || write six hex pairs, e.g. 5c:25:73:0a:00:01")
    return v


def _pinned_image(v: str) -> str:
    if "@" in v:
        if not _DIGEST.search(v):
            raise ValueError("has a malformed digest || use @sha256: followed by 64 hex digits")
        return v
    name, _, tag = v.rpartition(":")
    if not name or "/" in tag or not tag:
        raise ValueError("is not pinned || add a version tag (e.g. :v0.11.0) or an @sha256 "
                         "digest")
    if tag == "latest":
        raise ValueError(":latest is not reproducible || pin a version tag or an @sha256 digest")
    return v


def _exact_version(v: str) -> str:
    if not _EXACT_VERSION.match(v):
        raise ValueError("is not an exact version || pin one release like v26.3.2 (no "
                         "ranges, no 'latest')")
    return v


def _quantity(v: str) -> str:
    if not _QUANTITY.match(v):
        raise ValueError("is not a binary quantity || write a number with Ki/Mi/Gi/Ti/Pi, "
                         "e.g. 64Gi or 100Ti")
    return v


def _pkey(v: Any) -> int:
    if isinstance(v, str):
        try:
            v = int(v, 0)
        except ValueError:
            raise ValueError("is not a number || write the pkey as hex, e.g. 0x0a01") from None
    if isinstance(v, bool) or not isinstance(v, int) or not 0x0001 <= v <= 0x7FFE:
        shown = f"{v:#06x}" if isinstance(v, int) and not isinstance(v, bool) else repr(v)
        raise ValueError(
            f"pkey {shown} is outside 0x0001-0x7FFE || pick a free key in 0x0001-0x7FFE "
            "(0x7FFF is the Default partition; 0x8000 is the full-membership bit opensm sets "
            "per member)"
        )
    return v


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
Guid = Annotated[str, BeforeValidator(_guid)]
HcaName = Annotated[str, AfterValidator(_hca)]
HostKey = Annotated[str, AfterValidator(_host_key)]
Mac = Annotated[str, AfterValidator(_mac)]
PinnedImage = Annotated[str, AfterValidator(_pinned_image)]
ExactVersion = Annotated[str, AfterValidator(_exact_version)]
Quantity = Annotated[str, AfterValidator(_quantity)]
PKey = Annotated[int, BeforeValidator(_pkey)]
def _read_only(v: dict) -> Mapping:
    """Mappings inside the frozen model cannot be changed after validation either."""
    return MappingProxyType(dict(v))


IPv4 = ipaddress.IPv4Address
Cidr = ipaddress.IPv4Network


class Model(BaseModel):
    """Frozen, no unknown keys, camelCase in the stack file and snake_case in Python."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


# ---------------------------------------------------------------- hosts


class Host(Model):
    """A non-GPU host: control plane, subnet manager or login node."""

    hostname: DnsLabel
    role: Literal["control-plane", "sm-host", "login"]
    management_ip: IPv4
    bmc_address: IPv4 | None = None
    ssh_host_key: HostKey | None = None
    rack: DnsLabel
    fabric_port_guid: Guid | None = None  # the SM host's HCA port on the IB fabric


class GpuSpec(Model):
    model: Literal["H100-SXM-80GB"] = "H100-SXM-80GB"
    count: int = Field(8, ge=1, le=8)
    # What GPU Feature Discovery labels the node with (nvidia.com/gpu.product).
    product_label: Literal["NVIDIA-H100-80GB-HBM3"] = "NVIDIA-H100-80GB-HBM3"
    memory_gib: int = 80
    numa_nodes: int = Field(2, ge=1, le=8)


class NodeTemplate(Model):
    """Hardware shared by every GPU node unless an override or the inventory says otherwise."""

    gpu: GpuSpec = GpuSpec()
    # Compute HCA per rail, rail r = position r. DGX H100 numbering is not contiguous.
    hcas: tuple[HcaName, ...]
    hca_model: Literal["ConnectX-7"] = "ConnectX-7"
    link_gbps: Literal[400] = 400
    memory_gib: int = Field(2048, ge=64)
    cpu_cores: int = Field(192, ge=8)
    nvme_devices: tuple[Annotated[str, AfterValidator(_dns_label)], ...] = ()
    nvme_size_tb: float = 3.84


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
    port_guids: tuple[Guid, ...] | None = None


class GpuNodes(Model):
    template: NodeTemplate
    ranges: tuple[NodeRange, ...] = Field(min_length=1)
    overrides: Annotated[dict[str, NodeOverride], AfterValidator(_read_only)] = Field(
        default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Rail:
    index: int
    hca: str
    port_guid: str | None


@dataclass(frozen=True)
class GpuNode:
    """One GPU server after template, range, override and inventory are merged."""

    hostname: str
    management_ip: IPv4
    bmc_address: IPv4 | None
    rack: str
    su: int
    slot: int
    rails: tuple[Rail, ...]
    ssh_host_key: str | None
    management_mac: str | None
    template: NodeTemplate
    origin: str  # key path that defined the node, for error messages

    @property
    def gpu(self) -> GpuSpec:
        return self.template.gpu


# ---------------------------------------------------------------- network, fabric, kubernetes


class Network(Model):
    management_cidr: Cidr
    bmc_cidr: Cidr | None = None
    domain: str = Field("cluster.internal", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    ingress_pool: tuple[IPv4, IPv4]  # MetalLB address range (first, last)
    rdma_cidr: Cidr  # IPoIB addresses handed to pods' RDMA interfaces (whereabouts)


class SubnetManager(Model):
    host: DnsLabel
    priority: int = Field(ge=0, le=15)


class Partition(Model):
    name: DnsLabel
    pkey: PKey
    members: Literal["compute", "storage", "all"]
    ipoib: bool = True


class Fabric(Model):
    switch_model: Literal["QM9700"] = "QM9700"
    radix: Literal[64] = 64
    nodes_per_su: int = Field(32, ge=1, le=32)
    switch_rack: DnsLabel
    # Pin these to the final size of the site so growth never re-cables existing links;
    # unset, the planner derives them from the nodes present.
    rails_per_leaf: int | None = Field(None, ge=1, le=8)
    spines: int | None = Field(None, ge=1, le=64)
    switch_user: str = "admin"
    subnet_managers: tuple[SubnetManager, ...] = Field(min_length=1)
    partitions: tuple[Partition, ...] = Field(min_length=1)
    switch_guids: Annotated[dict[str, Guid], AfterValidator(_read_only)] = Field(
        default_factory=lambda: MappingProxyType({}))
    # Switches are reached at <name>.<network.domain> unless an address is given here.
    switch_management_ips: Annotated[dict[str, IPv4], AfterValidator(_read_only)] = Field(
        default_factory=lambda: MappingProxyType({}))
    switch_host_keys: Annotated[dict[str, HostKey], AfterValidator(_read_only)] = Field(
        default_factory=lambda: MappingProxyType({}))


class ControlPlaneEndpoint(Model):
    """One control-plane host: its address. Three or five: a kube-vip virtual IP (ARP mode)."""

    vip: IPv4 | None = None
    port: int = Field(6443, ge=1, le=65535)
    # The management interface kube-vip announces the VIP on; unset, kube-vip uses the
    # interface of the default route.
    interface: str | None = Field(None, pattern=r"^[a-z][a-z0-9.]{0,14}$")
    kube_vip_image: PinnedImage = "ghcr.io/kube-vip/kube-vip:v1.0.0"


class Kubelet(Model):
    cpu_manager_policy: Literal["none", "static"] = "static"
    topology_manager_policy: Literal["none", "best-effort", "restricted", "single-numa-node"] = (
        "best-effort"
    )
    topology_manager_scope: Literal["container", "pod"] = "pod"
    system_reserved_cpu: str = "4"
    system_reserved_memory: Quantity = "16Gi"
    kube_reserved_cpu: str = "4"
    kube_reserved_memory: Quantity = "16Gi"
    max_pods: int = Field(110, ge=16, le=250)


class Kubernetes(Model):
    version: str = Field(pattern=_K8S_VERSION.pattern)
    pod_cidr: Cidr
    service_cidr: Cidr
    cluster_domain: str = "cluster.local"
    control_plane_endpoint: ControlPlaneEndpoint = ControlPlaneEndpoint()
    join_token_ttl_minutes: int = Field(60, ge=5, le=1440)
    kubelet: Kubelet = Kubelet()
    encryption_at_rest: bool = True
    audit_logging: bool = True


# ---------------------------------------------------------------- platform


class Chart(Model):
    chart: str
    version: ExactVersion
    repo: str = Field(pattern=r"^(https://|oci://)")
    namespace: DnsLabel


class GpuOperator(Chart):
    driver: Literal["operator", "host"] = "operator"
    driver_version: ExactVersion | None = None
    gpudirect_rdma: bool = True
    gpudirect_storage: bool = False
    mig_manager: bool = False


class NetworkOperator(Chart):
    ofed: Literal["operator", "host"] = "operator"
    rdma_resource_prefix: str = Field("rdma", pattern=r"^[a-z][-a-z0-9.]*$")
    rdma_resource_name: str = Field("ib", pattern=r"^[a-z][_a-z0-9]*$")


class TrainingOperator(Model):
    """Installed from the release's kustomize overlay (the v1 operator ships no Helm chart)."""

    version: ExactVersion


class LustreCsi(Model):
    """HPE's Lustre CSI node plugin (`lustre-csi.hpe.com`), rendered as our own objects: its
    chart has no tolerations, so the plugin would never run on the tainted GPU nodes."""

    namespace: DnsLabel = "lustre-csi-system"
    image: PinnedImage = "ghcr.io/hewlettpackard/lustre-csi-driver:0.1.5"
    registrar_image: PinnedImage = "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.6.3"


class Platform(Model):
    cni: Literal["calico", "cilium"] = "calico"
    calico: Chart
    gpu_operator: GpuOperator
    network_operator: NetworkOperator
    volcano: Chart
    training_operator: TrainingOperator
    metallb: Chart
    ingress_nginx: Chart
    cert_manager: Chart
    prometheus: Chart
    prometheus_adapter: Chart
    lustre_csi: LustreCsi = LustreCsi()


# ---------------------------------------------------------------- storage and workloads


class LustreFilesystem(Model):
    name: DnsLabel
    fsname: str = Field(pattern=r"^[a-z0-9_]{1,8}$")
    mgs_nids: tuple[str, ...] = Field(min_length=1)
    purpose: Literal["dataset", "checkpoints", "model-weights"]
    capacity: Quantity
    mount_options: tuple[str, ...] = ("flock", "noatime")


class Scratch(Model):
    mount_point: str = Field("/scratch", pattern=r"^/[-/a-z0-9_]+$")
    filesystem: Literal["xfs", "ext4"] = "xfs"


class Storage(Model):
    lnet_network: str = Field("o2ib0", pattern=r"^o2ib\d*$")
    lustre: tuple[LustreFilesystem, ...] = Field(min_length=1)
    scratch: Scratch = Scratch()


class TrainingJob(Model):
    name: DnsLabel
    namespace: DnsLabel = "training"
    launcher: Literal["pytorchjob", "mpijob"] = "pytorchjob"
    image: PinnedImage
    model: str
    script: str
    nodes: int = Field(ge=1)
    gpus_per_node: int = Field(8, ge=1, le=8)
    tensor_parallel: int = Field(ge=1)
    pipeline_parallel: int = Field(1, ge=1)
    data_parallel: int = Field(ge=1)
    precision: Literal["bf16", "fp16", "fp8"] = "bf16"
    micro_batch_per_gpu: int = Field(ge=1)
    sequence_length: int = Field(ge=128)
    dataset: DnsLabel  # a storage.lustre name
    dataset_path: str
    checkpoints: DnsLabel  # a storage.lustre name
    checkpoint_path: str
    shm_size: Quantity = "64Gi"
    cpu: int = Field(ge=1)
    memory: Quantity
    elastic_min_nodes: int | None = Field(None, ge=1)
    backoff_limit: int = Field(3, ge=0, le=20)
    # Volcano network-topology constraint: "hard" keeps a job that fits in one SU (tier-1
    # HyperNode) inside one SU; "soft" prefers it.
    topology: Literal["hard", "soft"] = "hard"


class Autoscaling(Model):
    min_replicas: int = Field(ge=1)
    max_replicas: int = Field(ge=1)
    metric: str = "vllm_num_requests_waiting"
    target_average: int = Field(ge=1)
    scale_up_window_seconds: int = Field(120, ge=0, le=3600)
    scale_down_window_seconds: int = Field(300, ge=0, le=3600)
    # At most this many pods added (removed) per period: a 70B replica takes minutes to load.
    scale_up_pods: int = Field(1, ge=1, le=16)
    scale_up_period_seconds: int = Field(120, ge=15, le=1800)
    scale_down_pods: int = Field(1, ge=1, le=16)
    scale_down_period_seconds: int = Field(300, ge=15, le=1800)


class InferenceService(Model):
    name: DnsLabel
    namespace: DnsLabel = "inference"
    image: PinnedImage
    weights: DnsLabel  # a storage.lustre name
    model_path: str
    served_model_name: str
    tensor_parallel: int = Field(ge=1, le=8)
    gpus_per_pod: int = Field(ge=1, le=8)
    max_model_len: int = Field(ge=256)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=0.95)
    host: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    cpu: int = Field(ge=1)
    memory: Quantity
    shm_size: Quantity = "16Gi"
    autoscaling: Autoscaling


class NcclTest(Model):
    """nccl-tests all_reduce_perf over the GPU nodes as an MPIJob, checked after `pulumi up`."""

    name: DnsLabel = "nccl-allreduce"
    namespace: DnsLabel = "training"  # needs the RDMA attachment: a training namespace
    image: PinnedImage
    # Fraction of the per-node NIC bandwidth (rails x link speed) the bus bandwidth must reach.
    min_efficiency: float = Field(0.8, gt=0, le=1)
    nodes: int | None = Field(None, ge=1)  # default: every GPU node
    # Message sizes (nccl-tests suffixes, powers of 1024); busbw is judged at >= 1 GiB.
    min_bytes: Literal["8", "1M", "128M", "512M", "1G"] = "1M"
    max_bytes: Literal["1G", "2G", "4G", "8G", "16G"] = "4G"
    # Run the parser after the MPIJob finishes and fail the update when the check fails.
    gate: bool = True
    timeout_minutes: int = Field(30, ge=5, le=240)


class Workloads(Model):
    training: tuple[TrainingJob, ...] = ()
    inference: tuple[InferenceService, ...] = ()
    nccl_test: NcclTest | None = None


# ---------------------------------------------------------------- the cluster


class Bmc(Model):
    """Optional BMC settings applied through Redfish from where `pulumi up` runs."""

    username: str = Field("admin", pattern=r"^[A-Za-z0-9_.-]{1,32}$")
    system_path: str = Field("/redfish/v1/Systems/1", pattern=r"^/redfish/v1/Systems/[^/]+$")
    # What the server does when power returns after an outage: LastState keeps a node that was
    # drained for maintenance off instead of rejoining mid-repair.
    power_restore_policy: Literal["AlwaysOn", "AlwaysOff", "LastState"] = "LastState"
    ca_bundle: str | None = None  # PEM file for the BMCs' TLS certificates; unset: system CAs


class Split(Model):
    """One stack of a site split into several: the shared core, the GPU nodes of some SUs,
    the platform, or the workloads. Every part reads the same cluster config; the parts after
    the core build their Kubernetes provider from the core stack's `kubeconfig` output."""

    part: Literal["core", "nodes", "platform", "workloads"]
    sus: tuple[int, ...] = ()  # part nodes: the scalable units whose GPU nodes it owns
    kubernetes_stack: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


class Cluster(Model):
    name: DnsLabel
    environment: Literal["production", "staging", "development"]
    inventory_file: str | None = None
    ssh_user: str = Field("ubuntu", pattern=r"^[a-z_][-a-z0-9_]*$")
    network: Network
    hosts: tuple[Host, ...] = Field(min_length=1)
    gpu_nodes: GpuNodes
    fabric: Fabric
    kubernetes: Kubernetes
    platform: Platform
    storage: Storage
    workloads: Workloads = Workloads()
    bmc: Bmc | None = None
    split: Split | None = None

    @property
    def nodes(self) -> tuple[GpuNode, ...]:
        """Every GPU node, sorted by hostname, with the inventory's facts merged in.

        Only `validate_cluster` reads the inventory file; a model built any other way has
        nodes without inventory facts."""
        if self._expanded is None:
            self._expanded = _expand_nodes(self, self._inventory)
        return self._expanded[0]

    @property
    def control_plane(self) -> tuple[Host, ...]:
        return tuple(h for h in self.hosts if h.role == "control-plane")

    @property
    def sm_hosts(self) -> tuple[Host, ...]:
        return tuple(h for h in self.hosts if h.role == "sm-host")

    @property
    def total_gpus(self) -> int:
        return sum(n.gpu.count for n in self.nodes)

    def lustre(self, name: str) -> LustreFilesystem | None:
        return next((fs for fs in self.storage.lustre if fs.name == name), None)

    _inventory: Inventory = Inventory()
    _expanded: tuple[tuple[GpuNode, ...], list[Problem]] | None = None


# ---------------------------------------------------------------- expansion


def _expand_nodes(cluster: Cluster, inventory: Inventory
                  ) -> tuple[tuple[GpuNode, ...], list[Problem]]:
    """Merge template, range, override and inventory facts; collect (never raise) problems."""
    spec = cluster.gpu_nodes
    src = inventory.source
    nodes: list[GpuNode] = []
    problems: list[Problem] = []
    for r_i, rng in enumerate(spec.ranges):
        where = f"gpuNodes.ranges[{r_i}]"
        if rng.count > len(rng.racks) * rng.nodes_per_rack:
            problems.append(Problem(f"{where}.racks", list(rng.racks),
                                    f"{rng.count} nodes do not fit {len(rng.racks)} rack(s) of "
                                    f"{rng.nodes_per_rack}", "list enough racks for the range"))
        for i in range(rng.count):
            host = rng.hostname(i)
            if not _DNS_LABEL.match(host):
                problems.append(Problem(f"{where}.prefix", rng.prefix,
                                        f"makes hostname {host!r}, not an RFC 1123 label",
                                        "keep prefix + number within 63 characters"))
                continue
            ov = spec.overrides.get(host, NodeOverride())
            facts = inventory.nodes.get(host)
            try:
                mgmt = ov.management_ip or rng.management_ip_start + i
                bmc = ov.bmc_address or (rng.bmc_address_start + i
                                         if rng.bmc_address_start else None)
            except ipaddress.AddressValueError:
                problems.append(Problem(f"{where}.managementIpStart",
                                        str(rng.management_ip_start),
                                        f"{rng.count} consecutive addresses run past "
                                        "255.255.255.255", "start the range lower"))
                break
            hcas = ov.hcas or spec.template.hcas
            rails = []
            for r, hca in enumerate(hcas):
                fact = facts.rails.get(r) if facts else None
                if fact and fact.hca and ov.hcas and fact.hca != hca:
                    problems.append(Problem(f"gpuNodes.overrides.{host}.hcas[{r}]", hca,
                                            f"{src} says rail {r} is {fact.hca}",
                                            "make the override and the inventory agree"))
                guid = ov.port_guids[r] if ov.port_guids and r < len(ov.port_guids) else (
                    fact.port_guid if fact else None)
                rails.append(Rail(index=r, hca=(fact.hca if fact and fact.hca else hca),
                                  port_guid=guid))
            node = GpuNode(
                hostname=host, management_ip=mgmt, bmc_address=bmc,
                rack=ov.rack or rng.racks[min(i // rng.nodes_per_rack, len(rng.racks) - 1)],
                su=ov.su or rng.su,
                slot=ov.slot if ov.slot is not None else rng.first_slot + i,
                rails=tuple(rails),
                ssh_host_key=facts.ssh_host_key if facts else None,
                management_mac=facts.management_mac if facts else None,
                template=spec.template, origin=where,
            )
            if facts:
                problems += _fact_problems(node, facts, src, spec.template.gpu.count)
            nodes.append(_normalised(node))
    return tuple(sorted(nodes, key=lambda n: n.hostname)), problems


def _fact_problems(node: GpuNode, facts: Any, src: str, rails: int) -> list[Problem]:
    """Inventory facts get the same checks as values in the stack file."""
    out = []
    checks: list[tuple[str, Any, Any]] = [(f"rail {r.index} hca", r.hca, _hca)
                                          for r in node.rails]
    checks += [(f"rail {r.index} portGuid", r.port_guid, _guid)
               for r in node.rails if r.port_guid]
    checks += [("managementMac", node.management_mac, _mac),
               ("sshHostKey", node.ssh_host_key, _host_key)]
    for what, value, check in checks:
        if value is None:
            continue
        try:
            check(value)
        except ValueError as err:
            msg, _, fix = str(err).partition(" || ")
            out.append(Problem("inventoryFile", value, f"{src}: {node.hostname} {what} {msg}",
                               fix or "correct the inventory file"))
    for r in sorted(facts.rails):
        if r >= rails:
            out.append(Problem("inventoryFile", r, f"{src}: {node.hostname} has rail {r} but "
                               f"nodes have {rails} rails (0..{rails - 1})",
                               "remove the row or fix its rail number"))
    return out


def _normalised(node: GpuNode) -> GpuNode:
    """Lower-case GUIDs and MACs from the inventory so comparisons are exact."""
    rails = tuple(Rail(r.index, r.hca, r.port_guid.lower() if r.port_guid else None)
                  for r in node.rails)
    mac = node.management_mac.lower() if isinstance(node.management_mac, str) else None
    return GpuNode(**{**node.__dict__, "rails": rails, "management_mac": mac})


# ---------------------------------------------------------------- semantic checks


def _duplicates(items: list[tuple[str, Any]]) -> Iterator[tuple[str, Any, str]]:
    """Yield (path, value, first_path) for every value already seen at an earlier path."""
    seen: dict[Any, str] = {}
    for path, value in items:
        if value is None:
            continue
        if value in seen:
            yield path, value, seen[value]
        else:
            seen[value] = path


def _semantic_problems(c: Cluster) -> Iterator[Problem]:  # noqa: C901 - a flat list of checks
    nodes = c.nodes
    yield from c._expanded[1] if c._expanded else ()
    host_paths = [(f"hosts[{i}].hostname", h.hostname) for i, h in enumerate(c.hosts)]
    node_paths = [(f"{n.origin} ({n.hostname})", n.hostname) for n in nodes]
    for path, value, first in _duplicates(host_paths + node_paths):
        yield Problem(path, value, f"hostname already used at {first}",
                      "give every host a unique hostname (node names become Kubernetes names)")

    ips = [(f"hosts[{i}].managementIp", h.management_ip) for i, h in enumerate(c.hosts)]
    ips += [(f"{n.origin} ({n.hostname}).managementIp", n.management_ip) for n in nodes]
    for path, value, first in _duplicates(ips):
        yield Problem(path, str(value), f"management IP already used at {first}",
                      "give every host its own management IP")
    for path, ip in ips:
        if ip not in c.network.management_cidr:
            yield Problem(path, str(ip), f"outside network.managementCidr "
                          f"{c.network.management_cidr}",
                          "use an address inside the management network or widen it")
    bmcs = [(f"hosts[{i}].bmcAddress", h.bmc_address) for i, h in enumerate(c.hosts)]
    bmcs += [(f"{n.origin} ({n.hostname}).bmcAddress", n.bmc_address) for n in nodes]
    for path, value, first in _duplicates(bmcs):
        yield Problem(path, str(value), f"BMC address already used at {first}",
                      "give every BMC its own address")

    known = {h for _, h in host_paths + node_paths}
    gpu_hosts = {n.hostname for n in nodes}
    for host in sorted(set(c.gpu_nodes.overrides) - gpu_hosts):
        yield Problem(f"gpuNodes.overrides.{host}", host,
                      "overrides a node no gpuNodes range defines",
                      "fix the hostname or add the node to a gpuNodes range (hosts[] entries "
                      "are configured in place)")
    defined = known | {r.hostname(i) for r in c.gpu_nodes.ranges for i in range(r.count)}
    for host in sorted(set(c._inventory.nodes) - defined):
        yield Problem("inventoryFile", host,
                      f"{c._inventory.source} describes a host the stack does not define",
                      "remove the host from the inventory or add it to gpuNodes")

    # GPUs and rails: one HCA per GPU rail, each HCA used once per node.
    gpus = c.gpu_nodes.template.gpu.count
    template_hcas = c.gpu_nodes.template.hcas
    if len(template_hcas) != gpus:
        yield Problem("gpuNodes.template.hcas", list(template_hcas),
                      f"{len(template_hcas)} compute HCAs for {gpus} GPUs",
                      "list exactly one compute HCA per GPU rail (rail r = position r)")
    for n in nodes:
        where = f"{n.origin} ({n.hostname})"
        own_hcas = n.hostname in c.gpu_nodes.overrides and \
            c.gpu_nodes.overrides[n.hostname].hcas is not None
        if len(n.rails) != gpus and own_hcas:
            yield Problem(f"{where}.hcas", [r.hca for r in n.rails],
                          f"{len(n.rails)} compute HCAs for {gpus} GPUs",
                          "list exactly one compute HCA per GPU rail (rail r = position r)")
        for path, value, first in _duplicates([(f"{where}.rails[{r.index}].hca", r.hca)
                                               for r in n.rails]):
            yield Problem(path, value, f"HCA already used by {first}",
                          "each rail needs its own HCA; check `ibstat -l` on the host")
    guids = [(f"inventory:{n.hostname}.rails[{r.index}].portGuid", r.port_guid)
             for n in nodes for r in n.rails]
    guids += [(f"hosts[{i}].fabricPortGuid", h.fabric_port_guid) for i, h in enumerate(c.hosts)]
    guids += [(f"fabric.switchGuids.{k}", v) for k, v in sorted(c.fabric.switch_guids.items())]
    guids += [(f"inventory:switches.{k}", v)
              for k, v in sorted(c._inventory.switch_guids.items())]
    for path, value, first in _duplicates(guids):
        yield Problem(path, value, f"GUID already used at {first}",
                      "GUIDs are unique per port; re-read them with `ibstat` on each host")

    # Fabric placement: a slot in an SU is a fixed set of leaf ports.
    per_su = c.fabric.nodes_per_su
    for n in nodes:
        if n.slot >= per_su:
            yield Problem(f"{n.origin} ({n.hostname}).slot", n.slot,
                          f"SU slot outside 0..{per_su - 1}",
                          f"an SU holds {per_su} nodes: start a new range with su: {n.su + 1}")
    for path, value, first in _duplicates([(f"{n.origin} ({n.hostname})", (n.su, n.slot))
                                           for n in nodes]):
        yield Problem(path, f"su {value[0]} slot {value[1]}", f"same SU slot as {first}",
                      "give each node its own slot (firstSlot or an override)")

    # Control plane and subnet managers.
    cp = c.control_plane
    if len(cp) not in (1, 3, 5):
        yield Problem("hosts", [h.hostname for h in cp],
                      f"{len(cp)} control-plane hosts: etcd needs an odd quorum",
                      "use 1 control-plane host, or 3 (or 5) with kubernetes."
                      "controlPlaneEndpoint.vip set")
    elif len(cp) > 1 and c.kubernetes.control_plane_endpoint.vip is None:
        yield Problem("kubernetes.controlPlaneEndpoint.vip", None,
                      f"{len(cp)} control-plane hosts need a virtual IP",
                      "set a free management-network address as the kube-vip VIP")
    vip = c.kubernetes.control_plane_endpoint.vip
    if vip is not None and vip not in c.network.management_cidr:
        yield Problem("kubernetes.controlPlaneEndpoint.vip", str(vip),
                      "VIP outside network.managementCidr", "pick a management-network address")
    for path, ip in ips:
        if vip is not None and ip == vip:
            yield Problem("kubernetes.controlPlaneEndpoint.vip", str(vip),
                          f"is also {path}", "give kube-vip an address no host uses")
    roles = {h.hostname: h.role for h in c.hosts}
    sms = c.fabric.subnet_managers
    for i, sm in enumerate(sms):
        if roles.get(sm.host) != "sm-host":
            yield Problem(f"fabric.subnetManagers[{i}].host", sm.host,
                          "is not a host with role sm-host",
                          "name a hosts[] entry whose role is sm-host")
    for path, value, first in _duplicates([(f"fabric.subnetManagers[{i}].priority", s.priority)
                                           for i, s in enumerate(sms)]):
        yield Problem(path, value, f"same sm_priority as {first}",
                      "give the master the highest priority (e.g. 15) and the standby a lower one")
    for path, value, first in _duplicates([(f"fabric.subnetManagers[{i}].host", s.host)
                                           for i, s in enumerate(sms)]):
        yield Problem(path, value, f"subnet manager host repeated ({first})",
                      "run one opensm per SM host")
    if c.environment == "production" and len(sms) < 2:
        yield Problem("fabric.subnetManagers", [s.host for s in sms],
                      "production needs a master and a standby subnet manager",
                      "add a second sm-host with a lower priority")
    for path, value, first in _duplicates([(f"fabric.partitions[{i}].pkey", hex(p.pkey))
                                           for i, p in enumerate(c.fabric.partitions)]):
        yield Problem(path, value, f"pkey already used by {first}", "give each tenant its own pkey")
    for path, value, first in _duplicates([(f"fabric.partitions[{i}].name", p.name)
                                           for i, p in enumerate(c.fabric.partitions)]):
        yield Problem(path, value, f"partition name already used by {first}",
                      "give each partition its own name")
    if not any(p.members in ("compute", "all") for p in c.fabric.partitions):
        yield Problem("fabric.partitions", [p.name for p in c.fabric.partitions],
                      "no partition gives the compute HCAs full membership",
                      "add a training partition with members: compute")

    # Address plan.
    nets = [("network.managementCidr", c.network.management_cidr),
            ("kubernetes.podCidr", c.kubernetes.pod_cidr),
            ("kubernetes.serviceCidr", c.kubernetes.service_cidr),
            ("network.rdmaCidr", c.network.rdma_cidr)]
    if c.network.bmc_cidr:
        nets.append(("network.bmcCidr", c.network.bmc_cidr))
    for i, (pa, a) in enumerate(nets):
        for pb, b in nets[i + 1:]:
            if a.overlaps(b):
                yield Problem(pb, str(b), f"overlaps {pa} {a}",
                              "use disjoint ranges for management, pods, services and RDMA")
    first, last = c.network.ingress_pool
    if first > last or first not in c.network.management_cidr \
            or last not in c.network.management_cidr:
        yield Problem("network.ingressPool", [str(first), str(last)],
                      "not an ascending range inside network.managementCidr",
                      "give MetalLB [first, last] addresses on the management network")
    else:
        for path, ip in ips:
            if first <= ip <= last:
                yield Problem("network.ingressPool", [str(first), str(last)],
                              f"contains {path} {ip}",
                              "keep the MetalLB pool clear of host addresses")

    kubelet = c.kubernetes.kubelet
    gpu = c.gpu_nodes.template.gpu
    if kubelet.topology_manager_policy == "single-numa-node" and gpu.count > 1 \
            and gpu.numa_nodes > 1:
        yield Problem("kubernetes.kubelet.topologyManagerPolicy", "single-numa-node",
                      f"rejects pods needing all {gpu.count} GPUs, which span {gpu.numa_nodes} "
                      "NUMA nodes", "use best-effort or restricted with scope pod")

    # Storage references and workloads.
    for i, j in enumerate(c.workloads.training):
        path = f"workloads.training[{i}]"
        ds, ck = c.lustre(j.dataset), c.lustre(j.checkpoints)
        if ds is None or ds.purpose != "dataset":
            yield Problem(f"{path}.dataset", j.dataset, "is not a storage.lustre dataset",
                          "name a storage.lustre entry with purpose: dataset")
        if ck is None or ck.purpose != "checkpoints":
            yield Problem(f"{path}.checkpoints", j.checkpoints,
                          "is not a storage.lustre checkpoints file system",
                          "name a storage.lustre entry with purpose: checkpoints")
        if j.nodes > len(nodes):
            yield Problem(f"{path}.nodes", j.nodes, f"more nodes than the {len(nodes)} GPU nodes",
                          "lower nodes or add GPU nodes")
        if j.gpus_per_node != gpus:
            yield Problem(f"{path}.gpusPerNode", j.gpus_per_node,
                          f"multi-node training takes whole nodes of {gpus} GPUs",
                          f"set gpusPerNode: {gpus}")
        world = j.nodes * j.gpus_per_node
        if j.tensor_parallel * j.pipeline_parallel * j.data_parallel != world:
            yield Problem(f"{path}.dataParallel", j.data_parallel,
                          f"TP {j.tensor_parallel} x PP {j.pipeline_parallel} x DP "
                          f"{j.data_parallel} != {world} GPUs ({j.nodes} nodes x "
                          f"{j.gpus_per_node})",
                          f"make tensorParallel x pipelineParallel x dataParallel = {world}")
        if j.tensor_parallel > j.gpus_per_node:
            yield Problem(f"{path}.tensorParallel", j.tensor_parallel,
                          "tensor parallelism crosses nodes (it needs NVLink bandwidth)",
                          f"keep tensorParallel <= {j.gpus_per_node}; use pipeline parallelism "
                          "across nodes")
        if j.elastic_min_nodes is not None and j.elastic_min_nodes > j.nodes:
            yield Problem(f"{path}.elasticMinNodes", j.elastic_min_nodes, "exceeds nodes",
                          "set elasticMinNodes <= nodes")
        if j.launcher == "mpijob" and j.elastic_min_nodes is not None \
                and j.elastic_min_nodes < j.nodes:
            yield Problem(f"{path}.elasticMinNodes", j.elastic_min_nodes,
                          "an MPIJob has a fixed world size (mpirun -np)",
                          "drop elasticMinNodes or use launcher: pytorchjob")
    nt = c.workloads.nccl_test
    if nt is not None:
        if nt.nodes is not None and nt.nodes > len(nodes):
            yield Problem("workloads.ncclTest.nodes", nt.nodes,
                          f"more nodes than the {len(nodes)} GPU nodes",
                          "lower nodes or leave it unset to test every GPU node")
        if nt.namespace not in {j.namespace for j in c.workloads.training}:
            yield Problem("workloads.ncclTest.namespace", nt.namespace,
                          "has no RDMA network attachment (only training namespaces get one)",
                          "use the namespace of a workloads.training job")
    for i, s in enumerate(c.workloads.inference):
        path = f"workloads.inference[{i}]"
        w = c.lustre(s.weights)
        if w is None or w.purpose != "model-weights":
            yield Problem(f"{path}.weights", s.weights, "is not a storage.lustre model-weights "
                          "file system", "name a storage.lustre entry with purpose: model-weights")
        if s.tensor_parallel != s.gpus_per_pod:
            yield Problem(f"{path}.tensorParallel", s.tensor_parallel,
                          f"differs from gpusPerPod {s.gpus_per_pod}",
                          "vLLM shards the model over exactly the pod's GPUs: make them equal")
        a = s.autoscaling
        if a.min_replicas > a.max_replicas:
            yield Problem(f"{path}.autoscaling.minReplicas", a.min_replicas,
                          f"above maxReplicas {a.max_replicas}", "set minReplicas <= maxReplicas")
        if c.environment == "production" and a.min_replicas < 2:
            yield Problem(f"{path}.autoscaling.minReplicas", a.min_replicas,
                          "one replica in production means downtime on every node drain",
                          "keep at least 2 replicas in production")
        if s.gpus_per_pod > gpus:
            yield Problem(f"{path}.gpusPerPod", s.gpus_per_pod, f"nodes have {gpus} GPUs",
                          f"use at most {gpus} GPUs per pod")
        if a.max_replicas * s.gpus_per_pod > c.total_gpus:
            yield Problem(f"{path}.autoscaling.maxReplicas", a.max_replicas,
                          f"{a.max_replicas} x {s.gpus_per_pod} GPUs exceeds the cluster's "
                          f"{c.total_gpus}", "lower maxReplicas or gpusPerPod")
    for path, value, first in _duplicates(
        [(f"workloads.training[{i}].name", (j.namespace, j.name))
         for i, j in enumerate(c.workloads.training)]
        + [(f"workloads.inference[{i}].name", (s.namespace, s.name))
           for i, s in enumerate(c.workloads.inference)]
    ):
        yield Problem(path, "/".join(value), f"workload name already used at {first}",
                      "give each workload its own name")
    for path, value, first in _duplicates([(f"storage.lustre[{i}].name", fs.name)
                                           for i, fs in enumerate(c.storage.lustre)]):
        yield Problem(path, value, f"file system name already used at {first}",
                      "give each Lustre file system its own name")

    if c.split is not None:
        sp = c.split
        sus = {n.su for n in nodes}
        if sp.part == "nodes" and (not sp.sus or set(sp.sus) - sus):
            yield Problem("split.sus", list(sp.sus),
                          f"a nodes stack owns existing SUs (this cluster has {sorted(sus)})",
                          "list the SUs whose GPU nodes this stack manages")
        if sp.part != "nodes" and sp.sus:
            yield Problem("split.sus", list(sp.sus), f"only a nodes stack owns SUs, not "
                          f"part {sp.part}", "remove split.sus")
        if sp.part != "core" and sp.kubernetes_stack is None:
            yield Problem("split.kubernetesStack", None,
                          f"part {sp.part} needs the core stack's kubeconfig",
                          "name the core stack as <org>/<project>/<stack>")

    yield from (Problem(*p) for p in compatibility_problems(c))


# ---------------------------------------------------------------- entry points


def _pydantic_problems(err: ValidationError, model: type[BaseModel]) -> list[Problem]:
    errors = err.errors(include_url=False)
    locs = [e["loc"] for e in errors]
    problems = []
    for e in errors:
        loc = e["loc"]
        # A failed item also fails its list's length check; report only the item.
        if e["type"] == "too_short" and any(o[:len(loc)] == loc and o != loc for o in locs):
            continue
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(model, loc[:-1])
            by_lower = {a.lower(): a for a in allowed}
            close = difflib.get_close_matches(str(loc[-1]).lower(), list(by_lower), n=1)
            hint = f"did you mean {by_lower[close[0]]!r}? " if close else ""
            shown = e["input"] if not isinstance(e["input"], dict | list) else "{…}"
            problems.append(Problem(path, shown, "unknown key",
                                    f"{hint}remove or rename it; allowed keys here: "
                                    f"{', '.join(sorted(allowed))}"))
        elif e["type"] == "missing":
            problems.append(Problem(path, None, "required key is missing",
                                    f"add {loc[-1]!r} here (Pulumi.prod.yaml has an example)"))
        else:
            msg = e["msg"].removeprefix("Value error, ")
            msg, _, fix = msg.partition(" || ")
            problems.append(Problem(path, e.get("input"), msg, fix or _fix_for(e)))
    return problems


def _fix_for(e: Mapping[str, Any]) -> str:
    ctx = e.get("ctx") or {}
    bounds = {"greater_than_equal": "ge", "less_than_equal": "le", "greater_than": "gt",
              "less_than": "lt"}
    if e["type"] in bounds:
        return f"use a value {e['msg'].removeprefix('Input should be ')}"
    if e["type"] == "literal_error":
        return f"use one of {ctx.get('expected')}"
    if e["type"] == "string_pattern_mismatch":
        return f"match the pattern {ctx.get('pattern')}"
    if e["type"].startswith("ip_v4"):
        return "write an IPv4 address, or a network like 10.0.0.0/16 with no host bits set"
    if e["type"] in ("too_short", "too_long"):
        return e["msg"].replace("should", "must")
    return f"give a valid value ({e['msg']})"


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """Aliases accepted at `loc`, walking nested models and mappings (for 'did you mean')."""
    current: Any = model
    skip_key = False
    for part in loc:
        if isinstance(part, int) or skip_key:
            skip_key = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = next((f for n, f in current.model_fields.items()
                      if part in (n, f.alias)), None)
        if field is None:
            return []
        # dict[str, Model]: the next location part is a key, then the Model applies.
        skip_key = _is_mapping(field.annotation)
        current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _is_mapping(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin is dict:
        return True
    if origin is Annotated or origin in (Union, UnionType):
        return any(_is_mapping(a) for a in get_args(annotation))
    return False


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def validate_cluster(raw: Mapping[str, Any], project_dir: Path = Path(".")) -> Cluster:
    """Parse and check the `gpu-cluster:cluster` object; raise ConfigError listing every problem."""
    if not isinstance(raw, Mapping):
        raise ConfigError([Problem("", raw, "must be a mapping", "see Pulumi.prod.yaml")])
    try:
        cluster = Cluster.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_pydantic_problems(err, Cluster)) from None
    if cluster.inventory_file:
        try:
            inventory = load_inventory(project_dir / cluster.inventory_file)
        except InventoryError as err:
            raise ConfigError([Problem("inventoryFile", cluster.inventory_file, str(err),
                                       "fix the file as described")]) from None
        cluster._inventory = inventory
        cluster._expanded = None
    problems = list(_semantic_problems(cluster))
    if problems:
        raise ConfigError(problems)
    return cluster


@dataclass(frozen=True)
class Secrets:
    """Pulumi secrets read from `secure:` keys; Outputs, never plain strings."""

    ssh_private_key: Any
    bmc_password: Any
    switch_password: Any


def load_config(project_dir: Path = Path(".")) -> tuple[Cluster, Secrets]:
    """Read the stack's config through Pulumi (the real CLI or the offline mock runtime)."""
    import pulumi

    conf = pulumi.Config(PROJECT)
    raw = conf.get_object("cluster")
    if raw is None:
        raise ConfigError([Problem("", None, "the stack has no gpu-cluster:cluster key",
                                   "copy Pulumi.prod.yaml as a starting point")])
    cluster = validate_cluster(raw, project_dir)
    missing = [k for k in SECRET_KEYS if conf.get_secret(k) is None]
    if missing:
        raise ConfigError([Problem(f"(secret) {PROJECT}:{k}", None, "secret is not set",
                                   f"pulumi config set --secret {PROJECT}:{k} …")
                           for k in missing])
    secrets = Secrets(*(conf.require_secret(k) for k in SECRET_KEYS))
    return cluster, secrets
