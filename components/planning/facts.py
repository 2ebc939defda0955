"""Facts the policy pack and the preview need that no Kubernetes object carries (pure, no pulumi
import).

The kubeadm cluster publishes facts the same way: where the stack inits the control plane
`kubernetes_facts(...)` (the release, the API endpoint), where it owns GPU nodes
`gpu_driver_facts(...)` and `upgrade_facts(...)`. The pack's rules read them, and the preview
reads an upgrade, an endpoint move or a new driver from their old and new values in a diff,
never from the scripts that carry them.

The fabric component publishes `fabric_facts(...)` as its ComponentResource props (under the
key `facts`), so CrossGuard resource rules on `gpucluster:fabric:InfinibandFabric` read them
under `pulumi preview --policy-pack policies` and in the offline preview alike. They are
derived from the very texts the component pushes to the devices — the switch CLI (one port
description per cable) and the subnet-manager files — so a rule checks what will be applied,
not what a planner believes. Keys are strings (props are JSON-like); counts are ints (the
engine hands them to rules as floats).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.planning.host_scripts import kube_pkg_version
from components.planning.port_descriptions import hca_peer, port_descriptions, switch_peer

_PKEY_LINE = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*=\s*(0x[0-9a-fA-F]+)\b")
_SM_PRIORITY = re.compile(r"^\s*sm_priority\s+(\d+)\s*$", re.M)
_M_KEY_PROTECTION = re.compile(r"^\s*m_key_protection_level\s+(\d+)\s*$", re.M)
_KEY_OPTION = re.compile(r"^\s*(m_key|sm_key|sa_key)\s", re.M)


def fabric_facts(switch_cli: Mapping[str, str],
                 sm_files: Mapping[str, Mapping[str, str]],
                 master: str | None = None,
                 guids: FabricGuids | None = None) -> dict[str, Any]:
    """Summary of the fabric as configured: per switch its role, host- and switch-facing ports
    and highest port used; per host and rail the switches and HCA it is cabled to; the subnet
    managers' roles (`master`'s, restarted last, the others standbys), priorities and
    management-key settings; the partitions' pkeys; the GUIDs the subnet managers know each
    switch and rail HCA by (a new one behind the same name is a replaced part)."""
    names = set(switch_cli)
    switches: dict[str, Any] = {}
    rails: dict[str, dict[str, dict[str, Any]]] = {}
    for name, cli in sorted(switch_cli.items()):
        ports = port_descriptions(cli)
        host_ports = switch_ports = hca_ports = 0
        for desc in ports.values():
            sw = switch_peer(desc)
            if sw and sw[0] in names:
                switch_ports += 1
                continue
            host_ports += 1
            hca = hca_peer(desc)
            if hca:
                hca_ports += 1
                host, rail, hca_name = hca
                entry = rails.setdefault(host, {}).setdefault(
                    str(rail), {"hcas": [], "switches": []})
                if hca_name not in entry["hcas"]:
                    entry["hcas"].append(hca_name)
                entry["switches"].append(name)
        switches[name] = {
            # Compute HCAs hang off leaves only; a spine may carry a subnet-manager host.
            "role": "leaf" if hca_ports else "spine",
            "hostPorts": host_ports,
            "switchPorts": switch_ports,
            "highestPort": max(ports, default=0),
            "switchSmDisabled": any(line.strip() == "no ib sm" for line in cli.splitlines()),
        }
    sms = []
    partitions: dict[str, str] = {}
    for host, files in sorted(sm_files.items()):
        conf = next((t for p, t in files.items() if p.endswith("/opensm.conf")), "")
        m = _SM_PRIORITY.search(conf)
        mkp = _M_KEY_PROTECTION.search(conf)
        sms.append({"host": host, "role": "master" if host == master else "standby",
                    "priority": int(m.group(1)) if m else None,
                    "mKeyProtection": int(mkp.group(1)) if mkp else 0,
                    # key options in the file itself: a secret in state and plan, or a fixed
                    # key every copy of the file shares (the keys come from Pulumi secrets)
                    "keysInFile": sorted(set(_KEY_OPTION.findall(conf)))})
        parts = next((t for p, t in files.items() if p.endswith("/partitions.conf")), "")
        for line in parts.splitlines():
            pm = _PKEY_LINE.match(line)
            if pm and not line.lstrip().startswith("#"):
                partitions.setdefault(pm.group(1), pm.group(2).lower())
    return {
        "switches": switches,
        "rails": {h: dict(sorted(r.items(), key=lambda kv: int(kv[0])))
                  for h, r in sorted(rails.items())},
        "subnetManagers": sms,
        "partitions": [{"name": n, "pkey": k} for n, k in sorted(partitions.items())],
    } | (guids.facts() if guids is not None else {})


@dataclass(frozen=True)
class FabricGuids:
    """The GUIDs the plan gives the subnet managers' node-name maps: each switch's node GUID,
    each GPU node's rail HCAs' port GUIDs (host -> rail -> GUID)."""

    switches: Mapping[str, str]
    rails: Mapping[str, Mapping[int, str]]

    def facts(self) -> dict[str, Any]:
        return {"switchGuids": dict(sorted(self.switches.items())),
                "railGuids": {host: {str(r): g for r, g in sorted(rails.items())}
                              for host, rails in sorted(self.rails.items())}}


def host_facts(address: str, host_key: str | None, management_mac: str | None,
               rail_addresses: Sequence[str] = ()) -> dict[str, Any]:
    """What identifies a host's board and where its fabric addresses are: the management
    address the stack dials, its SSH host key and management MAC (either new behind the same
    address is a new board), and its IPoIB addresses (a GPU node's Lustre NIDs), in rail order."""
    return {"address": address,
            **({"hostKey": host_key} if host_key else {}),
            **({"managementMac": management_mac} if management_mac else {}),
            **({"railAddresses": list(rail_addresses)} if rail_addresses else {})}


def gate_facts(wait_minutes: int, definition: str) -> dict[str, str]:
    """The acceptance gate's settings: how long it waits for its run's GPUs, and the digest of
    the test's definition (a new one runs the test again on nodes that passed the old)."""
    return {"gateWaitMinutes": str(wait_minutes), "testDefinition": definition}


def gpu_driver_facts(host_driver: str | None) -> dict[str, str]:
    """Who owns the GPU driver, the hosts (DGX OS; each GPU node's planned reboot installs
    the release) or the GPU Operator's driver container, and the hosts' release when theirs:
    the pack's one-owner rule and the preview's driver upgrade read it."""
    return ({"gpuDriverOwner": "host", "hostGpuDriver": host_driver} if host_driver
            else {"gpuDriverOwner": "operator"})


def upgrade_facts(batch: int, gang_wait_minutes: int) -> dict[str, str]:
    """How the GPU nodes are upgraded: `batch` at a time within each SU (upgrade.batches, over
    the nodes by hostname), a drain waiting up to `gang_wait_minutes` for a gang job. Settings,
    not the batches themselves, so adding a node changes no fact."""
    return {"upgradeBatch": str(batch), "gangWaitMinutes": str(gang_wait_minutes)}


def kubernetes_facts(cluster_config: Mapping[str, Any], kubelet_config: Mapping[str, Any]
                     ) -> dict[str, str]:
    """From kubeadm's ClusterConfiguration and the KubeletConfiguration: the Kubernetes release
    the control plane is initialised and upgraded to, the version of the packages (kubeadm,
    kubelet, kubectl) the hosts install for it, the API endpoint `kubeadm init` writes into
    every certificate and kubeconfig (which never moves), the networks no running cluster
    takes anew, and the kubelet policies whose change needs the kubelet's checkpoint removed."""
    version = str(cluster_config["kubernetesVersion"]).removeprefix("v")
    networking = cluster_config["networking"]
    return {"kubernetesVersion": version, "kubernetesPackages": kube_pkg_version(version),
            "controlPlaneEndpoint": str(cluster_config["controlPlaneEndpoint"]),
            "podSubnet": str(networking["podSubnet"]),
            "serviceSubnet": str(networking["serviceSubnet"]),
            "dnsDomain": str(networking["dnsDomain"]),
            "kubeletCpuManagerPolicy": str(kubelet_config["cpuManagerPolicy"]),
            "kubeletMemoryManagerPolicy": str(kubelet_config["memoryManagerPolicy"])}
