"""Platform charts rendered from the model (pure): each Helm release and its values, in
installation order, what `pulumi up` waits for after an operator's rollout, and people's access
by group. The objects beside the charts are in the planning modules of their theme (rdma,
namespaces, pod_security, network_policies, ingress, volcano, training_operator).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from components.model.cluster import Chart, ChartSource, Cluster, GpuOperator, Platform
from components.planning import system_spread
from components.planning.ingress import INGRESS_POOL
from components.planning.rdma import adapter_rules
from components.planning.release_placement import with_placement
from components.planning.volcano import volcano_scheduler_config


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


def prometheus_url(cluster: Cluster) -> str:
    # kube-prometheus-stack names its Prometheus Service <release>-kube-prometheus-prometheus.
    return f"http://prometheus-kube-prometheus-prometheus.{cluster.platform.prometheus.namespace}.svc"


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
            # The standalone DCGM stays off (the chart's default, values.yaml `dcgm.enabled`):
            # its nvidia-dcgm pods serve 5555 on the pod network (gpu-operator
            # assets/state-dcgm/0400_dcgm.yml: a containerPort, no hostPort), so the node health
            # check's localhost:5555 would not reach them, and `dcgm.hostNetwork: true` would
            # bind the node's 5555, which DGX OS's own nvidia-dcgm may hold (the operator itself
            # expects a host engine on DGX OS, controllers/object_controls.go
            # TransformDCGMExporter): the check asks the host's (docs/health.md, "How it runs").
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
