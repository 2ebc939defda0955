"""The stack config model: every mistake is caught before anything is registered.

Each bad-input test starts from the real prod config (Pulumi.prod.yaml + inventory/prod.csv),
changes one thing, and checks that exactly that mistake is reported: its key path, the bad value
and a fix, and nothing else. Expected values come from the hardware (DGX H100, the inventory
file) and the stack file, not from the code under test.
"""

from __future__ import annotations

import csv
import ipaddress
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from support.project import prod_raw

from components.model.cluster import Cluster, Partition
from components.model.fields import CLUSTER_KEY, ConfigError
from components.wiring.loading import validate_cluster

PROJECT_DIR = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data" / "config"
PROD_INVENTORY = PROJECT_DIR / "inventory" / "prod.csv"

# DGX H100: the eight compute ConnectX-7s, rail r = position r (not mlx5_0..7).
DGX_H100_HCAS = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
PROD_NODES = [f"gpu-node-{i:02d}" for i in range(8)]


# ---------------------------------------------------------------- fixtures and building blocks


@pytest.fixture
def prod() -> dict:
    """The `gpu-cluster:cluster` object of Pulumi.prod.yaml; a fresh copy per test."""
    return prod_raw()


_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _keys(path: str) -> list[str | int]:
    """`workloads.training[0].nodes` -> ['workloads', 'training', 0, 'nodes']."""
    return [int(i) if i else k for k, i in _TOKEN.findall(path)]


def _parent(raw: dict, path: str) -> tuple[dict | list, str | int]:
    *head, last = _keys(path)
    node = raw
    for key in head:
        node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
    return node, last


def mutate(raw: dict, path: str, value) -> dict:
    """Set one value by its key path, creating mappings on the way."""
    node, last = _parent(raw, path)
    node[last] = value
    return raw


def delete(raw: dict, path: str):
    node, last = _parent(raw, path)
    return node.pop(last)


def rename(raw: dict, path: str, new_key: str) -> dict:
    node, last = _parent(raw, path)
    node[new_key] = node.pop(last)
    return raw


def validate(raw: dict, project_dir: Path = PROJECT_DIR) -> Cluster:
    return validate_cluster(raw, project_dir)


def config_error(raw: dict, project_dir: Path = PROJECT_DIR) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate(raw, project_dir)
    return info.value


def prod_inventory_rows() -> list[dict[str, str]]:
    with PROD_INVENTORY.open(newline="") as fh:
        return list(csv.DictReader(fh))


def write_inventory(tmp_path: Path, text: str) -> Path:
    """Put an inventory where prod's inventoryFile points, under a scratch project dir."""
    target = tmp_path / "inventory" / "prod.csv"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return tmp_path


def edited_inventory(old: str, new: str) -> Callable[[dict, Path], Path]:
    def change(raw: dict, tmp_path: Path) -> Path:
        text = PROD_INVENTORY.read_text()
        assert text.count(old) == 1, f"{old!r} must occur exactly once in inventory/prod.csv"
        return write_inventory(tmp_path, text.replace(old, new))

    return change


def appended_inventory(rows: str) -> Callable[[dict, Path], Path]:
    def change(raw: dict, tmp_path: Path) -> Path:
        return write_inventory(tmp_path, PROD_INVENTORY.read_text() + rows)

    return change


def setting(*pairs) -> Callable[[dict, Path], None]:
    """setting('a.b', 1, 'c[0].d', 2): change values by key path."""

    def change(raw: dict, tmp_path: Path) -> None:
        for path, value in zip(pairs[::2], pairs[1::2], strict=True):
            mutate(raw, path, value)

    return change


def with_host(**host) -> Callable[[dict, Path], None]:
    def change(raw: dict, tmp_path: Path) -> None:
        raw["hosts"].append({"rack": "r02", **host})

    return change


def with_control_plane(count: int, vip: str | None = None) -> Callable[[dict, Path], None]:
    """Exactly `count` control-plane hosts (prod's first ones, then new ones), behind `vip`."""
    def change(raw: dict, tmp_path: Path) -> None:
        planes = [h for h in raw["hosts"] if h["role"] == "control-plane"]
        for i in range(len(planes) + 1, count + 1):
            planes.append({"hostname": f"mgmt-{i:02d}", "role": "control-plane",
                           "managementIp": f"10.10.0.{18 + i}", "rack": "r02"})
        raw["hosts"] = planes[:count] + [h for h in raw["hosts"] if h["role"] != "control-plane"]
        endpoint = raw["kubernetes"]["controlPlaneEndpoint"]
        for key in ("vip", "interface"):
            endpoint.pop(key, None)
        if vip:
            endpoint["vip"] = vip

    return change


def bad(id: str, change, path: str, shown: tuple[str, ...], says: tuple[str, ...] = ()):
    """One bad-input case: `change` makes the mistake; `path` is where it must be reported;
    one of `shown` (the bad value as the message may print it) and all of `says` must appear."""
    return pytest.param(change, path, shown, says, id=id)


# ---------------------------------------------------------------- one mistake, one problem

TRAIN = "workloads.training[0]"
INFER = "workloads.inference[0]"

BAD_INPUTS = [
    # Names and addresses.
    bad("hostname-taken-by-a-gpu-node", setting("hosts[0].hostname", "gpu-node-03"),
        "gpuNodes.ranges[0] (gpu-node-03)", ("gpu-node-03",), ("hosts[0].hostname",)),
    bad("hostname-repeated-between-hosts",
        with_host(hostname="mgmt-01", role="login", managementIp="10.10.0.20"),
        "hosts[5].hostname", ("mgmt-01",), ("hosts[0].hostname",)),
    bad("hostname-uppercase-and-underscore", setting("hosts[0].hostname", "Mgmt_01"),
        "hosts[0].hostname", ("Mgmt_01",), ("RFC 1123",)),
    bad("hostname-64-characters", setting("hosts[0].hostname", "m" * 64),
        "hosts[0].hostname", ("m" * 64,), ("63",)),
    bad("management-ip-repeated", setting("hosts[4].managementIp", "10.10.0.11"),
        "hosts[4].managementIp", ("10.10.0.11",), ("hosts[3].managementIp",)),
    bad("management-ip-of-a-gpu-node", setting("hosts[0].managementIp", "10.10.1.103"),
        "gpuNodes.ranges[0] (gpu-node-03).managementIp", ("10.10.1.103",),
        ("hosts[0].managementIp",)),
    bad("management-ip-outside-management-cidr", setting("hosts[0].managementIp", "10.20.0.10"),
        "hosts[0].managementIp", ("10.20.0.10",), ("10.10.0.0/16",)),
    bad("management-ip-not-an-address", setting("hosts[0].managementIp", "10.10.0.300"),
        "hosts[0].managementIp", ("10.10.0.300",)),
    bad("bmc-address-repeated", setting("hosts[1].bmcAddress", "10.11.0.10"),
        "hosts[1].bmcAddress", ("10.11.0.10",), ("hosts[0].bmcAddress",)),
    bad("host-role-unknown", setting("hosts[0].role", "gpu-worker"),
        "hosts[0].role", ("gpu-worker",), ("control-plane",)),
    bad("environment-abbreviated", setting("environment", "prod"),
        "environment", ("prod",), ("production",)),
    # GPUs, HCAs, inventory facts.
    bad("gpu-count-9", setting("gpuNodes.template.gpu.count", 9),
        "gpuNodes.template.gpu.count", ("9",)),
    bad("gpu-model-a100", setting("gpuNodes.template.gpu.model", "A100-SXM-80GB"),
        "gpuNodes.template.gpu.model", ("A100-SXM-80GB",), ("H100-SXM-80GB",)),
    bad("hca-list-shorter-than-gpu-count",
        setting("gpuNodes.overrides", {"gpu-node-05": {"hcas": DGX_H100_HCAS[:7]}}),
        "gpuNodes.ranges[0] (gpu-node-05).hcas", ("'mlx5_10']",), ("7 compute HCAs for 8 GPUs",)),
    bad("hca-list-shorter-than-gpu-count-in-template",
        setting("gpuNodes.template.hcas", DGX_H100_HCAS[:7]),
        "gpuNodes.template.hcas", ("'mlx5_10']",), ("7 compute HCAs for 8 GPUs",)),
    bad("hca-name-eth0", setting("gpuNodes.template.hcas[2]", "eth0"),
        "gpuNodes.template.hcas[2]", ("eth0",), ("mlx5_0",)),
    # Rail interfaces: the OS's stable names, never the kernel's probe-order ibN.
    bad("rail-interface-in-the-kernel-namespace", setting("gpuNodes.template.netdevs[0]", "ib0"),
        "gpuNodes.template.netdevs[0]", ("ib0",), ("probe order", "ibdev2netdev", "ibp24s0")),
    bad("rail-interface-longer-than-ifnamsiz",
        setting("gpuNodes.template.netdevs[1]", "infiniband-rail-1"),
        "gpuNodes.template.netdevs[1]", ("infiniband-rail-1",), ("15 characters",)),
    bad("rail-interfaces-fewer-than-rails",
        setting("gpuNodes.template.netdevs", ["ibp24s0", "ibp64s0"]),
        "gpuNodes.template.netdevs", ("'ibp64s0']",), ("2 rail interfaces for 8 rails",
                                                        "ibdev2netdev")),
    bad("rail-interface-twice", setting("gpuNodes.template.netdevs[3]", "ibp64s0"),
        "gpuNodes.template.netdevs[3]", ("ibp64s0",), ("already used by",)),
    bad("rail-0-differs-on-one-node",
        setting("gpuNodes.overrides", {"gpu-node-05": {"netdevs": [
            "ibp25s0", "ibp64s0", "ibp79s0", "ibp94s0", "ibp154s0", "ibp192s0", "ibp206s0",
            "ibp220s0"]}}),
        "gpuNodes.overrides.gpu-node-05.netdevs[0]", ("ibp25s0",),
        ("template's ibp24s0", "master on every node")),
    bad("ssh-as-root", setting("sshUser", "root"), "sshUser", ("root",),
        ("/run/nologin", "passwordless sudo")),
    # What the Pulumi CLI hands the program for an unquoted 0x… (a YAML integer): a float.
    bad("guid-unquoted", setting("fabric.switchGuids.spine-01", float(0xfc6a1c0300a10001)),
        "fabric.switchGuids.spine-01", ("1.8188",), ("quote it", "rounds it")),
    bad("sm-guid-unquoted", setting("hosts[3].fabricPortGuid", 0xb83fd20300f10002),
        "hosts[3].fabricPortGuid", ("13276",), ("quote it",)),
    bad("ssh-public-key-garbled", setting("credentials.sshPublicKey", "ssh-ed25519 not-base64!"),
        "credentials.sshPublicKey", ("not-base64",), ("OpenSSH public key",)),
    # Local NVMe data drives: by what they are, never by kernel name.
    bad("nvme-kernel-names-retired",
        setting("gpuNodes.template.nvmeDevices", ["nvme0n1", "nvme1n1"]),
        "gpuNodes.template.nvmeDevices", ("nvme0n1",), ("M.2 OS drives", "dataDrives:")),
    bad("data-drive-size-in-gb", setting("gpuNodes.template.dataDrives.sizeTb", 3840),
        "gpuNodes.template.dataDrives.sizeTb", ("3840",), ("decimal terabytes", "3.84")),
    bad("data-drive-count-0", setting("gpuNodes.template.dataDrives.count", 0),
        "gpuNodes.template.dataDrives.count", ("got 0)",), ("greater than or equal to 1",)),
    bad("data-drive-model-with-shell-characters",
        setting("gpuNodes.template.dataDrives.models", ['MZQL"$(reboot)']),
        "gpuNodes.template.dataDrives.models[0]", ("MZQL",), ("nvme list",)),
    bad("hca-used-twice-on-a-node",
        edited_inventory("gpu-node-02,2,mlx5_4,", "gpu-node-02,2,mlx5_0,"),
        "gpuNodes.ranges[0] (gpu-node-02).rails[2].hca", ("mlx5_0",),
        ("gpuNodes.ranges[0] (gpu-node-02).rails[0].hca",)),
    bad("port-guid-repeated-in-inventory",
        edited_inventory("0xb83fd20300a33c14", "0xb83fd20300a13c10"),
        "inventory:gpu-node-02.rails[2].portGuid", ("0xb83fd20300a13c10",),
        ("gpu-node-00.rails[0].portGuid",)),
    bad("port-guid-malformed-in-inventory",
        edited_inventory("0xb83fd20300a33c14", "0xb83fd20300a33c1z"),
        "inventoryFile", ("0xb83fd20300a33c1z",), ("gpu-node-02",)),
    bad("fabric-port-guid-repeated-in-stack-file",
        setting("hosts[4].fabricPortGuid", "0xb83fd20300f10002"),
        "hosts[4].fabricPortGuid", ("0xb83fd20300f10002",), ("hosts[3].fabricPortGuid",)),
    bad("inventory-host-the-stack-does-not-define",
        appended_inventory("gpu-node-08,0,mlx5_0,0xb83fd20300a93c10,5c:25:73:31:08:10,\n"),
        "inventoryFile", ("gpu-node-08",), ("does not define",)),
    bad("override-for-a-node-no-range-defines",
        setting("gpuNodes.overrides", {"gpu-node-08": {"rack": "r02"}}),
        "gpuNodes.overrides.gpu-node-08", ("gpu-node-08",)),
    bad("override-for-a-control-plane-host",
        setting("gpuNodes.overrides", {"mgmt-01": {"rack": "r09"}}),
        "gpuNodes.overrides.mgmt-01", ("mgmt-01",)),
    bad("range-count-0", setting("gpuNodes.ranges[0].count", 0),
        "gpuNodes.ranges[0].count", ("0",)),
    bad("range-prefix-uppercase", setting("gpuNodes.ranges[0].prefix", "GPU-node-"),
        "gpuNodes.ranges[0].prefix", ("GPU-node-",)),
    # Fabric placement, subnet managers, partitions.
    bad("two-nodes-on-one-su-slot",
        setting("gpuNodes.overrides", {"gpu-node-03": {"slot": 2}}),
        "gpuNodes.ranges[0] (gpu-node-03)", ("su 1 slot 2",), ("gpu-node-02",)),
    bad("slot-beyond-nodes-per-su", setting("gpuNodes.ranges[0].firstSlot", 25),
        "gpuNodes.ranges[0] (gpu-node-07).slot", ("32",), ("0..31", "su: 2")),
    bad("nodes-per-su-33", setting("fabric.nodesPerSu", 33), "fabric.nodesPerSu", ("33",)),
    bad("sm-priority-16", setting("fabric.subnetManagers[1].priority", 16),
        "fabric.subnetManagers[1].priority", ("16",), ("15",)),
    bad("sm-priorities-equal", setting("fabric.subnetManagers[1].priority", 15),
        "fabric.subnetManagers[1].priority", ("15",), ("fabric.subnetManagers[0].priority",)),
    bad("single-sm-in-production", lambda raw, _: delete(raw, "fabric.subnetManagers[1]") and None,
        "fabric.subnetManagers", ("sm-01",), ("standby",)),
    bad("sm-on-a-control-plane-host", setting("fabric.subnetManagers[1].host", "mgmt-01"),
        "fabric.subnetManagers[1].host", ("mgmt-01",), ("sm-host",)),
    bad("sm-host-listed-twice", setting("fabric.subnetManagers[1].host", "sm-01"),
        "fabric.subnetManagers[1].host", ("sm-01",)),
    bad("pkey-0x0000", setting("fabric.partitions[0].pkey", 0x0000),
        "fabric.partitions[0].pkey", ("got 0)", "0x0000"), ("0x0001-0x7FFE",)),
    bad("pkey-0x7fff-default-partition", setting("fabric.partitions[0].pkey", 0x7FFF),
        "fabric.partitions[0].pkey", ("32767", "0x7fff", "0x7FFF"), ("0x0001-0x7FFE",)),
    bad("pkey-0x8001-membership-bit", setting("fabric.partitions[0].pkey", 0x8001),
        "fabric.partitions[0].pkey", ("32769", "0x8001"), ("0x0001-0x7FFE",)),
    bad("pkey-0x8001-as-text", setting("fabric.partitions[0].pkey", "0x8001"),
        "fabric.partitions[0].pkey", ("0x8001",), ("0x0001-0x7FFE",)),
    bad("pkey-true", setting("fabric.partitions[0].pkey", True),
        "fabric.partitions[0].pkey", ("True",)),
    # Control plane and Kubernetes.
    bad("two-control-plane-hosts", with_control_plane(2),
        "hosts", ("mgmt-02",), ("odd",)),
    bad("three-control-plane-hosts-without-vip", with_control_plane(3),
        "kubernetes.controlPlaneEndpoint.vip", ("3 control-plane hosts",)),
    bad("vip-outside-management-network", with_control_plane(3, vip="172.16.0.5"),
        "kubernetes.controlPlaneEndpoint.vip", ("172.16.0.5",)),
    bad("vip-is-a-host-address", with_control_plane(3, vip="10.10.0.11"),
        "kubernetes.controlPlaneEndpoint.vip", ("10.10.0.11",)),
    bad("pod-cidr-overlaps-service-cidr", setting("kubernetes.podCidr", "10.96.0.0/16"),
        "kubernetes.serviceCidr", ("10.96.0.0/16",), ("kubernetes.podCidr",)),
    bad("pod-cidr-overlaps-management-network", setting("kubernetes.podCidr", "10.10.128.0/17"),
        "kubernetes.podCidr", ("10.10.128.0/17",), ("network.managementCidr",)),
    bad("rdma-cidr-overlaps-pod-cidr", setting("network.rdmaCidr", "10.244.128.0/17"),
        "network.rdmaCidr", ("10.244.128.0/17",), ("kubernetes.podCidr",)),
    # nv-ipam's 64 addresses per GPU node and a spare block: 9 x 64 = 576 > a /23's 512.
    bad("rdma-cidr-too-small-for-the-nodes", setting("network.rdmaCidr", "192.168.0.0/23"),
        "network.rdmaCidr", ("192.168.0.0/23",), ("8 GPU nodes x 64", "/22 or larger")),
    bad("pod-cidr-with-host-bits", setting("kubernetes.podCidr", "10.244.0.1/16"),
        "kubernetes.podCidr", ("10.244.0.1/16",)),
    bad("join-token-ttl-0", setting("kubernetes.joinTokenTtlMinutes", 0),
        "kubernetes.joinTokenTtlMinutes", ("got 0)",), ("5",)),
    bad("join-token-ttl-2000", setting("kubernetes.joinTokenTtlMinutes", 2000),
        "kubernetes.joinTokenTtlMinutes", ("2000",), ("1440",)),
    bad("kubernetes-version-without-patch", setting("kubernetes.version", "1.35"),
        "kubernetes.version", ("1.35",)),
    bad("topology-manager-single-numa-node",
        setting("kubernetes.kubelet.topologyManagerPolicy", "single-numa-node"),
        "kubernetes.kubelet.topologyManagerPolicy", ("single-numa-node",), ("8 GPUs",)),
    bad("kubelet-max-pods-500", setting("kubernetes.kubelet.maxPods", 500),
        "kubernetes.kubelet.maxPods", ("500",)),
    # Load-balancer addresses live on their own service network, never the management one
    # (SSH, kubelets, etcd and switch management share it).
    bad("ingress-pool-on-the-management-network",
        setting("network.ingressPool", ["10.10.5.240", "10.10.5.250"]),
        "network.ingressPool", ("10.10.5.240",), ("never on the management network",)),
    bad("load-balancer-network-inside-management",
        setting("network.loadBalancerCidr", "10.10.5.0/24",
                "network.ingressPool", ["10.10.5.240", "10.10.5.250"]),
        "network.loadBalancerCidr", ("10.10.5.0/24",), ("overlaps network.managementCidr",)),
    bad("ingress-pool-descending", setting("network.ingressPool", ["10.12.0.250", "10.12.0.240"]),
        "network.ingressPool", ("10.12.0.250",), ("ascending",)),
    # nvidia-fs serves local NVMe and vendors' RDMA filesystems, not the community Lustre client.
    bad("gpudirect-storage-without-a-filesystem-it-serves",
        setting("gpuNodes.template.dataDrives", None),
        "platform.gpuOperator.gpudirectStorage", ("True",), ("community Lustre client",)),
    # Images and versions.
    bad("vllm-before-its-security-fixes", setting(f"{INFER}.image", "vllm/vllm-openai:v0.31.0"),
        f"{INFER}.image", ("v0.31.0",), ("v0.32.0 or later",)),
    bad("inference-image-latest", setting(f"{INFER}.image", "vllm/vllm-openai:latest"),
        f"{INFER}.image", ("vllm/vllm-openai:latest",), ("latest",)),
    bad("inference-image-untagged", setting(f"{INFER}.image", "vllm/vllm-openai"),
        f"{INFER}.image", ("vllm/vllm-openai",), ("pinned",)),
    bad("inference-image-empty-digest", setting(f"{INFER}.image", "vllm/vllm-openai@sha256:"),
        f"{INFER}.image", ("vllm/vllm-openai@sha256:",)),
    bad("training-image-untagged", setting(f"{TRAIN}.image", "nvcr.io/nvidia/pytorch"),
        f"{TRAIN}.image", ("nvcr.io/nvidia/pytorch",)),
    bad("nccl-image-registry-port-but-no-tag",
        setting("workloads.ncclTest.image", "registry.local:5000/nccl-tests"),
        "workloads.ncclTest.image", ("registry.local:5000/nccl-tests",)),
    bad("chart-version-latest", setting("platform.metallb.version", "latest"),
        "platform.metallb.version", ("latest",), ("exact version",)),
    bad("chart-version-caret-range", setting("platform.certManager.version", "^1.2.0"),
        "platform.certManager.version", ("^1.2.0",), ("exact version",)),
    bad("chart-repo-plain-http", setting("platform.metallb.repo", "http://metallb.github.io/metallb"),
        "platform.metallb.repo", ("http://metallb.github.io/metallb",)),
    bad("gpu-operator-v26.3.2-with-network-operator-26.4.0",
        setting("platform.networkOperator.version", "26.4.0"),
        "platform.networkOperator.version", ("26.4.0",), ("v26.3.2", "RDMA")),
    bad("network-operator-release-unknown", setting("platform.networkOperator.version", "25.10.0"),
        "platform.networkOperator.version", ("25.10.0",), ("26.4.1",)),
    bad("gpu-operator-release-unknown", setting("platform.gpuOperator.version", "v25.3.0"),
        "platform.gpuOperator.version", ("v25.3.0",), ("v26.3.2",)),
    bad("volcano-older-than-1.12", setting("platform.volcano.version", "1.11.0"),
        "platform.volcano.version", ("1.11.0",), ("HyperNode",)),
    # Storage and workloads.
    bad("doca-from-nowhere", setting("platform.networkOperator.docaSource", None),
        "platform.networkOperator.docaSource", ("got None)",), ("installs DOCA-OFED",)),
    bad("lustre-key-not-a-fingerprint",
        setting("storage.lustreClient.source.keyFingerprint", "A024F6F0E6D6A281"),
        "storage.lustreClient.source.keyFingerprint", ("A024F6F0E6D6A281",)),
    bad("lustre-client-from-plain-http",
        setting("storage.lustreClient.source.url", "http://apt.cluster.internal/lustre/"),
        "storage.lustreClient.source.url", ("http://apt.cluster.internal/lustre/",)),
    bad("storage-server-named-like-a-node",
        setting("fabric.storageServers[0].hostname", "gpu-node-03"),
        "fabric.storageServers[0].hostname", ("gpu-node-03",), ("hostname already used",)),
    bad("storage-port-guid-used-twice",
        setting("fabric.storageServers[1].portGuids[0]", "0x0c42a10300b10001"),
        "fabric.storageServers[1].portGuids[0]", ("0x0c42a10300b10001",),
        ("GUID already used",)),
    bad("lustre-capacity-in-decimal-units", setting("storage.lustre[0].capacity", "100TB"),
        "storage.lustre[0].capacity", ("100TB",), ("100Ti",)),
    bad("dataset-is-the-checkpoints-file-system", setting(f"{TRAIN}.dataset", "checkpoints"),
        f"{TRAIN}.dataset", ("checkpoints",), ("purpose: dataset",)),
    bad("checkpoints-on-the-dataset-file-system", setting(f"{TRAIN}.checkpoints", "training-data"),
        f"{TRAIN}.checkpoints", ("training-data",), ("purpose: checkpoints",)),
    bad("weights-on-an-undefined-file-system", setting(f"{INFER}.weights", "llama-weights"),
        f"{INFER}.weights", ("llama-weights",), ("model-weights",)),
    bad("training-more-nodes-than-the-cluster",
        setting(f"{TRAIN}.nodes", 16, f"{TRAIN}.dataParallel", 16),
        f"{TRAIN}.nodes", ("16",), ("8 GPU nodes",)),
    bad("training-tp-pp-dp-not-the-gpu-count", setting(f"{TRAIN}.dataParallel", 8),
        f"{TRAIN}.dataParallel", ("got 8)",), ("32",)),
    bad("training-tp-across-nodes",
        setting(f"{TRAIN}.tensorParallel", 16, f"{TRAIN}.dataParallel", 2),
        f"{TRAIN}.tensorParallel", ("16",), ("<= 8",)),
    bad("training-on-half-nodes",
        setting(f"{TRAIN}.gpusPerNode", 4, f"{TRAIN}.tensorParallel", 4),
        f"{TRAIN}.gpusPerNode", ("got 4)",), ("gpusPerNode: 8",)),
    bad("training-elastic-minimum-above-nodes", setting(f"{TRAIN}.elasticMinNodes", 9),
        f"{TRAIN}.elasticMinNodes", ("9",)),
    bad("inference-tp-not-a-divisor-of-the-pod-gpus", setting(f"{INFER}.tensorParallel", 3),
        f"{INFER}.tensorParallel", ("got 3)",), ("gpusPerPod 8",)),
    # One replica per node: a 4-GPU replica leaves half of each serving node idle.
    bad("inference-replica-strands-half-a-node",
        setting(f"{INFER}.gpusPerPod", 4),
        f"{INFER}.gpusPerPod", ("got 4)",), ("4 of each serving node's 8 GPUs idle",
                                             "gpusPerPod to 8")),
    bad("inference-replicas-need-more-gpus-than-exist",
        setting(f"{INFER}.autoscaling.maxReplicas", 17),
        f"{INFER}.autoscaling.maxReplicas", ("17",), ("64",)),
    bad("inference-one-replica-in-production", setting(f"{INFER}.autoscaling.minReplicas", 1),
        f"{INFER}.autoscaling.minReplicas", ("got 1)",), ("production",)),
    bad("inference-min-replicas-above-max", setting(f"{INFER}.autoscaling.minReplicas", 4),
        f"{INFER}.autoscaling.minReplicas", ("got 4)",), ("maxReplicas 3",)),
    bad("inference-gpu-memory-utilization-0.99", setting(f"{INFER}.gpuMemoryUtilization", 0.99),
        f"{INFER}.gpuMemoryUtilization", ("0.99",)),
    # Capacity after the acceptance test: 4 training nodes + one node per serving replica.
    bad("serving-and-training-need-more-nodes", setting(f"{INFER}.autoscaling.maxReplicas", 5),
        f"{INFER}.autoscaling.maxReplicas", ("got 5)",), ("9 > 8 GPU nodes", "maxReplicas to 4")),
    bad("training-script-in-the-stock-image", setting(f"{TRAIN}.script", "/workspace/train.py"),
        f"{TRAIN}.script", ("/workspace/train.py",), ("No such file", "/data/code/train.py")),
    bad("gpu-driver-follows-the-chart", setting("platform.gpuOperator.driverVersion", None),
        "platform.gpuOperator.driverVersion", ("got None)",), ("every node",)),
]


def test_capacity_near_miss_every_gpu_node_in_use(prod):
    """4 training nodes + 4 serving replicas fill the 8 GPU nodes exactly: valid."""
    mutate(prod, f"{INFER}.autoscaling.maxReplicas", 4)
    validate(prod)


def test_a_script_of_your_own_image_is_trusted(prod):
    mutate(prod, f"{TRAIN}.image", "registry.local:5000/llama-pretrain:1.4.0")
    mutate(prod, f"{TRAIN}.script", "/workspace/train.py")
    validate(prod)


@pytest.mark.parametrize(("change", "path", "shown", "says"), BAD_INPUTS)
def test_one_mistake_gives_one_problem_with_path_value_and_fix(
    prod, tmp_path, change, path, shown, says
):
    project_dir = change(prod, tmp_path) or PROJECT_DIR
    err = config_error(prod, project_dir)
    text = str(err)
    assert [p.path for p in err.problems] == [path], text
    assert f"{CLUSTER_KEY}.{path}:" in text
    assert any(s in text for s in shown), f"none of {shown} in:\n{text}"
    for words in says:
        assert words in text
    assert "Fix:" in text and err.problems[0].fix.strip()
    assert text.startswith("Invalid stack config: 1 problem(s); nothing was registered.")


def test_the_prod_config_itself_is_valid(prod):
    """The baseline every bad-input case starts from must pass, or those tests prove nothing."""
    validate(prod)


def test_kubernetes_1_36_is_beyond_the_network_operator_and_calico(prod):
    """GPU Operator 26.3.2 added Kubernetes 1.36 (its release notes); Network Operator 26.4.x
    and Calico 3.31 end at 1.35 (tests/test_compat_upgrade_path.py has the sources)."""
    mutate(prod, "kubernetes.version", "1.36.0")
    err = config_error(prod)
    assert [p.path for p in err.problems] == ["kubernetes.version"] * 2
    text = str(err)
    assert "1.36.0" in text
    assert "Network Operator 26.4.1 supports Kubernetes 1.31-1.35" in text
    assert "Calico v3.31.3 is tested with Kubernetes 1.32-1.35" in text
    assert "GPU Operator" not in text


def test_calico_older_than_the_kubernetes_version(prod):
    mutate(prod, "platform.calico.version", "v3.30.3")
    err = config_error(prod)
    assert [(p.path, p.value) for p in err.problems] == [("kubernetes.version", "1.35.2")]
    assert "Calico v3.30.3 is tested with Kubernetes 1.31-1.33" in str(err)


def test_incompatible_operator_pair_is_fine_without_gpudirect_rdma(prod):
    """The 26.3.2 x 26.4.0 incompatibility is about RDMA; without GPUDirect RDMA it is allowed."""
    mutate(prod, "platform.networkOperator.version", "26.4.0")
    mutate(prod, "platform.gpuOperator.gpudirectRdma", False)
    mutate(prod, "workloads.ncclTest.gate", False)  # the gate demands GPUDirect RDMA
    validate(prod)


# ---------------------------------------------------------------- misspelled keys


MISSPELLED = [
    pytest.param("gpuNodes", "gpuNode", True, id="gpuNode"),
    pytest.param("kubernetes.joinTokenTtlMinutes", "joinTokenTTLMinutes", False,
                 id="joinTokenTTLMinutes"),
    pytest.param("platform.gpuOperator.gpudirectRdma", "gpuDirectRdma", False, id="gpuDirectRdma"),
    pytest.param(f"{TRAIN}.tensorParallel", "tensorParalel", True, id="tensorParalel"),
    pytest.param("kubernetes.podCidr", "podCIDR", True, id="podCIDR"),
    pytest.param("gpuNodes.overrides.gpu-node-03.managementIp", "managmentIp", False,
                 id="override-managmentIp"),
]


@pytest.mark.parametrize(("path", "typo", "required"), MISSPELLED)
def test_misspelled_key_is_named_with_a_did_you_mean_hint(prod, path, typo, required):
    if path.startswith("gpuNodes.overrides."):
        mutate(prod, path, "10.10.1.200")
    rename(prod, path, typo)
    typo_path = path.rsplit(".", 1)[0] + "." + typo if "." in path else typo
    err = config_error(prod)
    text = str(err)
    # A misspelled required key is also a missing key; nothing else may be reported.
    expected = {typo_path, path} if required else {typo_path}
    assert {p.path for p in err.problems} == expected, text
    unknown = next(p for p in err.problems if p.path == typo_path)
    assert unknown.message == "unknown key"
    correct = path.rsplit(".", 1)[-1]
    assert f"did you mean {correct!r}?" in unknown.fix
    assert f"{CLUSTER_KEY}.{typo_path}: unknown key" in text


def test_snake_case_key_is_not_silently_ignored(prod):
    """The model's Python names are snake_case; the stack file is camelCase. A snake_case key
    either works like its camelCase twin or is rejected - never silently ignored."""
    rename(prod, "kubernetes.joinTokenTtlMinutes", "join_token_ttl_minutes")
    mutate(prod, "kubernetes.join_token_ttl_minutes", 0)
    with pytest.raises(ConfigError) as info:
        validate(prod)
    assert "join" in str(info.value)


# ---------------------------------------------------------------- several problems at once


def test_independent_mistakes_are_reported_together(prod):
    mutate(prod, "kubernetes.podCidr", "10.10.128.0/17")
    mutate(prod, f"{INFER}.autoscaling.minReplicas", 1)
    err = config_error(prod)
    assert sorted(p.path for p in err.problems) == [
        "kubernetes.podCidr", f"{INFER}.autoscaling.minReplicas"]
    text = str(err)
    assert text.startswith("Invalid stack config: 2 problem(s)")
    assert "10.10.128.0/17" in text and "production" in text
    assert text.count("Fix:") == 2


def test_independent_field_errors_are_reported_together(prod):
    mutate(prod, "kubernetes.joinTokenTtlMinutes", 0)
    mutate(prod, "fabric.subnetManagers[1].priority", 16)
    mutate(prod, f"{INFER}.image", "vllm/vllm-openai:latest")
    err = config_error(prod)
    assert sorted(p.path for p in err.problems) == [
        "fabric.subnetManagers[1].priority", "kubernetes.joinTokenTtlMinutes", f"{INFER}.image"]


def test_a_stack_value_that_is_not_a_mapping_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        validate_cluster(["not", "a", "mapping"], PROJECT_DIR)
    assert "must be a mapping" in str(info.value)


def test_a_missing_inventory_file_is_named(prod):
    mutate(prod, "inventoryFile", "inventory/prod-typo.csv")
    err = config_error(prod)
    assert [p.path for p in err.problems] == ["inventoryFile"]
    assert "inventory/prod-typo.csv" in str(err) and "does not exist" in str(err)


def test_malformed_inventory_guid_stops_validation(prod, tmp_path):
    project = edited_inventory("0xb83fd20300a33c14", "0xb83fd20300a33c1z")(prod, tmp_path)
    err = config_error(prod, project)
    assert [p.path for p in err.problems] == ["inventoryFile"]
    assert "64-bit GUID" in str(err)


# ---------------------------------------------------------------- environments


def test_development_allows_one_replica_and_one_subnet_manager(prod):
    mutate(prod, "environment", "development")
    mutate(prod, f"{INFER}.autoscaling.minReplicas", 1)
    prod["fabric"]["subnetManagers"].pop()
    cluster = validate(prod)
    assert cluster.workloads.inference[0].autoscaling.min_replicas == 1
    assert [sm.host for sm in cluster.fabric.subnet_managers] == ["sm-01"]


def test_three_control_plane_hosts_with_a_vip_are_valid(prod):
    with_control_plane(3, vip="10.10.0.5")(prod, None)
    cluster = validate(prod)
    assert [h.hostname for h in cluster.control_plane] == ["mgmt-01", "mgmt-02", "mgmt-03"]
    assert str(cluster.kubernetes.control_plane_endpoint.vip) == "10.10.0.5"


# ---------------------------------------------------------------- the prod cluster as built


@pytest.fixture(scope="module")
def prod_cluster() -> Cluster:
    return validate(prod_raw())


def test_prod_is_8_nodes_of_8_h100s(prod_cluster):
    assert [n.hostname for n in prod_cluster.nodes] == PROD_NODES
    assert all(n.gpu.count == 8 and n.gpu.model == "H100-SXM-80GB" for n in prod_cluster.nodes)
    assert prod_cluster.total_gpus == 64


def test_prod_scratch_is_the_eight_dgx_h100_data_drives_by_size(prod_cluster):
    """DGX H100: 8 x 3.84 TB U.2 data drives beside 2 x 1.92 TB M.2 OS drives; selected by
    size (any model), never by kernel name."""
    drives = prod_cluster.gpu_nodes.template.data_drives
    assert (drives.size_tb, drives.count, drives.models) == (3.84, 8, ())
    assert "nvme_devices" not in prod_cluster.gpu_nodes.template.model_dump(exclude_none=True)


def test_prod_non_gpu_hosts_by_role(prod_cluster):
    assert [h.hostname for h in prod_cluster.control_plane] == ["mgmt-01", "mgmt-02", "mgmt-03"]
    assert [h.hostname for h in prod_cluster.sm_hosts] == ["sm-01", "sm-02"]


def test_every_rail_uses_the_dgx_h100_compute_hca(prod_cluster):
    for node in prod_cluster.nodes:
        assert [r.index for r in node.rails] == list(range(8))
        assert [r.hca for r in node.rails] == DGX_H100_HCAS, node.hostname


def test_inventory_port_guids_land_on_their_rail(prod_cluster):
    by_node = {n.hostname: n for n in prod_cluster.nodes}
    rows = prod_inventory_rows()
    assert len(rows) == 64
    for row in rows:
        rail = by_node[row["hostname"]].rails[int(row["rail"])]
        assert (rail.hca, rail.port_guid) == (row["hca"], row["portGuid"].lower()), row
    # Spot check against the file as a technician reads it: gpu-node-03, rail 5 is mlx5_9.
    assert by_node["gpu-node-03"].rails[5].port_guid == "0xb83fd20300a43c1a"
    guids = [r.port_guid for n in prod_cluster.nodes for r in n.rails]
    assert len(set(guids)) == 64


def test_inventory_host_facts_reach_each_node(prod_cluster):
    by_node = {n.hostname: n for n in prod_cluster.nodes}
    for row in prod_inventory_rows():
        node = by_node[row["hostname"]]
        assert node.management_mac == row["managementMac"]
        assert node.ssh_host_key == row["sshHostKey"]


def test_prod_racks_addresses_and_su_slots(prod_cluster):
    nodes = prod_cluster.nodes
    assert Counter(n.rack for n in nodes) == {"r01": 4, "r02": 4}
    assert [n.rack for n in nodes[:4]] == ["r01"] * 4
    assert [str(n.management_ip) for n in nodes] == [f"10.10.1.{100 + i}" for i in range(8)]
    assert [str(n.bmc_address) for n in nodes] == [f"10.11.1.{100 + i}" for i in range(8)]
    assert [(n.su, n.slot) for n in nodes] == [(1, i) for i in range(8)]


def test_overrides_win_over_the_range(prod):
    # Slot 14: the last node slot of prod's pinned 2-rails-per-leaf span (15 holds the SMs).
    mutate(prod, "gpuNodes.overrides", {"gpu-node-05": {
        "managementIp": "10.10.1.200", "bmcAddress": "10.11.1.200", "rack": "r03", "slot": 14}})
    nodes = {n.hostname: n for n in validate(prod).nodes}
    five = nodes["gpu-node-05"]
    assert (str(five.management_ip), str(five.bmc_address), five.rack, five.slot) == (
        "10.10.1.200", "10.11.1.200", "r03", 14)
    six = nodes["gpu-node-06"]  # its neighbours keep the range's values
    assert (str(six.management_ip), six.rack, six.slot) == ("10.10.1.106", "r02", 6)


def test_override_port_guids_win_over_the_inventory(prod):
    replaced = [f"0xb83fd20300ff00{r:02x}" for r in range(8)]
    mutate(prod, "gpuNodes.overrides", {"gpu-node-01": {"portGuids": replaced}})
    nodes = {n.hostname: n for n in validate(prod).nodes}
    assert [r.port_guid for r in nodes["gpu-node-01"].rails] == replaced
    assert nodes["gpu-node-02"].rails[0].port_guid == "0xb83fd20300a33c10"


def test_override_hcas_are_not_silently_ignored(prod):
    swapped = DGX_H100_HCAS[1:] + DGX_H100_HCAS[:1]
    mutate(prod, "gpuNodes.overrides", {"gpu-node-04": {"hcas": swapped}})
    try:
        cluster = validate(prod)
    except ConfigError as err:  # reporting the conflict with the inventory is fine too
        assert "gpu-node-04" in str(err)
        return
    nodes = {n.hostname: n for n in cluster.nodes}
    assert [r.hca for r in nodes["gpu-node-04"].rails] == swapped


def test_the_model_is_frozen(prod_cluster):
    with pytest.raises(ValidationError):
        prod_cluster.name = "other"
    with pytest.raises(ValidationError):
        prod_cluster.kubernetes.pod_cidr = ipaddress.IPv4Network("10.0.0.0/16")
    with pytest.raises(TypeError):
        prod_cluster.gpu_nodes.template.hcas[0] = "mlx5_1"


def test_mappings_inside_the_model_are_read_only(prod):
    cluster = validate(prod)
    with pytest.raises(TypeError):
        cluster.gpu_nodes.overrides["gpu-node-00"] = None


def test_the_model_rejects_unknown_keys():
    with pytest.raises(ValidationError) as info:
        Partition.model_validate({"name": "training", "pkey": 0x0A01, "members": "compute",
                                  "membership": "full"})
    assert info.value.errors()[0]["type"] == "extra_forbidden"


@given(st.integers(min_value=-0x10000, max_value=0x10000))
def test_pkey_range_is_0x0001_to_0x7ffe(pkey):
    raw = {"name": "training", "pkey": pkey, "members": "compute"}
    if 0x0001 <= pkey <= 0x7FFE:
        assert Partition.model_validate(raw).pkey == pkey
        assert Partition.model_validate({**raw, "pkey": f"0x{pkey:04x}"}).pkey == pkey
    else:
        with pytest.raises(ValidationError):
            Partition.model_validate(raw)


# ---------------------------------------------------------------- gaps the checks miss


def test_generated_hostnames_are_rfc_1123_labels(prod):
    delete(prod, "inventoryFile")
    mutate(prod, "gpuNodes.ranges[0].prefix", "g" * 62 + "-")
    err = config_error(prod)
    assert "gpuNodes.ranges[0]" in str(err)


def test_a_range_cannot_overfill_its_racks(prod):
    mutate(prod, "gpuNodes.ranges[0].racks", ["r01"])  # 8 nodes, 4 per rack, 1 rack
    err = config_error(prod)
    assert [p.path for p in err.problems] == ["gpuNodes.ranges[0].racks"]


def test_address_overflow_is_blamed_on_the_range(prod):
    mutate(prod, "gpuNodes.ranges[0].managementIpStart", "255.255.255.250")
    err = config_error(prod)
    assert all(p.path != "inventoryFile" for p in err.problems), str(err)
    assert any(p.path.startswith("gpuNodes.ranges[0]") for p in err.problems)


INVENTORY_GAPS = [
    pytest.param("gpu-node-02,2,mlx5_4,", "gpu-node-02,2,eth0,", "eth0", id="hca-eth0"),
    pytest.param("5c:25:73:31:02:10", "5c:25:73:31:02:1g", "5c:25:73:31:02:1g", id="bad-mac"),
]


@pytest.mark.parametrize(("old", "new", "value"), INVENTORY_GAPS)
def test_inventory_facts_are_validated_like_stack_values(prod, tmp_path, old, new, value):
    text = PROD_INVENTORY.read_text()
    project = write_inventory(tmp_path, text.replace(old, new))
    err = config_error(prod, project)
    assert value in str(err) and "gpu-node-02" in str(err)


def test_inventory_rail_beyond_the_gpu_count_is_reported(prod, tmp_path):
    project = appended_inventory(
        "gpu-node-00,8,mlx5_12,0xb83fd20300a13c20,5c:25:73:31:00:10,\n")(prod, tmp_path)
    err = config_error(prod, project)
    assert "gpu-node-00" in str(err) and "8" in str(err)


def test_inventory_switch_guid_may_not_repeat_an_hca_guid(prod, tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(_yaml_inventory(prod_inventory_rows()) | {
        "switches": {"leaf-01": {"guid": "0xb83fd20300a13c10"}}}))
    mutate(prod, "inventoryFile", str(inv))
    err = config_error(prod, tmp_path)
    assert "0xb83fd20300a13c10" in str(err) and "leaf-01" in str(err)


# ---------------------------------------------------------------- inventory forms


def _yaml_inventory(rows: list[dict[str, str]]) -> dict:
    nodes: dict[str, dict] = {}
    for row in rows:
        node = nodes.setdefault(row["hostname"], {
            "managementMac": row["managementMac"], "sshHostKey": row["sshHostKey"], "rails": {}})
        node["rails"][int(row["rail"])] = {"hca": row["hca"], "portGuid": int(row["portGuid"], 16)}
    return {"nodes": nodes}


def test_yaml_inventory_gives_the_same_facts_as_the_csv(prod, prod_cluster, tmp_path):
    # Unquoted 0x... GUIDs, as an operator would write them: YAML reads them as integers.
    text = yaml.safe_dump(_yaml_inventory(prod_inventory_rows()))
    text = re.sub(r"portGuid: (\d+)", lambda m: f"portGuid: 0x{int(m.group(1)):016x}", text)
    (tmp_path / "prod.yaml").write_text(text)
    mutate(prod, "inventoryFile", "prod.yaml")
    from_yaml = validate(prod, tmp_path)
    assert from_yaml.nodes == prod_cluster.nodes


# ---------------------------------------------------------------- 1024 nodes, compactly

SCALE_NODES = 1022  # 32 SUs x 32 slots: SU 1's last is the subnet-manager hosts', one free
HCAS_PER_NODE = 8


def _scale_inventory(tmp_path: Path) -> Path:
    lines = [",".join(("hostname", "rail", "hca", "portGuid", "managementMac"))]
    for i in range(SCALE_NODES):
        mac = f"5c:25:73:40:{i >> 8:02x}:{i & 0xFF:02x}"
        for rail, hca in enumerate(DGX_H100_HCAS):
            guid = f"0xb83fd203{i:04x}{rail * 2:02x}00"
            lines.append(f"gpu-{i:04d},{rail},{hca},{guid},{mac}")
    path = tmp_path / "inventory-1024.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def scale_cluster(tmp_path_factory) -> tuple[Cluster, str]:
    stack_text = (DATA / "gpu-nodes-1024.yaml").read_text()
    raw = prod_raw()
    raw.update(yaml.safe_load(stack_text))
    # Prod's site size and its switches' facts, not this one's.
    for key in ("railsPerLeaf", "spines", "switchGuids", "switchManagementIps",
                "switchHostKeys"):
        raw["fabric"].pop(key)
    raw["inventoryFile"] = str(_scale_inventory(tmp_path_factory.mktemp("scale")))
    # 1023 kubelets need 1023 per-node /24s: prod's /16 holds 256.
    raw["kubernetes"]["podCidr"] = "10.128.0.0/13"
    return validate(raw), stack_text


def test_1024_nodes_fit_in_a_short_stack_file(scale_cluster):
    _, stack_text = scale_cluster
    # One line pair per SU; listing 1024 nodes one per line would take ~100 KB.
    assert len(stack_text.encode()) < 8 * 1024
    assert len(stack_text.splitlines()) < 80


def test_1024_nodes_expand_to_unique_names_addresses_and_slots(scale_cluster):
    cluster, _ = scale_cluster
    nodes = cluster.nodes
    assert len(nodes) == SCALE_NODES
    assert cluster.total_gpus == SCALE_NODES * 8
    names = [n.hostname for n in nodes]
    assert names == [f"gpu-{i:04d}" for i in range(SCALE_NODES)]
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", n) for n in names)
    assert len({n.management_ip for n in nodes}) == SCALE_NODES
    assert len({n.bmc_address for n in nodes}) == SCALE_NODES
    assert len({(n.su, n.slot) for n in nodes}) == SCALE_NODES
    assert {n.su for n in nodes} == set(range(1, 33))
    assert {n.slot for n in nodes} == set(range(32))
    mgmt = ipaddress.IPv4Network(prod_raw()["network"]["managementCidr"])
    assert all(n.management_ip in mgmt for n in nodes)
    racks = Counter(n.rack for n in nodes)
    assert len(racks) == 256 and Counter(racks.values()) == {4: 254, 3: 2}  # SUs 1 and 32


def test_1024_nodes_take_their_hardware_facts_from_the_inventory(scale_cluster):
    cluster, _ = scale_cluster
    guids = [r.port_guid for n in cluster.nodes for r in n.rails]
    assert len(guids) == SCALE_NODES * HCAS_PER_NODE == len(set(guids))
    last = cluster.nodes[-1]
    assert last.hostname == "gpu-1021"
    assert last.rails[7].hca == "mlx5_11"
    assert last.rails[7].port_guid == "0xb83fd20303fd0e00"
    assert last.management_mac == "5c:25:73:40:03:fd"


# ---------------------------------------------------------------- the checks' registry


def test_each_cross_field_check_is_named_and_runs_alone(prod, prod_cluster) -> None:
    """A problem names the check that found it, and that check alone finds it: the checks are
    independent functions over the built model (components/model/checks: CHECKS)."""
    from components.model.checks import CHECKS

    assert all(re.fullmatch(r"[a-z]+(-[a-z]+)*", name) for name in CHECKS), list(CHECKS)
    assert all(list(check(prod_cluster)) == [] for check in CHECKS.values())
    prod["hosts"][1]["hostname"] = prod["hosts"][0]["hostname"]
    err = config_error(prod)
    duplicate = next(p for p in err.problems if "hostname already used" in p.message)
    assert duplicate.check == "unique-hostnames"
    assert "[check: unique-hostnames]" in str(err)
    broken = Cluster.model_validate(prod)
    assert [p.path for p in CHECKS["unique-hostnames"](broken)] == [duplicate.path]
    assert list(CHECKS["su-slots"](broken)) == []
    # Pydantic's own field errors come from no cross-field check.
    prod["hosts"][0]["hostname"] = "Not_A_Label"
    assert all(p.check == "" for p in config_error(prod).problems)
