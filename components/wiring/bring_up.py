"""What a reviewer reads in the preview besides the diff: the fabric's bill of materials and the
order `pulumi up` brings the cluster up in (presentation only; nothing is built here)."""

from __future__ import annotations

from typing import Protocol

from components.layers.fabric import InfinibandFabric
from components.layers.hardware import Hardware
from components.layers.platform import Platform
from components.layers.storage import Storage
from components.layers.workloads import Workload
from components.model.cluster import Cluster, SubnetManager
from components.model.gpu_nodes import GpuNode
from components.planning.fabric.model import FabricPlan
from components.planning.fabric.render import report_lines as fabric_report


class Built(Protocol):
    """What the blueprint built, as far as the bring-up order reads it (the blueprint is one;
    this module does not import it, so the layers' wiring does not depend on its report)."""

    cluster: Cluster
    hardware: Hardware | None
    fabric: InfinibandFabric | None
    fabric_plan: FabricPlan | None
    storage_fabric: InfinibandFabric | None
    storage_fabric_plan: FabricPlan | None
    platform: Platform | None
    storage: Storage | None
    workloads: dict[str, Workload]

    @property
    def owned_nodes(self) -> tuple[GpuNode, ...]: ...


def report_lines(bp: Built) -> list[str]:
    c = bp.cluster
    workers = [n.hostname for n in bp.owned_nodes]
    order = []
    if bp.fabric is not None:
        order += [
            f"prepare hosts ({len(bp.hardware.nodes) if bp.hardware else 0}: drivers, "
            "kernel, containerd, scratch RAID0, LNet)",
            "subnet managers: " + _sms(c.fabric.subnet_managers),
            f"switch settings: {len(bp.fabric.switches)} switches",
        ]
        if bp.storage_fabric is not None and c.fabric.storage_fabric is not None:
            order.append("storage fabric: subnet managers "
                         + _sms(c.fabric.storage_fabric.subnet_managers)
                         + f", {len(bp.storage_fabric.switches)} switches")
        order.append(f"kubeadm init on {c.control_plane[0].hostname}, then the kubelet "
                     "settings joining nodes read" + _ha_joins(c))
    if workers:
        order.append(f"kubeadm join: {len(workers)} GPU nodes ({_span(workers)}), each "
                     "after its planned reboot when its boot settings need one (kernel "
                     f"arguments), with its own {c.kubernetes.join_token_ttl_minutes}-minute "
                     "token")
    if bp.platform is not None and bp.storage is not None:
        order += ["platform: " + " -> ".join(bp.platform.releases),
                  f"storage: {len(bp.storage.claims)} Lustre volume claims"]
    if bp.workloads:
        order.append("workloads: " + ", ".join(bp.workloads))
    if c.split is not None:
        order.insert(0, f"this stack is the {c.split.part} part of a split site"
                     + (f" (SUs {', '.join(map(str, c.split.sus))})" if c.split.sus else ""))
    fabric = fabric_report(bp.fabric_plan) \
        if bp.fabric is not None and bp.fabric_plan is not None else []
    if bp.storage_fabric_plan is not None:
        fabric += fabric_report(bp.storage_fabric_plan)
    return fabric + ["Bring-up order:"] + [f"  {i}. {step}" for i, step in enumerate(order, 1)]


def _sms(sms: tuple[SubnetManager, ...]) -> str:
    return ", ".join(f"{sm.host} (priority {sm.priority})" for sm in sms)


def _ha_joins(c: Cluster) -> str:
    if len(c.control_plane) < 2:
        return ""
    others = ", ".join(h.hostname for h in c.control_plane[1:])
    vip = c.kubernetes.control_plane_endpoint.vip
    return f", then control-plane joins one at a time: {others} (kube-vip VIP {vip})"


def _span(names: list[str]) -> str:
    return f"{names[0]} … {names[-1]}" if len(names) > 2 else ", ".join(names)
