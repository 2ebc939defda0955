"""The cluster model: typed, frozen, validated before any resource is registered.

The stack file holds one structured key, `gpu-cluster:cluster`, plus separate `secure:` keys for
secrets. Validation runs in two passes so every problem is reported with its exact key path:
pydantic checks each field's type and range, then `config_checks.semantic_problems` checks the
relations between fields (duplicates, overlaps, references, GPU arithmetic). Field types live in
`config_types`. Nothing here imports pulumi except `load_config`, so planning code and tests use
the model without a Pulumi runtime.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    ValidationError,
)

from components.config_types import (
    _K8S_VERSION,
    PROJECT,
    Cidr,
    ConfigError,
    DnsLabel,
    DriveModel,
    DriveSizeTb,
    ExactVersion,
    Guid,
    HcaName,
    HostKey,
    IPv4,
    KernelArg,
    Model,
    NetdevName,
    PinnedImage,
    PKey,
    Problem,
    PublicKey,
    Quantity,
    RetiredNvmeKey,
    _read_only,
)
from components.config_types import CLUSTER_KEY as CLUSTER_KEY  # re-exported for callers
from components.inventory import Inventory, InventoryError, load_inventory

# Secrets are separate `secure:` keys so they never enter the model (or plan files, or logs).
SECRET_KEYS = ("sshPrivateKey", "bmcPassword", "switchPassword", "fabricMKey", "fabricSmKey",
               "fabricSaKey")
# The subnet managers' management keys (opensm `m_key`, `sm_key`, `sa_key`): 64-bit, non-zero,
# not opensm's default of 1 (every stock opensm would hold it).
FABRIC_KEYS = SECRET_KEYS[3:]

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
    # one at a time (docs/hosts.md, "Planned reboots"). iommu=pt: IOMMU pass-through for
    # GPUDirect RDMA peer-to-peer DMA.
    kernel_args: tuple[KernelArg, ...] = ("iommu=pt",)
    link_gbps: Literal[400] = 400
    memory_gib: int = Field(2048, ge=64)
    cpu_cores: int = Field(192, ge=8)
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
    overrides: Annotated[dict[str, NodeOverride], AfterValidator(_read_only)] = Field(
        default_factory=lambda: MappingProxyType({}))
    # Nodes on their way out: drained (and no longer counted for workloads) in one update,
    # removed from `ranges` in a later one, so the drain comes first (docs/day2.md).
    decommission: tuple[DnsLabel, ...] = ()


@dataclass(frozen=True)
class Rail:
    index: int
    hca: str
    netdev: str
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


class HostFirewall(Model):
    """The nftables allowlist on every host's management interface (docs/hosts.md, "Host
    firewall")."""

    enabled: bool = True  # off: each host removes the stack's table, unit and file
    # Further sources of SSH and the API server (an operators' VPN, a bastion network).
    admin_cidrs: tuple[Cidr, ...] = ()


class Network(Model):
    management_cidr: Cidr
    bmc_cidr: Cidr | None = None
    domain: str = Field("cluster.internal", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    # The service network load-balancer addresses come from: never the management network,
    # which carries SSH, the kubelets, etcd and the switches' management.
    load_balancer_cidr: Cidr
    ingress_pool: tuple[IPv4, IPv4]  # MetalLB address range (first, last) in it
    # Interfaces MetalLB announces the addresses on (the service network's VLAN); none: all.
    load_balancer_interfaces: tuple[Annotated[str, Field(
        pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,14}$")], ...] = ()
    rdma_cidr: Cidr  # IPoIB addresses handed to pods' RDMA interfaces (whereabouts)
    host_firewall: HostFirewall = HostFirewall()


class SubnetManager(Model):
    host: DnsLabel
    priority: int = Field(ge=0, le=15)


class Partition(Model):
    """An InfiniBand partition. The data path (NCCL, the pods' IPoIB attachment, LNet) uses
    the P_Key at index 0 of each port's table unless told otherwise, so one partition is
    marked `dataPath` and rendered there (opensm `indx0`)."""

    name: DnsLabel
    pkey: PKey
    members: Literal["compute", "storage", "all"]
    ipoib: bool = True
    data_path: bool = False
    # Full members outside the inventory, e.g. the Lustre servers' HCA ports.
    port_guids: tuple[Guid, ...] = ()


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


class Oidc(Model):
    """An OpenID Connect issuer people log in with (the API server's JWT authenticator)."""

    issuer_url: str = Field(pattern=r"^https://[^\s#?]+$")
    client_id: str = Field(min_length=1)  # the audience the ID tokens carry
    username_claim: str = "email"
    groups_claim: str = "groups"
    # Prefixes keep an issuer's names apart from the cluster's own (system:…, gpu-cluster:…).
    username_prefix: str = "oidc:"
    groups_prefix: str = "oidc:"
    certificate_authority: str | None = None  # PEM of the issuer's CA; unset: system CAs


GroupName = Annotated[str, Field(min_length=1, pattern=r"^[^\s]+$")]


class Access(Model):
    """Who may use the cluster, by group: from OIDC (with its prefix), or a short-lived client
    certificate whose organisation names the group (docs/security.md, "People")."""

    oidc: Oidc | None = None
    cluster_admins: tuple[GroupName, ...] = ("gpu-cluster:admins",)
    viewers: tuple[GroupName, ...] = ("gpu-cluster:viewers",)


class Kms(Model):
    """A KMS v2 plugin listening on every control plane (e.g. an HSM or Vault plugin run as a
    static pod): it holds the key-encryption key, so a copy of etcd together with
    /etc/kubernetes no longer reads the Secrets (docs/security.md, "Encryption at rest")."""

    name: DnsLabel  # the provider's name in the EncryptionConfiguration; never reuse one
    endpoint: str = Field("unix:///var/run/kmsplugin/socket.sock",
                          pattern=r"^unix:///[^\s]+\.sock$")
    timeout: str = Field("3s", pattern=r"^\d+(ms|s)$")


class Kubernetes(Model):
    version: str = Field(pattern=_K8S_VERSION.pattern)
    pod_cidr: Cidr
    service_cidr: Cidr
    cluster_domain: str = "cluster.local"
    control_plane_endpoint: ControlPlaneEndpoint = ControlPlaneEndpoint()
    join_token_ttl_minutes: int = Field(60, ge=5, le=1440)
    # GPU nodes drained and upgraded together in a Kubernetes upgrade (capacity out at once).
    upgrade_batch: int = Field(1, ge=1)
    kubelet: Kubelet = Kubelet()
    encryption_at_rest: bool = True
    kms: Kms | None = None  # unset: a local secretbox key, generated on the first control plane
    audit_logging: bool = True
    access: Access = Access()


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


class LnetAddresses(Model):
    """IPoIB addresses for LNet on the GPU nodes' rail interfaces. o2ib reaches a peer only on
    the clients' IPoIB subnet, so `cidr` is the Lustre servers' subnet (the MGS NIDs are in
    it); the clients take `clientRange`, split into one block per rail, at the node's host
    number in network.managementCidr (components/planning/lnet.py)."""

    cidr: Cidr
    client_range: Cidr


class LustreClient(Model):
    """The host Lustre client: Debian version of lustre-client-utils and
    lustre-client-modules-dkms (the DKMS modules build against the host's DOCA-OFED)."""

    version: str = Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.+~]+)?$")


class Storage(Model):
    lnet_network: str = Field("o2ib0", pattern=r"^o2ib\d*$")
    lnet_addresses: LnetAddresses
    lustre_client: LustreClient
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
    # Fraction of what the rails deliver to a Ring all-reduce (rails x 46 GB/s on NDR, the low
    # end of NCCL's maintainers' 46-48 GB/s per NIC; docs/acceptance.md) the bus bandwidth
    # must reach. 1.0: the floor is the quoted figure itself (368 GB/s on 8 rails).
    min_efficiency: float = Field(1.0, gt=0, le=1)
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


class Credentials(Model):
    """What the secrets are, in words a review can read: a rotation is a change of this file,
    not only of a CI secret. No secret is here; `pulumi up` checks `sshPublicKey` against
    `sshPrivateKey` before it registers anything."""

    # The public half of `sshPrivateKey`: every host authorises it (managed authorized_keys).
    ssh_public_key: PublicKey | None = None
    # Further keys every host accepts: the next key during a rotation, a break-glass key.
    ssh_authorized_keys: tuple[PublicKey, ...] = ()
    # Bumped with each new `switchPassword` / `bmcPassword`: the preview then shows every
    # command that re-runs with the new secret.
    switch_password_version: int = Field(1, ge=1)
    bmc_password_version: int = Field(1, ge=1)
    # Bumped with new `fabricMKey` / `fabricSmKey` / `fabricSaKey` values (docs/day2.md).
    fabric_keys_version: int = Field(1, ge=1)


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
    credentials: Credentials = Credentials()
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
            from components.config_checks import expand_nodes

            self._expanded = expand_nodes(self, self._inventory)
        return self._expanded[0]

    @property
    def in_service_nodes(self) -> tuple[GpuNode, ...]:
        """The GPU nodes workloads are sized for: all but those being decommissioned."""
        leaving = set(self.gpu_nodes.decommission)
        return tuple(n for n in self.nodes if n.hostname not in leaving)

    @property
    def control_plane(self) -> tuple[Host, ...]:
        return tuple(h for h in self.hosts if h.role == "control-plane")

    @property
    def sm_hosts(self) -> tuple[Host, ...]:
        return tuple(h for h in self.hosts if h.role == "sm-host")

    @property
    def total_gpus(self) -> int:
        """The GPUs workloads can use (nodes being decommissioned do not count)."""
        return sum(n.gpu.count for n in self.in_service_nodes)

    def lustre(self, name: str) -> LustreFilesystem | None:
        return next((fs for fs in self.storage.lustre if fs.name == name), None)

    _inventory: Inventory = Inventory()
    _expanded: tuple[tuple[GpuNode, ...], list[Problem]] | None = None
    _fabric_plan: Any = None  # the FabricPlan, set once the config is valid


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
            # Inventory messages end with their own ". Fix: …": keep the two parts apart.
            message, _, fix = str(err).partition(" Fix: ")
            raise ConfigError([Problem("inventoryFile", cluster.inventory_file,
                                       message.rstrip("."), fix.rstrip(".") or
                                       "correct the file as described")]) from None
        cluster._inventory = inventory
        cluster._expanded = None
    from components.config_checks import semantic_problems

    problems = list(semantic_problems(cluster))
    if problems:
        raise ConfigError(problems)
    # A config the fabric cannot be planned from (e.g. too many rails per leaf) is a config
    # error too: planned here, before anything is registered, and kept for the program.
    from components.planning import placement
    from components.planning.fabric import PlanError

    try:
        cluster._fabric_plan = placement.plan(cluster)
    except PlanError as err:
        raise ConfigError([Problem(err.path, err.value, err.message, err.fix)]) from None
    return cluster


# Optional per-device passwords (`pulumi config set --secret --path 'switchPasswords.<switch>'`):
# a device named in the map logs in with its own, every other one with the shared secret.
DEVICE_PASSWORDS = {"switchPasswords": "switchPassword", "bmcPasswords": "bmcPassword"}


@dataclass(frozen=True)
class Secrets:
    """Pulumi secrets read from `secure:` keys; Outputs, never plain strings."""

    ssh_private_key: Any
    bmc_password: Any
    switch_password: Any
    fabric_m_key: Any
    fabric_sm_key: Any
    fabric_sa_key: Any
    # device name -> its own password (an Output), from switchPasswords / bmcPasswords
    switch_passwords: Mapping[str, Any] = field(default_factory=dict)
    bmc_passwords: Mapping[str, Any] = field(default_factory=dict)

    def switch_password_for(self, switch: str) -> Any:
        return self.switch_passwords.get(switch, self.switch_password)

    def bmc_password_for(self, host: str) -> Any:
        return self.bmc_passwords.get(host, self.bmc_password)


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
    strict = not pulumi.runtime.is_dry_run()
    problems = [p for p in (_ssh_key_problem(cluster, conf.get("sshPrivateKey") or "", strict),
                            *_fabric_key_problems({k: conf.get(k) or "" for k in FABRIC_KEYS},
                                                  strict)) if p is not None]
    if problems:
        raise ConfigError(problems)
    devices = {key: _device_names(PROJECT, key) for key in DEVICE_PASSWORDS}
    problems = _unknown_devices(cluster, devices)
    if problems:
        raise ConfigError(problems)
    per_device = {key: {name: conf.require_secret_object(key).apply(lambda d, n=name: d[n])
                        for name in names} for key, names in devices.items()}
    secrets = Secrets(*(conf.require_secret(k) for k in SECRET_KEYS),
                      switch_passwords=MappingProxyType(per_device["switchPasswords"]),
                      bmc_passwords=MappingProxyType(per_device["bmcPasswords"]))
    return cluster, secrets


def _device_names(project: str, key: str) -> list[str]:
    """The device names of a per-device password map: its keys are not secret, its values
    are (read raw, so no value is touched outside a secret Output)."""
    import pulumi

    raw = pulumi.runtime.get_config(f"{project}:{key}")
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ConfigError([Problem(f"(secret) {project}:{key}", None,
                                   "must be a map of device name to password (value hidden)",
                                   f"pulumi config set --secret --path '{key}.<device>' …")])
    return sorted(value)


def _unknown_devices(cluster: Cluster, devices: Mapping[str, list[str]]) -> list[Problem]:
    """A name that is no device would silently leave that device on the shared password."""
    from components.planning import placement

    known = {"switchPasswords": {sw.name for sw in placement.plan(cluster).switches},
             "bmcPasswords": {h.hostname for h in (*cluster.hosts, *cluster.nodes)
                              if h.bmc_address is not None}}
    return [Problem(f"(secret) {PROJECT}:{key}.{name}", name,
                    "names no " + ("switch of the fabric plan" if key == "switchPasswords"
                                   else "host with a BMC"),
                    "use a name from " + ("build/<stack>/fabric/switches/"
                                          if key == "switchPasswords" else "the inventory"))
            for key, names in devices.items() for name in names if name not in known[key]]


def _ssh_key_problem(cluster: Cluster, private_key: str, strict: bool) -> Problem | None:
    """The private key must be the declared public key's other half, so a new CI secret alone
    never changes the key every command logs in with. A preview without the real secret (a
    value that is no key at all) is let through; `pulumi up` (strict) never is."""
    from components.planning.ssh_keys import fingerprint, key_id, public_key_of

    declared = cluster.credentials.ssh_public_key
    if declared is None:
        return None
    public = public_key_of(private_key)
    path = f"(secret) {PROJECT}:sshPrivateKey"
    if public is None:
        if not strict:
            return None
        return Problem(path, None, "is not an unencrypted OpenSSH or PEM private key (value "
                       "hidden)",
                       f"pulumi config set --secret {PROJECT}:sshPrivateKey < <key file>")
    if key_id(public) != key_id(declared):
        return Problem(path, fingerprint(public),
                       f"is not the key credentials.sshPublicKey names ({fingerprint(declared)})",
                       "set the secret that belongs to credentials.sshPublicKey, or rotate by "
                       "the book: authorise the new key in credentials.sshAuthorizedKeys and "
                       "apply, then change sshPublicKey and the secret together (docs/day2.md)")
    return None


_FABRIC_KEY = re.compile(r"^0x[0-9a-fA-F]{1,16}$")


def _fabric_key_problems(values: dict[str, str], strict: bool) -> list[Problem]:
    """Each management key must be a 64-bit hex value opensm reads, neither 0 (no key) nor 1
    (opensm's default), and the three must differ. Values are never echoed. A preview without
    the real secrets (values that are no key at all) is let through; `pulumi up` never is."""
    problems = []
    fix = "pulumi config set --secret {} 0x$(openssl rand -hex 8)  (and bump " \
        "credentials.fabricKeysVersion)"
    for key, value in values.items():
        if _FABRIC_KEY.match(value):
            if int(value, 16) in (0, 1):
                problems.append(Problem(f"(secret) {PROJECT}:{key}", None,
                                        "is 0 or 1 (no key, or opensm's default; value hidden)",
                                        fix.format(key)))
        elif strict:
            problems.append(Problem(f"(secret) {PROJECT}:{key}", None,
                                    "is not a 64-bit hex key like 0x1a2b3c4d5e6f7081 (value "
                                    "hidden)", fix.format(key)))
    keys = [int(v, 16) for v in values.values() if _FABRIC_KEY.match(v)]
    if len(keys) == len(values) and len(set(keys)) < len(keys):
        problems.append(Problem(f"(secret) {PROJECT}:{'/'.join(values)}", None,
                                "share a value: one leaked key would then open all three",
                                "give each its own value (openssl rand -hex 8)"))
    return problems
