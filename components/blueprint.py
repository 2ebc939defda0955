"""The one wiring function: config -> pure plans -> one component per layer -> artifacts.

Layers are built top to bottom (hardware, fabric, bootstrap, platform, storage, workloads);
each receives only plain data and the resources it must wait for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi

from components.bootstrap import KubeadmCluster, KubeadmClusterArgs
from components.config import CLUSTER_KEY, Cluster, Secrets
from components.fabric import (
    FabricArgs,
    InfinibandFabric,
    SwitchArgs,
    sm_apply_script,
    sm_host_files,
)
from components.hardware import BareMetalNodeArgs, Hardware
from components.planning import (
    bmc,
    host_scripts,
    kubeadm,
    placement,
    platform,
    storage,
    switch_config,
    workloads,
)
from components.planning.fabric.model import FabricPlan
from components.planning.fabric.render import render_fabric_files
from components.planning.fabric.render import report_lines as fabric_report
from components.platform import Platform, PlatformArgs
from components.storage import Storage, StorageArgs
from components.workloads import AcceptanceGate, Workload, WorkloadArgs


@dataclass
class Blueprint:
    """What `build` made: the layer components, the fabric plan and the rendered artifacts."""

    cluster: Cluster
    fabric_plan: FabricPlan
    hardware: Hardware
    fabric: InfinibandFabric
    kubernetes: KubeadmCluster
    platform: Platform
    storage: Storage
    workloads: dict[str, Workload]
    # Relative path under build/<stack>/ -> text. Pure renderings; never holds a secret.
    artifacts: dict[str, str] = field(default_factory=dict)

    @property
    def report(self) -> list[str]:
        """What a reviewer reads in the preview besides the diff: fabric and bring-up order."""
        c = self.cluster
        workers = [n.hostname for n in c.nodes]
        order = [
            f"prepare hosts ({len(c.hosts) + len(workers)}: drivers, kernel, containerd, "
            "scratch RAID0, LNet)",
            "subnet managers: " + ", ".join(f"{sm.host} (priority {sm.priority})"
                                            for sm in c.fabric.subnet_managers),
            f"switch settings: {len(self.fabric.switches)} switches",
            f"kubeadm init on {c.control_plane[0].hostname}" + _ha_joins(c),
            f"kubeadm join: {len(workers)} GPU nodes ({_span(workers)}), each with its own "
            f"{c.kubernetes.join_token_ttl_minutes}-minute token",
            "platform: " + " -> ".join(self.platform.releases),
            f"storage: {len(self.storage.claims)} Lustre volume claims",
            "workloads: " + ", ".join(self.workloads),
        ]
        return fabric_report(self.fabric_plan) + ["Bring-up order:"] + [
            f"  {i}. {step}" for i, step in enumerate(order, 1)]


def build(cluster: Cluster, secrets: Secrets) -> Blueprint:
    artifacts: dict[str, str] = {}
    fabric_plan = placement.plan(cluster)
    fabric_files = render_fabric_files(fabric_plan)
    artifacts.update(fabric_files)

    # hardware
    host_args: dict[str, BareMetalNodeArgs] = {}
    for host in cluster.hosts:
        script = host_scripts.prepare_host(cluster, host, CLUSTER_KEY)
        host_args[host.hostname] = _host(cluster, secrets, host.hostname, host.role,
                                         str(host.management_ip), host.ssh_host_key, script,
                                         host.bmc_address)
    for node in cluster.nodes:
        script = host_scripts.prepare_gpu_node(cluster, node, CLUSTER_KEY)
        host_args[node.hostname] = _host(cluster, secrets, node.hostname, "gpu-worker",
                                         str(node.management_ip), node.ssh_host_key, script,
                                         node.bmc_address)
    for host, args in host_args.items():
        artifacts[f"scripts/{host}/prepare-host.sh"] = args.prepare_script
    hardware = Hardware("hardware", host_args)

    # fabric
    sm_files = {sm.hostname: sm_host_files(fabric_files, sm.hostname) for sm in fabric_plan.sm}
    for host, files in sm_files.items():
        artifacts[f"scripts/{host}/apply-opensm.sh"] = sm_apply_script(files)
    domain = cluster.network.domain
    ips, keys = cluster.fabric.switch_management_ips, cluster.fabric.switch_host_keys
    switches = {
        name: SwitchArgs(address=str(ips.get(name, f"{name}.{domain}")), host_key=keys.get(name),
                         cli=switch_config.switch_cli(name, ports, host_sm=bool(fabric_plan.sm)))
        for name, ports in switch_config.port_maps(fabric_plan).items()
    }
    for name, sw in switches.items():
        artifacts[f"fabric/switches/{name}.cli"] = sw.cli
    fabric = InfinibandFabric("fabric", FabricArgs(
        sm_hosts={h: (hardware.nodes[h], files) for h, files in sm_files.items()},
        switches=switches, switch_user=cluster.fabric.switch_user,
        switch_password=secrets.switch_password))

    # bootstrap
    init_host = cluster.control_plane[0]
    init_script = kubeadm.init_script(cluster, init_host)
    join_scripts = {n.hostname: kubeadm.join_script(cluster, n) for n in cluster.nodes}
    artifacts[f"scripts/{init_host.hostname}/kubeadm-init.sh"] = init_script
    for host, script in join_scripts.items():
        artifacts[f"scripts/{host}/kubeadm-join.sh"] = script
    cp_scripts = {h.hostname: kubeadm.control_plane_join_script(cluster, h)
                  for h in cluster.control_plane[1:]}
    for host, script in cp_scripts.items():
        artifacts[f"scripts/{host}/kubeadm-join-control-plane.sh"] = script
    leaves = placement.rail_leaves(fabric_plan)
    kube = KubeadmCluster("kubernetes", KubeadmClusterArgs(
        init_host=hardware.nodes[init_host.hostname],
        init_script=init_script,
        token_ttl_minutes=cluster.kubernetes.join_token_ttl_minutes,
        workers={n.hostname: hardware.nodes[n.hostname] for n in cluster.nodes},
        join_scripts=join_scripts,
        control_planes={h: hardware.nodes[h] for h in cp_scripts},
        control_plane_scripts=cp_scripts,
        node_labels={n.hostname: kubeadm.node_labels(cluster, n, leaves.get(n.hostname))
                     for n in cluster.nodes},
    ), pulumi.ResourceOptions(depends_on=[fabric]))

    # platform
    with open(Path(__file__).resolve().parent.parent / platform.TRAINING_OPERATOR_DIR
              / "kustomization.yaml") as f:
        platform.check_training_operator_dir(f.read(), cluster.platform.training_operator.version)
    plat = Platform("platform", PlatformArgs(
        provider=kube.provider,
        namespaces=platform.namespaces(cluster),
        releases=platform.helm_releases(cluster),
        release_objects={
            "metallb": platform.metallb_objects(cluster),
            "cert-manager": platform.cert_manager_objects(cluster),
            "network-operator": [platform.nic_cluster_policy(cluster),
                                 platform.ip_pool(cluster)],
            "volcano": platform.queues(cluster) + platform.hypernodes(fabric_plan),
        },
        network_attachments=platform.network_attachments(
            cluster, platform.training_namespaces(cluster)),
        training_operator_dir=platform.TRAINING_OPERATOR_DIR,
    ), pulumi.ResourceOptions(depends_on=[kube]))

    # storage
    store = Storage("storage", StorageArgs(
        provider=kube.provider, csi_driver=storage.csi_driver_objects(cluster),
        volumes=storage.volumes(cluster), depends_on=list(plat.namespaces.values())),
        pulumi.ResourceOptions(depends_on=[kube]))

    # workloads
    ready: list[Any] = [store, plat]
    apps = {
        job.name: Workload(job.name, WorkloadArgs(
            provider=kube.provider, manifests=workloads.training_objects(cluster, job),
            depends_on=ready))
        for job in cluster.workloads.training
    }
    apps |= {
        svc.name: Workload(svc.name, WorkloadArgs(
            provider=kube.provider, manifests=workloads.inference_objects(cluster, svc),
            depends_on=ready))
        for svc in cluster.workloads.inference
    }
    test = cluster.workloads.nccl_test
    if test is not None:
        # The fabric acceptance test: nccl-tests over the GPU nodes, checked on the control
        # plane after the MPIJob finishes; a failed check fails `pulumi up`.
        gate_script = workloads.nccl_gate_script(cluster, test)
        artifacts[f"scripts/{init_host.hostname}/nccl-acceptance.sh"] = gate_script
        gate = AcceptanceGate(connection=hardware.nodes[init_host.hostname].connection,
                              script=gate_script, depends_on=[kube.init]) \
            if test.gate else None
        apps[test.name] = Workload(test.name, WorkloadArgs(
            provider=kube.provider, manifests=[workloads.nccl_test_mpijob(cluster, test)],
            depends_on=ready, gate=gate))
    return Blueprint(cluster, fabric_plan, hardware, fabric, kube, plat, store, apps,
                     dict(sorted(artifacts.items())))


def _host(cluster: Cluster, secrets: Secrets, hostname: str, role: str, address: str,
          host_key: str | None, script: str, bmc_address: Any) -> BareMetalNodeArgs:
    redfish = (bmc.redfish_command(cluster.bmc, str(bmc_address))
               if cluster.bmc and bmc_address else None)
    return BareMetalNodeArgs(hostname=hostname, role=role, address=address,
                             ssh_user=cluster.ssh_user, ssh_private_key=secrets.ssh_private_key,
                             ssh_host_key=host_key, prepare_script=script,
                             bmc_command=redfish, bmc_password=secrets.bmc_password)


def _ha_joins(c: Cluster) -> str:
    if len(c.control_plane) < 2:
        return ""
    others = ", ".join(h.hostname for h in c.control_plane[1:])
    vip = c.kubernetes.control_plane_endpoint.vip
    return f", then control-plane joins one at a time: {others} (kube-vip VIP {vip})"


def _span(names: list[str]) -> str:
    return f"{names[0]} … {names[-1]}" if len(names) > 2 else ", ".join(names)
