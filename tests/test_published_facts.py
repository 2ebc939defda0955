"""The facts components publish are what their commands apply.

The preview reads a new board, a new HCA or switch, new rail addresses, a changed acceptance
test and the cluster-wide settings from the facts the hosts, fabrics, workloads and the
kubeadm cluster publish, never from the scripts. That is only right while each fact equals
what the scripts it summarises put on the hosts; these tests hold them equal in prod's
committed rendering (itself held up to date by tests/test_offline_repo.py), reading each
script as the host or device reads it.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

RENDERED = Path(__file__).resolve().parents[1] / "rendered" / "prod"


@cache
def _inputs(layer: str, folder: str, name: str) -> dict[str, Any]:
    doc = yaml.safe_load((RENDERED / layer / folder / f"{name}.yaml").read_text())
    return dict(doc["inputs"] or {})


def _components(layer: str, folder: str) -> dict[str, dict[str, Any]]:
    return {p.stem: _inputs(layer, folder, p.stem)
            for p in sorted((RENDERED / layer / folder).glob("*.yaml"))}


def _command(layer: str, name: str) -> dict[str, Any]:
    return _inputs(layer, "command-remote-Command", name)


def test_each_host_publishes_the_board_and_addresses_its_preparation_applies() -> None:
    hosts = _components("hardware", "gpucluster-hardware-BareMetalNode")
    assert len(hosts) == 13  # 8 GPU nodes, 3 control planes, 2 subnet-manager hosts
    for host, inputs in hosts.items():
        facts, prepare = inputs["facts"], _command("hardware", f"{host}-prepare")
        # What the stack dials, and the key it accepts there.
        assert facts["address"] == prepare["connection"]["host"], host
        assert facts.get("hostKey") == prepare["connection"].get("hostKey"), host
        script = prepare["stdin"]
        mac = re.search(r'^MANAGEMENT_MAC="([^"]*)"$', script, re.M)
        assert facts.get("managementMac") == (mac.group(1) or None if mac else None), host
        # The netplan the LNet step writes: one address per rail interface, in rail order.
        netplan = re.findall(r"^\s+addresses: \[([\d.]+)/\d+\]$", script, re.M)
        assert facts.get("railAddresses", []) == netplan, host
        assert len(netplan) == (8 if host.startswith("gpu-node-") else 0), host


def test_each_fabric_publishes_the_guids_its_subnet_managers_are_given() -> None:
    facts = _inputs("fabric", "gpucluster-fabric-InfinibandFabric", "fabric")["facts"]
    for sm in ("sm-01", "sm-02"):
        # The node-name map opensm, ibnetdiscover and ibtracert name ports by.
        names = dict(re.findall(r'^\s*(0x[0-9a-f]{16}) "([^"]+)"$',
                                _command("fabric", f"{sm}-opensm")["stdin"], re.M))
        rails = {(m[1], m[2]): guid for guid, name in names.items()
                 if (m := re.fullmatch(r"([^/]+)/rail(\d+)/[^/]+", name))}
        switches = {name: guid for guid, name in names.items() if "/" not in name}
        assert {(h, r): g for h, by_rail in facts["railGuids"].items()
                for r, g in by_rail.items()} == rails, sm
        assert facts["switchGuids"] == switches, sm
        assert len(rails) == 64 and len(switches) == 6, sm


def test_the_acceptance_gate_publishes_its_wait_and_the_tests_definition() -> None:
    facts = _inputs("workloads", "gpucluster-workloads-Workload", "nccl-allreduce")["facts"]
    gate = _command("workloads", "nccl-allreduce-acceptance")["stdin"]
    wait = re.search(r"GPUs were not free within (\d+) minutes", gate)
    definition = re.search(r"--definition (\S+) ", gate)
    assert wait and definition
    assert facts == {"gateWaitMinutes": wait.group(1), "testDefinition": definition.group(1)}


def test_the_cluster_publishes_the_settings_kubeadm_and_the_kubelet_are_given() -> None:
    facts = _inputs("bootstrap", "gpucluster-bootstrap-KubeadmCluster", "kubernetes")["facts"]
    init = _command("bootstrap", "mgmt-01-kubeadm-init")["stdin"]
    config = {d["kind"]: d for d in yaml.safe_load_all(_kubeadm_documents(init))
              if isinstance(d, dict)}
    cluster, kubelet = config["ClusterConfiguration"], config["KubeletConfiguration"]
    assert facts["kubernetesVersion"] == cluster["kubernetesVersion"].removeprefix("v")
    assert facts["controlPlaneEndpoint"] == cluster["controlPlaneEndpoint"]
    for key in ("podSubnet", "serviceSubnet", "dnsDomain"):
        assert facts[key] == cluster["networking"][key], key
    assert facts["kubeletCpuManagerPolicy"] == kubelet["cpuManagerPolicy"]
    assert facts["kubeletMemoryManagerPolicy"] == kubelet["memoryManagerPolicy"]


def _kubeadm_documents(script: str) -> str:
    """The kubeadm configuration the init script writes (a here-document of YAML documents)."""
    m = re.search(r"<<'(\w+)'\n(apiVersion: kubeadm\.k8s\.io/.*?)\n\1\n", script, re.S)
    assert m, "no kubeadm configuration in the init script"
    return m.group(2)
