"""The cluster model: typed and frozen, the schema of the `gpu-cluster:cluster` object.

Field types live in `config_types`, the `gpuNodes` section in `config_nodes`, the nodes it
expands to in `gpu_nodes`. The relations between fields are checked by `config_checks`, and
`stack_config.validate_cluster` runs every pass; data flows one way, from the schema up to the
checks. Nothing here imports pulumi, so planning code and tests use the model without a
Pulumi runtime.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    ValidationInfo,
    model_validator,
)

from components.model.fields import (
    K8S_VERSION,
    Cidr,
    DnsLabel,
    ExactVersion,
    Guid,
    HcaName,
    HostKey,
    IPv4,
    Model,
    NetdevName,
    PinnedImage,
    PKey,
    PublicKey,
    Quantity,
    empty_read_only,
    read_only,
)
from components.model.gpu_nodes import GpuNode, NodeExpansion, expand_nodes
from components.model.gpu_nodes_section import GpuNodes
from components.model.health import Health
from components.model.inventory import Inventory

# The validation context key `validate_cluster` passes the loaded inventory under.
INVENTORY = "inventory"

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


class StorageServer(Model):
    """A storage server (Lustre MGS/MDS/OSS): each port GUID is one single-port HCA on its own
    leaf of the first SU, planned, cabled and verified like a node's rail. On the compute
    rails a full member of the compute partitions; with a storage fabric, on that fabric
    only. An I/O node to ftree either way."""

    hostname: DnsLabel
    rack: DnsLabel
    port_guids: tuple[Guid, ...] = Field(min_length=1, max_length=8)


class SwitchFacts(Model):
    """What is read off a fabric's switches (`ibswitches`, `ssh-keyscan`), by planned name.
    A switch is reached at <name>.<network.domain> unless an address is given here."""

    switch_guids: Annotated[dict[str, Guid], AfterValidator(read_only)] = Field(
        default_factory=empty_read_only)
    switch_management_ips: Annotated[dict[str, IPv4], AfterValidator(read_only)] = Field(
        default_factory=empty_read_only)
    switch_host_keys: Annotated[dict[str, HostKey], AfterValidator(read_only)] = Field(
        default_factory=empty_read_only)


class StorageFabric(SwitchFacts):
    """Storage on an InfiniBand fabric of its own, as a DGX SuperPOD builds it: every GPU
    node's storage ports (DGX H100: port 1 of each of the two storage ConnectX-7s), the
    storage servers and this fabric's own subnet managers on their own leaves and spines
    (`storage-leaf-su<n>-r<i>`, `storage-spine-<nn>`). LNet then runs over the storage ports
    only, and the compute rails carry nothing but the GPUs' traffic."""

    hcas: tuple[HcaName, ...] = Field(min_length=1, max_length=4)
    netdevs: tuple[NetdevName, ...] = Field(min_length=1, max_length=4)
    subnet_managers: tuple[SubnetManager, ...] = Field(min_length=1)
    # Clients limited, the storage servers full: clients reach the servers, never each
    # other. At P_Key index 0, where IPoIB and LNet look.
    pkey: PKey = 0x0A02
    spines: int | None = Field(None, ge=1, le=64)


class Fabric(SwitchFacts):
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
    # On the compute rails, or with `storageFabric` on a fabric of their own (docs/fabric.md).
    storage_servers: tuple[StorageServer, ...] = ()
    storage_fabric: StorageFabric | None = None


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
    version: str = Field(pattern=K8S_VERSION.pattern)
    pod_cidr: Cidr
    service_cidr: Cidr
    cluster_domain: str = "cluster.local"
    control_plane_endpoint: ControlPlaneEndpoint = ControlPlaneEndpoint()
    join_token_ttl_minutes: int = Field(60, ge=5, le=1440)
    # GPU nodes drained and upgraded together in a Kubernetes upgrade, per SU: the SUs upgrade
    # side by side (capacity out at once: this many nodes in every SU).
    upgrade_batch: int = Field(1, ge=1)
    # How long a drain the stack runs (an upgrade batch, a planned reboot) waits for a running
    # gang job that spans the drained nodes and others, before `pulumi up` fails naming it.
    gang_wait_minutes: int = Field(30, ge=0, le=720)
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
    # Who owns the GPU driver. DGX OS ships it (with the fabric manager) and the GPU Operator
    # then runs no driver container (it labels the node nvidia.com/gpu.deploy.driver=
    # pre-installed), so on DGX OS the hosts own it: `host`, the stack installs driverVersion
    # from DGX OS's repositories in each node's planned reboot. `operator` (the driver
    # container) only on hosts without one; their preparation refuses a host driver.
    driver: Literal["operator", "host"] = "host"
    driver_version: ExactVersion | None = None
    gpudirect_rdma: bool = True
    gpudirect_storage: bool = False
    mig_manager: bool = False

    @property
    def host_driver(self) -> str | None:
        """The driver release the hosts own and the stack installs; None: the operator's."""
        return self.driver_version if self.driver == "host" else None


class AptSource(Model):
    """A flat apt repository (`deb [signed-by=…] <url> ./`) the stack writes on the hosts, and
    the OpenPGP key that signs it, pinned by fingerprint: the vendor's, or a site-local
    mirror's. Host preparation checks the key and the repository's index before it changes
    anything."""

    url: str = Field(pattern=r"^https://\S+/$")
    key_url: str = Field(pattern=r"^https://\S+$")
    key_fingerprint: str = Field(pattern=r"^[0-9A-F]{40}$")


class NetworkOperator(Chart):
    ofed: Literal["operator", "host"] = "operator"
    # Where host DOCA-OFED (`ofed: host`) comes from: one DOCA release per repository.
    doca_source: AptSource | None = None
    rdma_resource_prefix: str = Field("rdma", pattern=r"^[a-z][-a-z0-9.]*$")
    rdma_resource_name: str = Field("ib", pattern=r"^[a-z][_a-z0-9]*$")


class TrainingOperator(Model):
    """Installed from the release's kustomize overlay (the v1 operator ships no Helm chart):
    from GitHub, or `vendored`, from the release's manifests copied into the project by
    tools/vendor-training-operator.sh (for a site with no route out)."""

    version: ExactVersion
    source: Literal["github", "vendored"] = "github"


class LustreCsi(Model):
    """HPE's Lustre CSI node plugin (`lustre-csi.hpe.com`), rendered as our own objects: its
    chart has no tolerations, so the plugin would never run on the tainted GPU nodes."""

    namespace: DnsLabel = "lustre-csi-system"
    image: PinnedImage = "ghcr.io/hewlettpackard/lustre-csi-driver:0.1.5"
    registrar_image: PinnedImage = "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.6.3"


class ChartSource(Model):
    """Where Helm reads the charts from. Neither key: each chart's own `repo`. `archives`: a
    directory (relative to the project) of chart archives named `<chart>-<version>.tgz`, as
    `helm pull` and `helm package` name them, for a site with no route to the repositories.
    `mirror`: the site's Helm repository (https://) or OCI registry (oci://) holding every chart
    under its upstream name."""

    archives: str | None = Field(None, pattern=r"^[^\s]+$")
    mirror: str | None = Field(None, pattern=r"^(https://|oci://)\S+$")


class Platform(Model):
    cni: Literal["calico", "cilium"] = "calico"
    charts: ChartSource = ChartSource()
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
    lustre-client-modules-dkms (the DKMS modules build against the host's DOCA-OFED), and the
    repository that serves them."""

    version: str = Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.+~]+)?$")
    source: AptSource


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
    # must reach. 0.97: 357 GB/s on 8 rails, 3 % under the healthy band's bottom (368) so a
    # healthy node's run-to-run noise passes, and above the 346.5 GB/s seven rails give at
    # the band's top (7 x 396 / 8), so a node that lost a rail still fails.
    min_efficiency: float = Field(0.97, gt=0, le=1)
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


class SitePart(Model):
    """A part of a split site other than the core, as the core's stack file lists it."""

    part: Literal["nodes", "platform", "workloads"]
    sus: tuple[int, ...] = ()  # part nodes: the scalable units whose GPU nodes it owns


STACK_NAME = r"^[A-Za-z0-9_.-]+$"
QUALIFIED_STACK = r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"


class Split(Model):
    """One stack of a site split into several: the shared core, the GPU nodes of some SUs,
    the platform, or the workloads. The site's config lives once, in the core's stack file,
    whose `parts` names every other part's stack and what it owns; another part's stack file
    only names its core (`gpu-cluster:site`), and the program reads that part's split from the
    core's `parts` (`site.stack_cluster`), with the references below filled in."""

    part: Literal["core", "nodes", "platform", "workloads"]
    sus: tuple[int, ...] = ()  # part nodes: the scalable units whose GPU nodes it owns
    parts: dict[Annotated[str, Field(pattern=STACK_NAME)], SitePart] = Field(
        default_factory=dict)  # part core: stack name -> its part
    # Filled in from `gpu-cluster:site`, never written: the core stack, and (for workloads,
    # which reads the platform's published facts) the platform part's stack.
    kubernetes_stack: str | None = Field(None, pattern=QUALIFIED_STACK)
    platform_stack: str | None = Field(None, pattern=QUALIFIED_STACK)


def mount_root(path: str) -> str:
    """Where a job mounts the volume a path lies on: its first directory."""
    return "/" + path.strip("/").split("/")[0]


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
    # Node health checks' thresholds (node-problem-detector; docs/health.md).
    health: Health = Health()

    @model_validator(mode="after")
    def _with_inventory(self, info: ValidationInfo) -> Cluster:
        # The inventory's facts (HCAs, GUIDs, host keys) are part of the nodes: `validate_cluster`
        # passes the file it loaded as validation context, so the model is whole once built.
        if info.context and INVENTORY in info.context:
            self._inventory = info.context[INVENTORY]
        return self

    _inventory: Inventory = PrivateAttr(default_factory=Inventory)

    @property
    def inventory(self) -> Inventory:
        """The facts read from `inventoryFile` (empty without one)."""
        return self._inventory

    @functools.cached_property
    def expansion(self) -> NodeExpansion:
        """Every GPU node with the inventory's facts merged in, and the problems found doing
        so (reported by `config_checks`). Computed once: the model never changes."""
        return expand_nodes(self.gpu_nodes, self._inventory)

    @property
    def nodes(self) -> tuple[GpuNode, ...]:
        """Every GPU node, sorted by hostname."""
        return self.expansion.nodes

    @property
    def acceptance_gated(self) -> bool:
        """GPU nodes join untested and take work only once the acceptance gate passed there."""
        test = self.workloads.nccl_test
        return test is not None and test.gate

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

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> Cluster:
        """A copy whose nodes are expanded again (an update may change them)."""
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("expansion", None)
        return copied
