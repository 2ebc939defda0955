"""Platform objects rendered from the model (pure): Helm values, NicClusterPolicy, network
attachments and IP pool, namespaces, MetalLB pool, cert-manager issuers, Volcano queues
and HyperNodes, the Training Operator kustomization.

The RDMA resource, the attachment names and the pod interface they create are defined once
here; the workload layer derives NCCL's environment from the same functions, so the two cannot
disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from components.compat import (
    NETWORK_OPERATOR_RELEASES,
    TRAINING_OPERATOR_COMMITS,
    training_operator_pin_fix,
    training_operator_unpinned,
)
from components.config import Chart, ChartSource, Cluster, GpuOperator, Platform
from components.planning import system_spread
from components.planning.fabric.model import FabricPlan
from components.planning.labels import GPU_TAINT, LABEL_PREFIX, ROLE_LABEL
from components.planning.release_placement import with_placement

RDMA_NETWORK = "ib-rail0"  # the IPoIB attachment pods use for NCCL's bootstrap socket
POD_RDMA_INTERFACE = "net1"  # Multus names the first extra interface net1
CONNECTX7_DEVICE_ID = "1021"
MELLANOX_VENDOR = "15b3"
PER_NODE_BLOCK = 64  # pod addresses per node on the RDMA network (8 GPU pods at most, + slack)
INGRESS_POOL = "ingress"  # MetalLB IPAddressPool ingress-nginx's Service draws from
CLUSTER_ISSUER = "cluster-ca"  # cert-manager ClusterIssuer Ingresses name for their TLS
SELF_SIGNED_ISSUER = "selfsigned"
GPU_NODE_TERM = {"matchExpressions": [{"key": ROLE_LABEL, "operator": "In",
                                       "values": ["gpu-worker"]}]}


@dataclass(frozen=True)
class Release:
    """A Helm release: chart coordinates from the config plus rendered values.

    `after` names the releases (and the objects registered with them) that must exist first:
    a chart enabling a ServiceMonitor needs the Prometheus Operator's CRDs, a LoadBalancer
    Service needs MetalLB's address pool, the GPU Operator's driver needs the DOCA driver.
    """

    name: str
    chart: Chart
    values: Mapping[str, Any]
    after: tuple[str, ...] = ()
    source: ChartSource = ChartSource()

    @property
    def ref(self) -> ChartRef:
        return chart_ref(self.chart, self.source)


@dataclass(frozen=True)
class ChartRef:
    """What Helm is given for a chart: a name in `repo`, or (`repo` None) an oci:// reference
    or a chart archive's path relative to the project."""

    chart: str
    repo: str | None


def archive_name(chart: Chart) -> str:
    """The file `helm pull` and `helm package` write for the chart at its version."""
    return f"{chart.chart}-{chart.version}.tgz"


def chart_ref(chart: Chart, source: ChartSource) -> ChartRef:
    if source.archives is not None:
        return ChartRef(f"{source.archives.rstrip('/')}/{archive_name(chart)}", None)
    repo = (source.mirror or chart.repo).rstrip("/")
    if repo.startswith("oci://"):
        return ChartRef(f"{repo}/{chart.chart}", None)
    return ChartRef(chart.chart, repo)


def chart_paths(p: Platform) -> dict[int, str]:
    """The config key path of each chart the platform pins, by the chart object's id."""
    return {id(chart): f"platform.{field.alias or name}"
            for name, field in type(p).model_fields.items()
            if isinstance(chart := getattr(p, name), Chart)}


def rdma_resource(cluster: Cluster) -> str:
    no = cluster.platform.network_operator
    return f"{no.rdma_resource_prefix}/{no.rdma_resource_name}"


def rail_netdevs(cluster: Cluster) -> list[str]:
    """Every GPU node's rail interfaces (IPoIB, as the OS names them): the template's in rail
    order, then any other name a node override gives."""
    names = list(cluster.gpu_nodes.template.netdevs)
    names += sorted({r.netdev for n in cluster.nodes for r in n.rails} - set(names))
    return names


def attachment_master(cluster: Cluster) -> str:
    """Rail 0's interface, the same on every node (the config checks it): the master of the
    pods' IPoIB attachment."""
    return cluster.gpu_nodes.template.netdevs[0]


def prometheus_url(cluster: Cluster) -> str:
    # kube-prometheus-stack names its Prometheus Service <release>-kube-prometheus-prometheus.
    return f"http://prometheus-kube-prometheus-prometheus.{cluster.platform.prometheus.namespace}.svc"


def volcano_scheduler_config() -> str:
    """Gang scheduling, GPU bin-packing, and SU-level packing over the HyperNodes.

    The Training Operator's PodGroups carry no `networkTopology`, so no job gets Volcano's hard
    HyperNode constraint (the SU constraint is the pods' own affinity, see
    workloads.topology_affinity). The HyperNodes still place every pod: for pods without a
    network topology, network-topology-aware scores each node by how full its HyperNodes
    already are (hypernode.binpack.normal-pod.*, on by default in Volcano 1.15;
    batchNodeOrderFnForNormalPods), so GPU work fills an SU before it opens the next and whole
    SUs stay free for the largest gangs. Weighted on GPUs here, like binpack."""
    return "\n".join([
        'actions: "enqueue, allocate, backfill"',
        "tiers:",
        "- plugins:",
        "  - name: priority",
        "  - name: gang",
        "    enablePreemptable: false",
        "  - name: conformance",
        "- plugins:",
        "  - name: drf",
        "    enablePreemptable: false",
        "  - name: predicates",
        "  - name: proportion",
        "  - name: nodeorder",
        # GPU pods fill partly used nodes first, keeping whole nodes free for training gangs;
        # one Deployment's serving replicas stay apart by their own anti-affinity.
        "  - name: binpack",
        "    arguments:",
        "      binpack.weight: 10",
        "      binpack.resources: nvidia.com/gpu",
        "      binpack.resources.nvidia.com/gpu: 10",
        "  - name: network-topology-aware",
        "    arguments:",
        "      hypernode.binpack.normal-pod.enable: true",
        "      hypernode.binpack.resources: nvidia.com/gpu",
        "      hypernode.binpack.resources.nvidia.com/gpu: 10",
        "",
    ])


# What `pulumi up` waits for after an operator's release changes: its policy's own state,
# `ready` once every node runs the new driver (the operators roll drivers out node by node,
# drained) — the CRDs' status.state enums: ClusterPolicy ignored|ready|notReady, NicClusterPolicy
# ignore|notReady|ready|error.
ROLLOUT_READY = {
    "network-operator": "nicclusterpolicies.mellanox.com/nic-cluster-policy",
    "gpu-operator": "clusterpolicies.nvidia.com/cluster-policy",
}
ROLLOUT_TIMEOUT = "120m"
# Kinds whose CRD an operator installs as it reconciles its policy, not its chart: objects of
# these kinds are created once the operator reports ready (the network operator's nv-ipam state
# ships the IPPool CRD, manifests/state-nv-ipam-cni/005-nv-ipam.nvidia.com_ippools.yaml).
OPERATOR_KINDS = {"network-operator": {("nv-ipam.nvidia.com/v1alpha1", "IPPool")}}


def rollout_wait_command(release: str) -> str:
    """Run on the control plane: wait until the operator reports every node rolled out."""
    return (f"sudo kubectl --kubeconfig /etc/kubernetes/admin.conf wait {ROLLOUT_READY[release]} "
            f"--for=jsonpath='{{.status.state}}'=ready --timeout={ROLLOUT_TIMEOUT}")


def helm_releases(cluster: Cluster) -> list[Release]:
    """Every chart, in installation order (each release only names releases listed before),
    each with the placement that gives all of its pods a node (release_placement)."""
    return [replace(r, values=with_placement(r.name, r.values), source=cluster.platform.charts)
            for r in _releases(cluster)]


def _releases(cluster: Cluster) -> list[Release]:
    p = cluster.platform
    gpu = p.gpu_operator
    k = cluster.kubernetes
    host_mofed = p.network_operator.ofed == "host"
    return [
        Release("calico", p.calico, {
            "installation": {
                "cni": {"type": "Calico"},
                "calicoNetwork": {
                    "bgp": "Disabled",
                    # GPU nodes are multi-homed (management Ethernet plus eight IPoIB rails): the
                    # default first-found address could put the VXLAN overlay on a rail.
                    "nodeAddressAutodetectionV4": {"cidrs": [str(cluster.network.management_cidr)]},
                    "ipPools": [{"cidr": str(k.pod_cidr), "encapsulation": "VXLAN",
                                 "natOutgoing": "Enabled", "nodeSelector": "all()"}],
                },
            },
        }),
        # First after the CNI: its CRDs (ServiceMonitor, PodMonitor) are used by later charts.
        Release("prometheus", p.prometheus, {
            "prometheus": {"prometheusSpec": {
                # Pick up ServiceMonitors/PodMonitors from every release, not only this one.
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "podMonitorSelectorNilUsesHelmValues": False,
            }},
            # The chart's Grafana comes with a published admin password; the stack ships no
            # dashboards, so it is off (turn it on with grafana.admin.existingSecret).
            "grafana": {"enabled": False},
        }, after=("calico",)),
        Release("prometheus-adapter", p.prometheus_adapter, {
            "prometheus": {"url": prometheus_url(cluster), "port": 9090},
            "rules": {"default": False, "custom": adapter_rules(cluster)},
        }, after=("prometheus",)),
        Release("cert-manager", p.cert_manager, {"crds": {"enabled": True}}, after=("calico",)),
        Release("metallb", p.metallb, {}, after=("calico",)),
        Release("ingress-nginx", p.ingress_nginx, {
            "controller": {
                "service": {"type": "LoadBalancer",
                            "annotations": {"metallb.io/address-pool": INGRESS_POOL}},
                "metrics": {"enabled": True, "serviceMonitor": {"enabled": True}},
                **system_spread.ingress_controller_values(cluster),
            },
        }, after=("metallb", "cert-manager", "prometheus")),
        Release("network-operator", p.network_operator, {
            "upgradeCRDs": True,  # the chart's pre-upgrade hook applies the new CRDs
            "nfd": {"enabled": True},
            "sriovNetworkOperator": {"enabled": False},
        }, after=("calico",)),
        Release("gpu-operator", gpu, {
            "operator": {"upgradeCRD": True},  # the chart's pre-upgrade hook applies the CRDs
            # Node Feature Discovery comes with the Network Operator; one instance only.
            "nfd": {"enabled": False},
            "driver": _gpu_driver_values(gpu, host_mofed),
            "toolkit": {"enabled": True},
            "devicePlugin": {"enabled": True},
            "gfd": {"enabled": True},
            "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": True}},
            # Whole GPUs for training: MIG stays off unless the config asks for it.
            "migManager": {"enabled": gpu.mig_manager},
            "gds": {"enabled": gpu.gpudirect_storage},
        }, after=("network-operator", "prometheus")),
        Release("volcano", p.volcano, {
            "custom": {"scheduler_config_override": volcano_scheduler_config()},
        }, after=("calico",)),
    ]


def _gpu_driver_values(gpu: GpuOperator, host_mofed: bool) -> dict[str, Any]:
    """The operator's driver container, or none when the hosts own the driver (DGX OS): the
    operator then finds it pre-installed (GPU Operator, "Pre-Installed NVIDIA GPU Drivers"),
    and a version or upgrade policy here would describe a driver nothing runs."""
    if gpu.driver == "host":
        return {"enabled": False}
    return {
        "enabled": True,
        "kernelModuleType": "open",  # DMA-BUF GPUDirect RDMA needs the open modules
        # GPUDirect RDMA through DMA-BUF (the open modules and the kernel), which NVIDIA
        # recommends over the legacy nvidia-peermem whenever it is supported, with DOCA-OFED on
        # the host too; the operator's driver then builds no peermem module.
        "rdma": {"enabled": False, "useHostMofed": host_mofed},
        **({"version": gpu.driver_version} if gpu.driver_version else {}),
        "upgradePolicy": DRIVER_UPGRADE_POLICY,
    }


def adapter_rules(cluster: Cluster) -> list[dict]:
    """Expose each inference autoscaling metric as a per-pod custom metric for the HPA."""
    metrics = sorted({s.autoscaling.metric for s in cluster.workloads.inference})
    return [
        {
            "seriesQuery": f'{{__name__=~"^{m.replace("_", ":", 1)}$|^{m}$",namespace!="",'
                           f'pod!=""}}',
            "resources": {"overrides": {"namespace": {"resource": "namespace"},
                                        "pod": {"resource": "pod"}}},
            "name": {"matches": ".*", "as": m},
            "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
        }
        for m in metrics
    ]


# Pods that may share a node's HCAs through the RDMA shared device plugin (its resource count).
RDMA_HCA_MAX = 63


def nic_cluster_policy(cluster: Cluster) -> dict:
    no = cluster.platform.network_operator
    release = no.version.lstrip("v")
    # The release's own images (its compat_data entry; the config accepts no other release).
    images = NETWORK_OPERATOR_RELEASES[release]
    repo, comp = images["repository"], f"network-operator-v{release}"
    device_plugin_config = {
        "configList": [{
            "resourceName": no.rdma_resource_name,
            "resourcePrefix": no.rdma_resource_prefix,
            "rdmaHcaMax": RDMA_HCA_MAX,
            # The compute HCAs only (by their rail interfaces), not a storage or management
            # ConnectX on the same host: one pod resource exposes all rails, as NCCL_IB_HCA
            # lists them.
            "selectors": {"vendors": [MELLANOX_VENDOR], "deviceIDs": [CONNECTX7_DEVICE_ID],
                          "linkTypes": ["infiniband"],
                          "ifNames": rail_netdevs(cluster)},
        }]
    }
    spec: dict[str, Any] = {
        # The operator's DaemonSets must run on the tainted GPU nodes, and only there.
        "tolerations": [gpu_toleration()],
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [GPU_NODE_TERM]}},
        "rdmaSharedDevicePlugin": {
            "image": "k8s-rdma-shared-dev-plugin", "repository": repo, "version": comp,
            "config": json.dumps(device_plugin_config, indent=2, sort_keys=True),
        },
        "secondaryNetwork": {
            "cniPlugins": {"image": "plugins", "repository": repo, "version": comp},
            "multus": {"image": "multus-cni", "repository": repo, "version": comp},
            "ipoib": {"image": "ipoib-cni", "repository": repo, "version": comp},
        },
        # NVIDIA's IPAM hands each node a block of the RDMA network (see ip_pool()).
        "nvIpam": {"image": "nvidia-k8s-ipam", "repository": repo, "version": comp,
                   "enableWebhook": False},
    }
    if no.ofed == "operator":
        spec["ofedDriver"] = {
            "image": "doca-driver", "repository": repo, "version": images["docaDriver"],
            "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1,
                              "drain": {"enable": True, "force": False, "deleteEmptyDir": True,
                                        "timeoutSeconds": 1800}},
        }
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": "nic-cluster-policy"},
        "spec": spec,
    }


def nad_config(cluster: Cluster) -> dict:
    """The CNI config of the RDMA attachment: IPoIB on rail 0 for NCCL's bootstrap socket.

    One attachment is enough: NCCL moves data over IB verbs on every HCA the RDMA shared
    device plugin puts in the pod (all rails); only its out-of-band socket needs an IP
    interface, and rail 0's IPoIB child (net1 in the pod) is on the fabric every node shares.
    """
    return {
        "cniVersion": "0.3.1",
        "name": RDMA_NETWORK,
        "type": "ipoib",
        "master": attachment_master(cluster),
        "ipam": {"type": "nv-ipam", "poolName": RDMA_NETWORK},
    }


def network_attachments(cluster: Cluster, namespaces: list[str]) -> list[dict]:
    return [
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": RDMA_NETWORK, "namespace": ns,
                         "annotations": {"k8s.v1.cni.cncf.io/resourceName":
                                         rdma_resource(cluster)}},
            "spec": {"config": json.dumps(nad_config(cluster), sort_keys=True)},
        }
        for ns in namespaces
    ]


def ip_pool(cluster: Cluster) -> dict:
    """The IPoIB address pool for pods' rail-0 interface, a block per GPU node.

    A flat L2 network (every node's rail 0 is on the same subnet), so no gateway and no route.
    """
    net = cluster.network.rdma_cidr
    nodes = len(cluster.nodes)
    block = PER_NODE_BLOCK
    if (nodes + 1) * block > net.num_addresses:
        raise ValueError(
            f"network.rdmaCidr: {net} holds {net.num_addresses} addresses, fewer than "
            f"{nodes} GPU nodes x {block} pod addresses per node (+ one spare block); "
            "use a larger rdmaCidr")
    return {
        "apiVersion": "nv-ipam.nvidia.com/v1alpha1",
        "kind": "IPPool",
        "metadata": {"name": RDMA_NETWORK,
                     "namespace": cluster.platform.network_operator.namespace},
        "spec": {
            "subnet": str(net),
            "perNodeBlockSize": block,
            "nodeSelector": {"nodeSelectorTerms": [GPU_NODE_TERM]},
        },
    }


# ---------------------------------------------------------------- namespaces


def training_namespaces(cluster: Cluster) -> list[str]:
    return sorted({j.namespace for j in cluster.workloads.training} | {"training"})


def inference_namespaces(cluster: Cluster) -> list[str]:
    return sorted(({s.namespace for s in cluster.workloads.inference} | {"inference"})
                  - set(training_namespaces(cluster)))


def namespace(name: str, enforce: str, audit: str, reason: str) -> dict:
    """A namespace with Pod Security Admission labels (enforce, and warn/audit one level up)."""
    psa = "pod-security.kubernetes.io"
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {f"{psa}/enforce": enforce, f"{psa}/enforce-version": "latest",
                       f"{psa}/warn": audit, f"{psa}/warn-version": "latest",
                       f"{psa}/audit": audit, f"{psa}/audit-version": "latest"},
            "annotations": {f"{LABEL_PREFIX}/pod-security": reason},
        },
    }


# Pod priorities: serving keeps its GPUs; training and the fabric acceptance test wait for free
# GPUs and never preempt anything (a preempted rank would stall its whole NCCL gang).
TRAINING_PRIORITY = "gpu-training"
INFERENCE_PRIORITY = "gpu-inference"


def priority_classes() -> list[dict]:
    def pc(name: str, value: int, preemption: str, description: str) -> dict:
        return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value, "preemptionPolicy": preemption,
                "globalDefault": False, "description": description}

    return [
        pc(INFERENCE_PRIORITY, 100000, "PreemptLowerPriority",
           "vLLM serving: keeps its GPUs while training waits"),
        pc(TRAINING_PRIORITY, 10000, "Never",
           "multi-node training and the NCCL acceptance test: wait for free GPUs, never "
           "preempt (a preempted rank stalls the whole gang)"),
    ]


def namespaces(cluster: Cluster) -> list[dict]:
    training = [namespace(
        ns, "privileged", "baseline",
        f"baseline plus IPC_LOCK and the scratch hostPath, enforced by the "
        f"ValidatingAdmissionPolicy {RDMA_POLICY} (the baseline level forbids both: RDMA pins "
        "memory for the HCAs' DMA); warn/audit report anything beyond baseline")
        for ns in training_namespaces(cluster)]
    inference = [namespace(
        ns, "baseline", "restricted",
        "baseline: vLLM pods need no extra capabilities; warn/audit at restricted")
        for ns in inference_namespaces(cluster)]
    return sorted(training + inference, key=lambda n: n["metadata"]["name"])


# Pod Security "baseline" (kubernetes.io/docs/concepts/security/pod-security-standards/) as CEL,
# plus exactly what RDMA training needs: IPC_LOCK (pinned memory for the HCAs' DMA) and the
# node's scratch array as a hostPath. The training namespaces enforce this instead of
# `baseline`, which forbids both. Every baseline check of k8s.io/pod-security-admission
# v0.35 (policy/check_*.go, Level baseline) is here, on every container the pod runs:
# containers, init containers and ephemeral containers (`kubectl debug` adds those through the
# pods/ephemeralcontainers subresource, which this policy matches too).
BASELINE_CAPABILITIES = ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                         "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                         "SYS_CHROOT")
# check_sysctls.go, 1.32+ (the cluster runs a later minor).
SAFE_SYSCTLS = ("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
                "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")
# check_seLinuxOptions.go, 1.31+: the types a container may run as; user and role stay unset.
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
# check_appArmorProfile.go: the field's types, and the deprecated annotation's values.
APPARMOR_TYPES = ("RuntimeDefault", "Localhost")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
RDMA_POLICY = "rdma-pods-baseline"


def _cel_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


def _every_container(check: str) -> str:
    """`check` (of `c`) on containers, init containers and ephemeral containers: the last are
    another type in the API's schema, so CEL cannot join them into one list."""
    return (f"variables.containers.all(c, {check}) && (!has(object.spec.ephemeralContainers) "
            f"|| object.spec.ephemeralContainers.all(c, {check}))")


def _no_host(handler: str) -> str:
    """A probe or lifecycle handler of `c` that names no host (check_hostProbesAndhostLifecycle:
    its httpGet and tcpSocket `host` stay empty)."""
    guard = " && ".join(f"has(c.{'.'.join(handler.split('.')[:i])})"
                        for i in range(1, handler.count(".") + 2))
    return " && ".join(
        f"!({guard} && has(c.{handler}.{kind}) && has(c.{handler}.{kind}.host) && "
        f"c.{handler}.{kind}.host != '')" for kind in ("httpGet", "tcpSocket"))


def _selinux(ctx: str) -> str:
    return (f"!(has({ctx}) && has({ctx}.seLinuxOptions)) || "
            f"((!has({ctx}.seLinuxOptions.type) || {ctx}.seLinuxOptions.type in "
            f"{_cel_list(SELINUX_TYPES)}) && "
            f"(!has({ctx}.seLinuxOptions.user) || {ctx}.seLinuxOptions.user == '') && "
            f"(!has({ctx}.seLinuxOptions.role) || {ctx}.seLinuxOptions.role == ''))")


def _unset_or(ctx: str, field: str, test: str) -> str:
    """`ctx.field` unset, or passing `test` (of the field's value, `{}`)."""
    return f"!(has({ctx}) && has({ctx}.{field})) || " + test.format(f"{ctx}.{field}")


def _rdma_baseline_checks(cluster: Cluster) -> list[tuple[str, str]]:
    """(CEL expression, message) of every baseline check, with RDMA's two exceptions."""
    sc = "c.securityContext"
    pod = "object.spec.securityContext"
    caps = _cel_list([*BASELINE_CAPABILITIES, "IPC_LOCK"])
    scratch = cluster.storage.scratch.mount_point
    apparmor = _cel_list(APPARMOR_TYPES)
    return [
        ("!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && "
         "!(has(object.spec.hostPID) && object.spec.hostPID) && "
         "!(has(object.spec.hostIPC) && object.spec.hostIPC)",
         "host namespaces (hostNetwork, hostPID, hostIPC) are not allowed"),
        (_every_container(f"!(has({sc}) && has({sc}.privileged) && {sc}.privileged)"),
         "privileged containers are not allowed"),
        (_every_container(f"!(has({sc}) && has({sc}.capabilities) && "
                          f"has({sc}.capabilities.add)) || "
                          f"{sc}.capabilities.add.all(cap, cap in {caps})"),
         "capabilities beyond baseline and IPC_LOCK are not allowed"),
        (f"!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath) || "
         f"v.hostPath.path == '{scratch}')",
         f"hostPath volumes other than the scratch array ({scratch}) are not allowed"),
        (_every_container("!has(c.ports) || c.ports.all(p, !has(p.hostPort) || "
                          "p.hostPort == 0)"),
         "host ports are not allowed"),
        (f"!(has({pod}) && has({pod}.seccompProfile) && "
         f"{pod}.seccompProfile.type == 'Unconfined') && "
         + _every_container(f"!(has({sc}) && has({sc}.seccompProfile) && "
                            f"{sc}.seccompProfile.type == 'Unconfined')"),
         "seccomp Unconfined is not allowed"),
        (_every_container(f"!(has({sc}) && has({sc}.procMount)) || "
                          f"{sc}.procMount == 'Default'"),
         "a procMount other than Default is not allowed"),
        (f"!(has({pod}) && has({pod}.sysctls)) || "
         f"{pod}.sysctls.all(s, s.name in {_cel_list(SAFE_SYSCTLS)})",
         "only the safe sysctls are allowed"),
        (f"({_unset_or(pod, 'appArmorProfile', '{}.type in ' + apparmor)}) && "
         + _every_container(_unset_or(sc, "appArmorProfile", "{}.type in " + apparmor))
         + " && (!has(object.metadata.annotations) || object.metadata.annotations.all(k, "
         f"!k.startsWith('{APPARMOR_ANNOTATION}') || object.metadata.annotations[k] in "
         "['', 'runtime/default'] || object.metadata.annotations[k].startsWith('localhost/')))",
         "AppArmor profiles other than RuntimeDefault and Localhost are not allowed"),
        (f"({_selinux(pod)}) && " + _every_container(_selinux(sc)),
         "SELinux options other than a container type are not allowed"),
        (f"!(has({pod}) && has({pod}.windowsOptions) && has({pod}.windowsOptions.hostProcess) "
         f"&& {pod}.windowsOptions.hostProcess) && "
         + _every_container(f"!(has({sc}) && has({sc}.windowsOptions) && "
                            f"has({sc}.windowsOptions.hostProcess) && "
                            f"{sc}.windowsOptions.hostProcess)"),
         "Windows hostProcess containers are not allowed"),
        ("variables.containers.all(c, " + " && ".join(
            _no_host(h) for h in ("livenessProbe", "readinessProbe", "startupProbe",
                                  "lifecycle.postStart", "lifecycle.preStop")) + ")",
         "probes and lifecycle handlers may not name a host"),
    ]


def rdma_pod_policy(cluster: Cluster) -> list[dict]:
    """A ValidatingAdmissionPolicy (built in, GA in 1.30) and its binding to the training
    namespaces: baseline, plus IPC_LOCK and the scratch hostPath, nothing else."""
    checks = _rdma_baseline_checks(cluster)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": RDMA_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["pods", "pods/ephemeralcontainers"]}]},
            "variables": [{"name": "containers", "expression":
                           "object.spec.containers + (has(object.spec.initContainers) ? "
                           "object.spec.initContainers : [])"}],
            "validations": [{"expression": e, "message": f"{m} (training namespaces: "
                             "Pod Security baseline plus IPC_LOCK and the scratch hostPath)"}
                            for e, m in checks],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": RDMA_POLICY},
        "spec": {"policyName": RDMA_POLICY, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchExpressions": [{
                     "key": "kubernetes.io/metadata.name", "operator": "In",
                     "values": training_namespaces(cluster)}]}}},
    }
    return [policy, binding]


def network_policies(cluster: Cluster) -> list[dict]:
    """Each workload namespace denies ingress by default; a training job's pods reach each
    other (MPI's SSH, the rendezvous, NCCL's bootstrap socket), and each inference service
    admits its own clients (workloads.inference_objects). Their egress stays off the
    management and BMC networks (hosts' SSH, kubelets, etcd, switch CLIs, BMCs) but for the
    API server. The RDMA rails are not pod traffic Calico polices: NCCL's data path is
    untouched."""
    workload = sorted({*training_namespaces(cluster), *inference_namespaces(cluster)})
    deny = [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": {"name": "default-deny-ingress", "namespace": ns},
             "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
            for ns in workload]
    peers = [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "same-namespace", "namespace": ns},
              "spec": {"podSelector": {}, "policyTypes": ["Ingress"],
                       "ingress": [{"from": [{"podSelector": {}}]}]}}
             for ns in sorted(training_namespaces(cluster))]
    egress = [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": EGRESS_POLICY, "namespace": ns},
               "spec": {"podSelector": {}, "policyTypes": ["Egress"],
                        "egress": egress_rules(cluster)}}
              for ns in workload]
    return deny + peers + egress


EGRESS_POLICY = "egress-off-management"


def admin_networks(cluster: Cluster) -> list[str]:
    """The networks no workload pod reaches but for the API server: the hosts' management
    network and the BMCs'."""
    net = cluster.network
    return [str(c) for c in (net.management_cidr, net.bmc_cidr) if c is not None]


def egress_rules(cluster: Cluster) -> list[dict]:
    """Everywhere (pods, services, storage, model downloads) except the administrators'
    networks; there, only the API server's port on the control planes (and its VIP): the
    MPI launcher's kubectl and every client of the kubernetes Service go there (Calico judges
    a Service's traffic by the endpoint it is sent to)."""
    ep = cluster.kubernetes.control_plane_endpoint
    api = sorted({str(h.management_ip) for h in cluster.control_plane}
                 | ({str(ep.vip)} if ep.vip else set()))
    return [
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": admin_networks(cluster)}}]},
        {"to": [{"ipBlock": {"cidr": f"{a}/32"}} for a in api],
         "ports": [{"protocol": "TCP", "port": ep.port}]},
    ]


# ---------------------------------------------------------------- ingress and metrics


def metallb_objects(cluster: Cluster) -> list[dict]:
    """The address pool ingress-nginx's LoadBalancer Service draws from (by name: no other
    Service gets an address from it), announced over L2 on the service network."""
    net = cluster.network
    first, last = net.ingress_pool
    ns = cluster.platform.metallb.namespace
    advert: dict[str, Any] = {"ipAddressPools": [INGRESS_POOL]}
    if net.load_balancer_interfaces:
        advert["interfaces"] = list(net.load_balancer_interfaces)
    return [
        {"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
         "metadata": {"name": INGRESS_POOL, "namespace": ns},
         "spec": {"addresses": [f"{first}-{last}"], "autoAssign": False}},
        {"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
         "metadata": {"name": INGRESS_POOL, "namespace": ns}, "spec": advert},
    ]


def cert_manager_objects(cluster: Cluster) -> list[dict]:
    """A private CA for the cluster's ingress TLS: a self-signed issuer signs the CA
    certificate, and the `cluster-ca` ClusterIssuer (named by Ingress annotations) signs with
    it. The CA secret lives in cert-manager's namespace, where ClusterIssuers read secrets."""
    ns = cluster.platform.cert_manager.namespace
    return [
        {"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
         "metadata": {"name": SELF_SIGNED_ISSUER}, "spec": {"selfSigned": {}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
         "metadata": {"name": CLUSTER_ISSUER, "namespace": ns},
         "spec": {"isCA": True, "commonName": f"{cluster.name} cluster CA",
                  "secretName": CLUSTER_ISSUER, "duration": "87600h",
                  "privateKey": {"algorithm": "ECDSA", "size": 256},
                  "issuerRef": {"name": SELF_SIGNED_ISSUER, "kind": "ClusterIssuer",
                                "group": "cert-manager.io"}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
         "metadata": {"name": CLUSTER_ISSUER}, "spec": {"ca": {"secretName": CLUSTER_ISSUER}}},
    ]


# ---------------------------------------------------------------- GPU driver upgrades

# How the GPU Operator rolls a new driver over the nodes (ClusterPolicy driver.upgradePolicy):
# one node at a time; on a node running a training or acceptance pod it waits for that pod to
# finish (timeoutSeconds 0: however long), so an upgrade never kills one rank of a gang; then
# it drains the node through the eviction API, which honours the serving PodDisruptionBudget.
DRIVER_UPGRADE_POLICY = {
    "autoUpgrade": True,
    "maxParallelUpgrades": 1,
    "maxUnavailable": 1,
    "waitForCompletion": {
        "podSelector": "app.kubernetes.io/component in (training,nccl-test)",
        "timeoutSeconds": 0},
    "gpuPodDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": True},
    "drain": {"enable": True, "force": False, "podSelector": "", "timeoutSeconds": 600,
              "deleteEmptyDir": True},
}


# ---------------------------------------------------------------- Volcano


def queue_capabilities(cluster: Cluster) -> dict[str, int]:
    """GPUs each Volcano queue may hold, derived from the workloads that must fit in it.

    Volcano's proportion plugin enqueues a PodGroup only while its queue's allocated GPUs plus
    the group's minResources stay within the queue's capability, so each cap is what its jobs
    need together: every training job's whole nodes; every serving replica at its maximum
    (rollouts replace in place, no surge pod); and the NCCL acceptance test on its nodes, run
    alone before the others start (its queue is empty afterwards).
    """
    gpus = cluster.gpu_nodes.template.gpu.count
    caps = {
        "training": sum(j.nodes * j.gpus_per_node for j in cluster.workloads.training),
        "inference": sum(s.autoscaling.max_replicas * s.gpus_per_pod
                         for s in cluster.workloads.inference),
    }
    test = cluster.workloads.nccl_test
    if test is not None:
        caps["acceptance"] = (test.nodes or len(cluster.in_service_nodes)) * gpus
    return caps


def queues(cluster: Cluster) -> list[dict]:
    """One queue per kind of work, capped at what that work needs (queue_capabilities)."""
    return [
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
         "metadata": {"name": name},
         "spec": {"weight": 1, "reclaimable": False,
                  "capability": {"nvidia.com/gpu": str(cap)}}}
        for name, cap in queue_capabilities(cluster).items()
    ]


def su_hypernode(su: int) -> str:
    """Tier-1 HyperNode of SU n; equals the node label labels.SU_LABEL of its members."""
    return f"su{su}"


def hypernodes(plan: FabricPlan) -> list[dict]:
    """HyperNodes from the fabric plan.

    Tier 1 = the nodes of one SU: every rail of every node in it lands on that SU's leaves, so
    traffic between them crosses one leaf. Tier 2 = the spine layer above the SUs (one
    `spine` HyperNode in a two-tier tree; one per pod of spines in a three-tier tree, with a
    tier-3 `core` above them). Members are listed by name, so a node added, removed or moved to
    another SU shows up in the preview diff of its HyperNode.
    """
    leaves: dict[int, list[str]] = {}
    pods: dict[int, set[int]] = {}
    for sw in plan.switches:
        if sw.role == "leaf" and sw.su is not None:
            leaves.setdefault(sw.su, []).append(sw.name)
            if sw.pod is not None:
                pods.setdefault(sw.pod, set()).add(sw.su)
    objs = [
        _hypernode(su_hypernode(su), 1, "su",
                   [("Node", h) for h in hosts],
                   {f"{LABEL_PREFIX}/su": su_hypernode(su)},
                   {f"{LABEL_PREFIX}/switches": ",".join(sorted(leaves.get(su, [])))})
        for su, hosts in plan.su_members().items()
    ]
    spines = sorted(s.name for s in plan.switches if s.role == "spine")
    if plan.tiers == 2:
        objs.append(_hypernode("spine", 2, "spine",
                               [("HyperNode", su_hypernode(su)) for su in plan.su_members()],
                               {}, {f"{LABEL_PREFIX}/switches": ",".join(spines)}))
    else:
        for pod, sus in sorted(pods.items()):
            members = [su for su in plan.su_members() if su in sus]
            pod_spines = [s.name for s in plan.switches if s.role == "spine" and s.pod == pod]
            objs.append(_hypernode(f"spine-p{pod}", 2, "spine",
                                   [("HyperNode", su_hypernode(su)) for su in members], {},
                                   {f"{LABEL_PREFIX}/switches": ",".join(sorted(pod_spines))}))
        cores = sorted(s.name for s in plan.switches if s.role == "core")
        objs.append(_hypernode("core", 3, "core",
                               [("HyperNode", f"spine-p{pod}") for pod in sorted(pods)], {},
                               {f"{LABEL_PREFIX}/switches": ",".join(cores)}))
    return objs


def _hypernode(name: str, tier: int, tier_name: str, members: list[tuple[str, str]],
               labels: dict[str, str], annotations: dict[str, str]) -> dict:
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name, "labels": {f"{LABEL_PREFIX}/tier": str(tier), **labels},
                     "annotations": annotations},
        "spec": {"tier": tier, "tierName": tier_name,
                 "members": [{"type": t, "selector": {"exactMatch": {"name": n}}}
                             for t, n in members]},
    }


# ---------------------------------------------------------------- Training Operator


def training_operator_kustomization(version: str, vendored: bool = False) -> str:
    """The Training Operator's kustomization: the upstream standalone overlay at the pinned
    release, plus --gang-scheduler-name=volcano so every PyTorchJob/MPIJob gets a Volcano
    PodGroup (minMember = runPolicy.schedulingPolicy.minAvailable). The overlay comes from
    GitHub by the commit the release's tag points to (TRAINING_OPERATOR_COMMITS), or, vendored,
    from the release's manifests copied into VENDORED_TRAINING_OPERATOR."""
    commit = TRAINING_OPERATOR_COMMITS.get(version)
    if commit is None:
        raise ValueError(f"platform.trainingOperator.version {version} "
                         f"{training_operator_unpinned(version)}: "
                         f"{training_operator_pin_fix(version)}")
    overlay = (TRAINING_OPERATOR_VENDORED_OVERLAY if vendored else
               TRAINING_OPERATOR_GITHUB_OVERLAY).format(version=version, commit=commit)
    return TRAINING_OPERATOR_KUSTOMIZATION.format(overlay=overlay)


def training_operator_dir(vendored: bool) -> str:
    return TRAINING_OPERATOR_VENDORED_DIR if vendored else TRAINING_OPERATOR_DIR


def check_training_operator_dir(text: str, version: str, vendored: bool = False) -> None:
    """The committed kustomization must pin the release the config names."""
    if text != training_operator_kustomization(version, vendored):
        raise ValueError(
            f"{training_operator_dir(vendored)}/kustomization.yaml does not match "
            f"platform.trainingOperator.version {version}: regenerate it with "
            "components.planning.platform.training_operator_kustomization(version, "
            f"vendored={vendored})")


TRAINING_OPERATOR_DIR = "platform/training-operator"
TRAINING_OPERATOR_VENDORED_DIR = "platform/training-operator-vendored"
# Where tools/vendor-training-operator.sh copies the release's manifests/ (and VERSION).
VENDORED_TRAINING_OPERATOR = "vendor/training-operator"
TRAINING_OPERATOR_GITHUB_OVERLAY = """\
  # {version}: the commit its tag points to (a tag can be moved, a commit cannot).
  - github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref={commit}
"""
TRAINING_OPERATOR_VENDORED_OVERLAY = """\
  # {version}: the release's manifests/, copied from its Go module by
  # tools/vendor-training-operator.sh (vendor/training-operator/VERSION names the release).
  - ../../vendor/training-operator/manifests/overlays/standalone
"""
TRAINING_OPERATOR_KUSTOMIZATION = """\
# The Kubeflow Training Operator (PyTorchJob, MPIJob kubeflow.org/v1) from its release, with
# gang scheduling through Volcano: the operator creates a scheduling.volcano.sh PodGroup per job.
# Rendered by components/planning/platform.py::training_operator_kustomization (a test keeps
# the two equal) for the release platform.trainingOperator.version names, whose tag's commit
# is in policies/gpu_guardrails/compat_data.py::TRAINING_OPERATOR_COMMITS.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
{overlay}patches:
  - target:
      group: apps
      version: v1
      kind: Deployment
      name: training-operator
      namespace: kubeflow
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/command/-
        value: --gang-scheduler-name=volcano
      # The upstream Deployment has no tolerations: on a cluster whose every node is tainted it
      # would have no node. It runs on the control-plane hosts with the other controllers.
      - op: add
        path: /spec/template/spec/nodeSelector
        value:
          node-role.kubernetes.io/control-plane: ""
      - op: add
        path: /spec/template/spec/tolerations
        value:
          - key: node-role.kubernetes.io/control-plane
            operator: Exists
            effect: NoSchedule
      # A controller the jobs depend on: preempt workload pods before it is left pending.
      - op: add
        path: /spec/template/spec/priorityClassName
        value: system-cluster-critical
  # The operator's certificate rotator fills this Secret. kustomize's secretGenerator gives it
  # `data: {{}}`, which the API server drops, and the kubernetes provider replaces a Secret whose
  # data differs from what it applied: every `pulumi up` would delete the operator's webhook
  # certificates. Without the empty map the stack owns only the Secret's existence.
  - target:
      version: v1
      kind: Secret
      name: training-operator-webhook-cert
      namespace: kubeflow
    patch: |-
      - op: remove
        path: /data
"""


def gpu_toleration() -> dict:
    return {"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}


def access_bindings(cluster: Cluster) -> list[dict]:
    """People's access by group (kubernetes.access): cluster-admin and the built-in read-only
    `view`. A group comes from the OIDC token (with its prefix) or from the organisation of a
    short-lived client certificate (docs/security.md, "People")."""
    access = cluster.kubernetes.access
    roles = (("gpu-cluster:cluster-admins", "cluster-admin", access.cluster_admins),
             ("gpu-cluster:viewers", "view", access.viewers))
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": role},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}
                      for g in groups]}
        for name, role, groups in roles if groups
    ]
