"""The one wiring function: config -> pure plans -> one component per layer -> artifacts.

Layers are built top to bottom (hardware, fabric, bootstrap, platform, storage, workloads);
each receives only plain data and the resources it must wait for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.layers.bootstrap import (
    ControlPlaneHost,
    KubeadmCluster,
    KubeadmClusterArgs,
    KubernetesUpgrade,
    PlannedReboot,
)
from components.layers.fabric import (
    COMPUTE_FABRIC_TYPE,
    STORAGE_FABRIC_TYPE,
    FabricArgs,
    InfinibandFabric,
    SubnetManagerArgs,
    SwitchArgs,
)
from components.layers.hardware import BareMetalNodeArgs, Hardware
from components.layers.kube import cluster_provider
from components.layers.platform import Platform, PlatformArgs
from components.layers.remote import connection
from components.layers.storage import Storage, StorageArgs
from components.layers.workloads import AcceptanceGate, ControlPlaneSetup, Workload, WorkloadArgs
from components.model import parts
from components.model.cluster import Cluster
from components.model.fields import CLUSTER_KEY
from components.model.gpu_nodes import GpuNode
from components.planning import (
    acceptance,
    bmc,
    health_detector,
    host_scripts,
    inference,
    ingress,
    kubeadm,
    lnet,
    namespaces,
    network_policies,
    placement,
    platform,
    pod_security,
    quarantine_setup,
    rdma,
    reboot,
    site_facts,
    ssh_keys,
    storage,
    switch_config,
    system_spread,
    training,
    training_operator,
    upgrade,
    volcano,
)
from components.planning.fabric.model import FabricPlan
from components.planning.fabric.render import render_fabric_files
from components.planning.facts import (
    FabricGuids,
    gate_facts,
    gpu_driver_facts,
    host_facts,
    kubernetes_facts,
    upgrade_facts,
)
from components.planning.subnet_manager import (
    sm_apply_script,
    sm_host_files,
    sm_rejoin_script,
    sm_restart_order,
)
from components.wiring import bring_up, site_link
from components.wiring.loading import Secrets


@dataclass
class Blueprint:
    """What `build` made: the layer components, the fabric plan and the rendered artifacts."""

    cluster: Cluster
    fabric_plan: FabricPlan | None  # none in a nodes or workloads part (the core's)
    hardware: Hardware | None
    fabric: InfinibandFabric | None
    kubernetes: KubeadmCluster | None
    platform: Platform | None
    storage: Storage | None
    workloads: dict[str, Workload]
    # Relative path under build/<stack>/ -> text. Pure renderings; never holds a secret.
    artifacts: dict[str, str] = field(default_factory=dict)
    site: site_link.SiteLink | None = None  # a split part's references to its core (platform)

    # What this part of a split site publishes for the others' policies (`facts` output).
    published_facts: dict[str, Any] = field(default_factory=dict)
    # The storage fabric (fabric.storageFabric): its plan and component, or none.
    storage_fabric_plan: FabricPlan | None = None
    storage_fabric: InfinibandFabric | None = None

    @property
    def site_exports(self) -> dict[str, Any]:
        """What this part of a split site exports for the others (`site_facts`)."""
        c = self.cluster
        if c.split is None:
            return {}
        site = site_facts.core_site(c) if c.split.part == "core" \
            else site_facts.part_site(c, self.owned_nodes)
        return {"site": site} | ({"facts": self.published_facts} if self.published_facts
                                 else {})

    @property
    def report(self) -> list[str]:
        """What a reviewer reads in the preview besides the diff (`bring_up.report_lines`)."""
        return bring_up.report_lines(self)

    @property
    def owned_nodes(self) -> tuple[GpuNode, ...]:
        return parts.owned_nodes(self.cluster)


Artifacts = dict[str, str]  # relative path under build/<stack>/ -> text


def build(cluster: Cluster, secrets: Secrets) -> Blueprint:
    """Every layer, or one part of a split site (`split`): core (hosts, fabric, control
    plane), nodes (the GPU nodes of some SUs), platform (with storage) or workloads."""
    part = parts.builds(cluster)
    fabric_plan = placement.plan(cluster) if part.fabric_plan else None
    core = part.core
    nodes = parts.owned_nodes(cluster)
    # Each node's leaf per rail, for its placement labels: a nodes part names its own.
    leaves = placement.rail_leaves(fabric_plan) if fabric_plan is not None \
        else placement.owned_rail_leaves(cluster, nodes)
    site = None
    if part.reaches_core:
        # Every secret waits for the part's references to pass their checks.
        site = site_link.link(cluster, pulumi.get_stack(), nodes)
        secrets = secrets.after(site.ready)
    # The fabric files are the core part's: only it pushes them to the subnet managers.
    storage_plan = placement.storage_plan(cluster) if core else None
    fabric_files = render_fabric_files(_planned(fabric_plan)) if core else {}
    storage_files = render_fabric_files(storage_plan, "storage-fabric/") if storage_plan else {}
    artifacts: Artifacts = fabric_files | storage_files
    published: dict[str, Any] = {}

    hardware, files = _hardware_layer(cluster, secrets, nodes, core)
    artifacts |= files
    fabric = storage_fabric = None
    if core:
        prepared = _require(hardware, "the core part prepares its hosts")
        fabric, files = _fabric_layer(cluster, secrets, _planned(fabric_plan), fabric_files,
                                      prepared)
        artifacts |= files
        published = {"hcas": site_facts.cabled_hcas(fabric.published_facts)}
        if storage_plan is not None:
            storage_fabric, files = _fabric_layer(cluster, secrets, storage_plan,
                                                  storage_files, prepared)
            artifacts |= files

    cp = _control_plane_host(cluster, secrets, hardware)
    kube = None
    if core or nodes:
        kube, files = _bootstrap_layer(
            cluster, leaves, _require(hardware, "a part with hosts prepares them"), cp,
            nodes, core, site.kubeconfig if site else None,
            [f for f in (fabric, storage_fabric) if f is not None])
        artifacts |= files
    provider = kube.provider if kube is not None else None
    if provider is None and site is not None:
        # The core stack's kubeconfig output (a secret) builds this stack's provider.
        provider = cluster_provider(cluster.name, site.kubeconfig)

    plat = store = None
    if part.platform:
        plat, store, published = _platform_layer(cluster, _planned(fabric_plan),
                                                 _reachable(provider), cp, kube)
    apps: dict[str, Workload] = {}
    if part.workloads:
        apps, files = _workload_layer(cluster, _reachable(provider), cp, kube, [
            r for r in (store, plat) if r is not None])
        artifacts |= files
    return Blueprint(cluster, fabric_plan, hardware, fabric, kube, plat, store, apps,
                     dict(sorted(artifacts.items())), site,
                     published if cluster.split is not None else {},
                     storage_plan, storage_fabric)


def _planned(fabric_plan: FabricPlan | None) -> FabricPlan:
    if fabric_plan is None:
        raise RuntimeError("this part plans no fabric: a bug in model/parts.py")
    return fabric_plan


def _reachable(provider: k8s.Provider | None) -> k8s.Provider:
    if provider is None:
        raise RuntimeError("a part that builds the platform or workloads reaches a cluster (its "
                           "own or its core's): a bug in blueprint.build")
    return provider


def _require(component: Hardware | None, why: str) -> Hardware:
    if component is None:
        raise RuntimeError(f"no hosts were prepared, yet {why}: a bug in blueprint.build")
    return component


def _hardware_layer(cluster: Cluster, secrets: Secrets, nodes: Sequence[GpuNode],
                    core: bool) -> tuple[Hardware | None, Artifacts]:
    """Host preparation: the core part's hosts (control planes, SM hosts), the owned nodes."""
    artifacts: Artifacts = {}
    host_args: dict[str, BareMetalNodeArgs] = {}
    for host in cluster.hosts if core else ():
        script = host_scripts.prepare_host(cluster, host, CLUSTER_KEY)
        host_args[host.hostname] = _host(
            cluster, secrets, host.hostname, host.role, script, host.bmc_address,
            host_facts(str(host.management_ip), host.ssh_host_key, None))
    for node in nodes:
        script = host_scripts.prepare_gpu_node(cluster, node, CLUSTER_KEY)
        host_args[node.hostname] = _host(
            cluster, secrets, node.hostname, "gpu-worker", script, node.bmc_address,
            host_facts(str(node.management_ip), node.ssh_host_key, node.management_mac,
                       [str(ra.address) for ra in lnet.rail_addresses(cluster, node)]))
    for name, args in host_args.items():
        artifacts[f"scripts/{name}/prepare-host.sh"] = args.prepare_script
        if args.authorized_keys_script:
            artifacts[f"scripts/{name}/ssh-keys.sh"] = args.authorized_keys_script
    if (reservations := host_scripts.dhcp_hosts(nodes)):
        artifacts["network/dhcp-hosts"] = reservations
    return (Hardware("hardware", host_args) if host_args else None), artifacts


def _fabric_layer(cluster: Cluster, secrets: Secrets, fabric_plan: FabricPlan,
                  fabric_files: Artifacts, hardware: Hardware
                  ) -> tuple[InfinibandFabric, Artifacts]:
    """One fabric (the compute rails, or the storage fabric): its subnet managers' files
    (standbys first, the master last) and every switch's port map."""
    storage_fabric = cluster.fabric.storage_fabric if fabric_plan.spec.purpose == "storage" \
        else None
    name = "storage-fabric" if storage_fabric else "fabric"
    artifacts: Artifacts = {}
    sm_of = {sm.hostname: sm for sm in fabric_plan.sm}
    order = sm_restart_order({h: sm.priority for h, sm in sm_of.items()})
    subnet_managers = {}
    for host in order:  # the master is last
        files = sm_host_files(fabric_files, host, f"{name}/")
        master = host == order[-1]
        script = sm_apply_script(files, sm_of[host].hca, master)
        artifacts[f"scripts/{host}/apply-opensm.sh"] = script
        rejoin = None
        if not master:
            rejoin = sm_rejoin_script(sm_of[host].hca)
            artifacts[f"scripts/{host}/rejoin-opensm.sh"] = rejoin
        subnet_managers[host] = SubnetManagerArgs(hardware.nodes[host], files, script, rejoin)
    domain = cluster.network.domain
    facts = storage_fabric or cluster.fabric
    ips, keys = facts.switch_management_ips, facts.switch_host_keys
    switches = {
        sw: SwitchArgs(address=str(ips.get(sw, f"{sw}.{domain}")),
                       host_key=keys.get(sw),
                       password=secrets.switch_password_for(sw),
                       cli=switch_config.switch_cli(sw, ports,
                                                    host_sm=bool(fabric_plan.sm),
                                                    radix=cluster.fabric.radix))
        for sw, ports in switch_config.port_maps(fabric_plan).items()
    }
    for sw, args in switches.items():
        artifacts[f"{name}/switches/{sw}.cli"] = args.cli
    fabric = InfinibandFabric(name, FabricArgs(
        sm_hosts=subnet_managers,
        switches=switches, switch_user=cluster.fabric.switch_user,
        switch_password=secrets.switch_password,
        sm_keys=(secrets.fabric_m_key, secrets.fabric_sm_key, secrets.fabric_sa_key),
        guids=FabricGuids(switches={s.name: s.guid for s in fabric_plan.switches},
                          rails={n.hostname: {r.rail: r.port_guid for r in n.rails}
                                 for n in fabric_plan.nodes})),
        type_=STORAGE_FABRIC_TYPE if storage_fabric else COMPUTE_FABRIC_TYPE)
    return fabric, artifacts


def _bootstrap_layer(cluster: Cluster, leaves: dict[str, dict[int, str]], hardware: Hardware,
                     cp: ControlPlaneHost, nodes: Sequence[GpuNode], core: bool,
                     core_kubeconfig: pulumi.Output[Any] | None,
                     fabrics: list[InfinibandFabric]) -> tuple[KubeadmCluster, Artifacts]:
    """kubeadm: init and the control-plane joins (core), the owned nodes' joins, planned
    reboots and upgrades."""
    init_host = cluster.control_plane[0]
    init_script = kubeadm.init_script(cluster, init_host) if core else None
    join_scripts = {n.hostname: kubeadm.join_script(cluster, n) for n in nodes}
    kubelet_script = kubeadm.kubelet_config_script(cluster, init_host) if core else None
    cp_scripts = {h.hostname: kubeadm.control_plane_join_script(cluster, h)
                  for h in cluster.control_plane[1:]} if core else {}
    identities = {h.hostname: kubeadm.identities_script(cluster, h)
                  for h in cluster.control_plane} if core else {}
    reboots = {n.hostname: _planned_reboot(n, cluster.kubernetes.gang_wait_minutes * 60,
                                           cluster.platform.gpu_operator.host_driver)
               for n in nodes}
    kube_upgrade = _kubernetes_upgrade(cluster, nodes, core)
    kube = KubeadmCluster("kubernetes", KubeadmClusterArgs(
        cluster_name=cluster.name,
        init_host=cp,
        init_script=init_script,
        token_ttl_minutes=cluster.kubernetes.join_token_ttl_minutes,
        workers={n.hostname: hardware.nodes[n.hostname] for n in nodes},
        join_scripts=join_scripts,
        control_planes={h: hardware.nodes[h] for h in cp_scripts},
        control_plane_scripts=cp_scripts,
        identities_scripts=identities,
        stack_kubeconfig_command=kubeadm.stack_kubeconfig_command(cluster) if core else None,
        node_labels={n.hostname: kubeadm.node_labels(cluster, n, leaves.get(n.hostname))
                     for n in nodes},
        kubeconfig=core_kubeconfig,
        kubelet_config_script=kubelet_script,
        reboots=reboots,
        reboot_queue=reboot.reboot_queue({n.hostname: n.su for n in nodes}),
        decommission=frozenset(cluster.gpu_nodes.decommission),
        upgrade=kube_upgrade,
        facts=_cluster_facts(cluster, core, bool(nodes)),
    ), pulumi.ResourceOptions(depends_on=list(fabrics) or None))

    artifacts: Artifacts = {}
    if init_script:
        artifacts[f"scripts/{init_host.hostname}/kubeadm-init.sh"] = init_script
        # What every API server reads (--admission-control-config-file); the twin too.
        artifacts["kubernetes/admission-config.yaml"] = \
            kubeadm.admission_configuration_yaml(cluster)
        artifacts["kubernetes/authentication-config.yaml"] = \
            kubeadm.authentication_configuration_yaml(cluster)
    if kubelet_script:
        artifacts[f"scripts/{init_host.hostname}/kubelet-config.sh"] = kubelet_script
    for host, script in join_scripts.items():
        artifacts[f"scripts/{host}/kubeadm-join.sh"] = script
    for host, script in cp_scripts.items():
        artifacts[f"scripts/{host}/kubeadm-join-control-plane.sh"] = script
    for host, script in identities.items():
        artifacts[f"scripts/{host}/identities.sh"] = script
    for host, plan in reboots.items():
        for i, step in enumerate(("check", "drain", "reboot", "after_boot", "uncordon"), 1):
            artifacts[f"scripts/{host}/planned-reboot/{i}-{step.replace('_', '-')}.sh"] = \
                getattr(plan, step)
    return kube, artifacts | _upgrade_artifacts(kube_upgrade)


def _cluster_facts(cluster: Cluster, core: bool, nodes: bool) -> dict[str, str] | None:
    """What the kubeadm cluster publishes: where it inits the control plane, the Kubernetes
    release and the quarantine; where it inits or owns GPU nodes, the GPU driver's owner and
    how the nodes are upgraded."""
    k = cluster.kubernetes
    owned = gpu_driver_facts(cluster.platform.gpu_operator.host_driver) \
        | upgrade_facts(k.upgrade_batch, k.gang_wait_minutes) if core or nodes else {}
    cp = kubernetes_facts(kubeadm.cluster_configuration(cluster),
                          kubeadm.kubelet_configuration(cluster)) \
        | quarantine_setup.quarantine_facts(cluster) if core else {}
    return (cp | owned) or None


def _platform_layer(cluster: Cluster, fabric_plan: FabricPlan, provider: k8s.Provider,
                    cp: ControlPlaneHost, kube: KubeadmCluster | None
                    ) -> tuple[Platform, Storage, dict[str, Any]]:
    """The platform releases and their objects, then the Lustre volumes; and the objects a
    split site's workloads part judges against (`site_facts.platform_facts`)."""
    after_kube = [kube] if kube is not None else []
    operator = cluster.platform.training_operator
    vendored = operator.source == "vendored"
    operator_dir = training_operator.training_operator_dir(vendored)
    with open(Path(__file__).resolve().parents[2] / operator_dir / "kustomization.yaml") as f:
        training_operator.check_training_operator_dir(f.read(), operator.version, vendored)
    queues, policies = volcano.queues(cluster), network_policies.network_policies(cluster)
    attachments = rdma.network_attachments(cluster, namespaces.training_namespaces(cluster))
    plat = Platform("platform", PlatformArgs(
        provider=provider,
        namespaces=namespaces.namespaces(cluster),
        network_policies=policies,
        admission_policies=pod_security.rdma_pod_policy(cluster),
        access_bindings=platform.access_bindings(cluster),
        system_budgets=system_spread.coredns_budget(cluster),
        node_health=health_detector.objects(cluster),
        releases=platform.helm_releases(cluster),
        release_objects={
            "metallb": ingress.metallb_objects(cluster),
            "cert-manager": ingress.cert_manager_objects(cluster),
            "network-operator": [rdma.nic_cluster_policy(cluster),
                                 rdma.ip_pool(cluster)],
            "volcano": queues + volcano.hypernodes(fabric_plan),
        },
        network_attachments=attachments,
        training_operator_dir=operator_dir,
        priority_classes=namespaces.priority_classes(),
        wait_connection=cp.connection,
    ), pulumi.ResourceOptions(depends_on=after_kube))
    store = Storage("storage", StorageArgs(
        provider=provider, csi_driver=storage.csi_driver_objects(cluster),
        volumes=storage.volumes(cluster), depends_on=list(plat.namespaces.values())),
        pulumi.ResourceOptions(depends_on=after_kube))
    return plat, store, site_facts.platform_facts([*queues, *policies, *attachments])


def _workload_layer(cluster: Cluster, provider: k8s.Provider, cp: ControlPlaneHost,
                    kube: KubeadmCluster | None, ready: list[Any]
                    ) -> tuple[dict[str, Workload], Artifacts]:
    """The acceptance test and its gate first, then training and serving."""
    artifacts: Artifacts = {}
    apps: dict[str, Workload] = {}
    init_host = cluster.control_plane[0]
    # Jobs sized by node count are resized only once the decommissioned nodes are drained.
    ready = ready + (list(kube.decommissions.values()) if kube is not None else [])
    test = cluster.workloads.nccl_test
    if test is not None:
        # The fabric acceptance test runs first and alone, on the GPU nodes that need it:
        # nccl-tests, checked on the control plane after the MPIJob finishes; a failed
        # check fails `pulumi up`, and training and serving are created only after it (and
        # land only on nodes that passed it).
        gate_script = acceptance.nccl_gate_script(cluster, test)
        artifacts[f"scripts/{init_host.hostname}/nccl-acceptance.sh"] = gate_script
        # After every GPU node's join: a node added in this update is there (untested) when
        # the gate chooses what to test.
        gate = AcceptanceGate(connection=cp.connection, script=gate_script,
                              facts=gate_facts(acceptance.gate_wait_minutes(test),
                                               acceptance.definition(cluster, test)),
                              depends_on=[*([kube.init] if kube and kube.init else []),
                                          *(kube.members.values() if kube else [])]) \
            if test.gate else None
        apps[test.name] = Workload(test.name, WorkloadArgs(
            provider=provider, manifests=[acceptance.nccl_test_mpijob(cluster, test)],
            depends_on=ready, gate=gate))
        if apps[test.name].gate is not None:
            ready = [*ready, apps[test.name].gate]
    apps |= {
        job.name: Workload(job.name, WorkloadArgs(
            provider=provider, manifests=training.training_objects(cluster, job),
            depends_on=ready))
        for job in cluster.workloads.training
    }
    for svc in cluster.workloads.inference:
        key = inference.api_key_script(svc)
        artifacts[f"scripts/{init_host.hostname}/{svc.name}-api-key.sh"] = key
        apps[svc.name] = Workload(svc.name, WorkloadArgs(
            provider=provider, manifests=inference.inference_objects(cluster, svc),
            depends_on=ready, setup=ControlPlaneSetup(
                connection=cp.connection, script=key,
                delete=inference.api_key_delete_command(svc))))
    return apps, artifacts


def _control_plane_host(cluster: Cluster, secrets: Secrets,
                        hardware: Hardware | None) -> ControlPlaneHost:
    host = cluster.control_plane[0]
    if hardware is not None and host.hostname in hardware.nodes:
        node = hardware.nodes[host.hostname]
        return ControlPlaneHost(host.hostname, node.connection, node.prepared)
    # Prepared by the core stack of a split site: only reached over SSH from here.
    return ControlPlaneHost(host.hostname, connection(
        str(host.management_ip), cluster.ssh_user, secrets.ssh_private_key, host.ssh_host_key))


def _kubernetes_upgrade(cluster: Cluster, nodes: Sequence[GpuNode],
                        core: bool) -> KubernetesUpgrade:
    """The upgrade commands this stack runs: the control planes (only where it inits the
    cluster), its GPU nodes in batches, one lane per SU."""
    first = cluster.control_plane[0].hostname
    control_planes = {h.hostname: upgrade.control_plane_script(cluster, h.hostname,
                                                               h.hostname == first)
                      for h in cluster.control_plane} if core else {}
    # Nodes being decommissioned too: still members until removed, and a second drain of a
    # drained node is a no-op.
    workers = [n.hostname for n in nodes]
    batches = upgrade.batches({n.hostname: n.su for n in nodes}, cluster.kubernetes.upgrade_batch)
    batch_of = {h: b for lane in batches.values() for b in lane for h in b}
    return KubernetesUpgrade(
        control_planes=control_planes,
        drains={h: upgrade.drain_script(cluster, h, batch_of[h]) for h in workers},
        nodes={h: upgrade.node_script(cluster, h) for h in workers},
        uncordons={h: upgrade.uncordon_script(cluster, h) for h in workers},
        batches=batches)


def _upgrade_artifacts(up: KubernetesUpgrade) -> dict[str, str]:
    files = {f"scripts/{host}/kubernetes-upgrade.sh": s for host, s in up.control_planes.items()}
    for host in up.nodes:
        for i, (step, scripts) in enumerate((("drain", up.drains), ("node", up.nodes),
                                             ("uncordon", up.uncordons)), 1):
            files[f"scripts/{host}/kubernetes-upgrade/{i}-{step}.sh"] = scripts[host]
    return files


def _planned_reboot(node: GpuNode, gang_wait_s: int, host_driver: str | None) -> PlannedReboot:
    host = node.hostname
    return PlannedReboot(
        fingerprint=reboot.boot_fingerprint(node, host_driver),
        check=reboot.check_script(node, host_driver),
        drain=reboot.drain_script(host, gang_wait_s),
        reboot=reboot.reboot_script(node, host_driver),
        after_boot=reboot.after_boot_script(node, host_driver),
        uncordon=reboot.uncordon_script(host))


def _host(cluster: Cluster, secrets: Secrets, hostname: str, role: str, script: str,
          bmc_address: Any, facts: dict[str, Any]) -> BareMetalNodeArgs:
    redfish = (bmc.redfish_command(cluster.bmc, str(bmc_address))
               if cluster.bmc and bmc_address else None)
    creds = cluster.credentials
    keys = (ssh_keys.authorized_keys_script(
        cluster.ssh_user, (creds.ssh_public_key, *creds.ssh_authorized_keys))
        if creds.ssh_public_key else None)
    return BareMetalNodeArgs(hostname=hostname, role=role, address=facts["address"],
                             ssh_user=cluster.ssh_user, ssh_private_key=secrets.ssh_private_key,
                             ssh_host_key=facts.get("hostKey"), prepare_script=script,
                             bmc_command=redfish, bmc_password=secrets.bmc_password_for(hostname),
                             authorized_keys_script=keys, facts=facts)
