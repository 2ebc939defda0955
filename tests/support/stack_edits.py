"""The changes an operator makes to a copy of the prod stack (its stack file and inventory),
and the rendered baseline a preview of them is compared with."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from support.project import REPO, prod_raw, run_offline

KEY = "gpu-cluster:cluster"


def edit_stack(project: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply `change` to the `gpu-cluster:cluster` object of the copy's Pulumi.prod.yaml."""
    path = project / "Pulumi.prod.yaml"
    doc = yaml.safe_load(path.read_text())
    change(doc["config"][KEY])
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def edit_inventory(project: Path, change: Callable[[list[str]], list[str]]) -> None:
    """Replace the lines of the copy's inventory/prod.csv with `change(lines)`."""
    path = project / "inventory" / "prod.csv"
    path.write_text("\n".join(change(path.read_text().splitlines())) + "\n")


def seven_nodes(cluster: dict[str, Any]) -> None:
    """gpu-node-07 leaves; the 4 training nodes and 3 serving replicas still fit in 7."""
    cluster["gpuNodes"]["ranges"][0]["count"] = 7


def render_baseline(project: Path) -> None:
    """`offline preview --render`: rendered/prod becomes what the next preview diffs against."""
    proc = run_offline(project, "preview", "--render")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def prod_with_rows(directory: Path, edit: Callable[[list[dict[str, str]]], None]) -> Any:
    """Prod validated with its inventory rows (dicts by column) as `edit` leaves them, the
    edited file written under `directory`."""
    from components.wiring.loading import validate_cluster

    raw = prod_raw()
    rows = list(csv.DictReader((REPO / raw["inventoryFile"]).open()))
    edit(rows)
    path = directory / "inventory.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    raw["inventoryFile"] = str(path)
    return validate_cluster(raw, REPO)


# The DGX H100's storage ports: port 1 of the ConnectX-7 in each storage slot (DGX H100 user
# guide, network ports table), InfiniBand on a storage fabric of their own.
STORAGE_HCAS = ["mlx5_7", "mlx5_1"]
STORAGE_NETDEVS = ["ibp170s0f0", "ibp41s0f0"]


def storage_fabric(cluster: dict[str, Any]) -> None:
    """The Lustre servers move off the compute rails onto a storage fabric of their own with
    two subnet-manager hosts of its own (DGX SuperPOD's layout), every host and switch key
    pinned."""
    for name, ip, rack, guid, key in (
            ("ssm-01", "10.10.0.21", "r01", "0xb83fd20300f30002",
             "AAAAC3NzaC1lZDI1NTE5AAAAIGCAKbJMUt1f/JDVyZEypmRHd1RGPIw3qITU86VWHv6A"),
            ("ssm-02", "10.10.0.22", "r02", "0xb83fd20300f40002",
             "AAAAC3NzaC1lZDI1NTE5AAAAIG2+a0PyDbI1Hwy/YMZHwr80PFFkaNp0I0Vmxy7tNQnE")):
        cluster["hosts"].append({
            "hostname": name, "role": "sm-host", "managementIp": ip,
            "bmcAddress": ip.replace("10.10.", "10.11."), "rack": rack,
            "sshHostKey": f"ssh-ed25519 {key}", "fabricPortGuid": guid})
    ed25519 = "AAAAC3NzaC1lZDI1NTE5AAAAI"
    switch_keys = {
        "storage-leaf-su1-r0": f"{ed25519}Ixf0dABh/ftdQJ4KzGxHPIGFQhTMLh5zNwrcmG5+o25",
        "storage-leaf-su1-r1": f"{ed25519}A0IJ3l+GkPlvvvZA7tUBBZ2CXd9C+Xns1OV2SBNNyIV",
        "storage-spine-01": f"{ed25519}JDT2YcYu2uUGlYB7kmFEPnSVTNIoVxuSLexvREQN3l6",
        "storage-spine-02": f"{ed25519}KHFDm51sYShbx6vwU2B9sfugnXeCEQ5ek5Ru+3rUpY3"}
    cluster["fabric"]["storageFabric"] = {
        "hcas": STORAGE_HCAS, "netdevs": STORAGE_NETDEVS,
        "subnetManagers": [{"host": "ssm-01", "priority": 15},
                           {"host": "ssm-02", "priority": 14}],
        "switchGuids": {"storage-spine-01": "0xfc6a1c0300b10001",
                        "storage-spine-02": "0xfc6a1c0300b10002",
                        "storage-leaf-su1-r0": "0xfc6a1c0300b20001",
                        "storage-leaf-su1-r1": "0xfc6a1c0300b20002"},
        "switchManagementIps": {"storage-leaf-su1-r0": "10.10.2.21",
                                "storage-leaf-su1-r1": "10.10.2.22",
                                "storage-spine-01": "10.10.2.23",
                                "storage-spine-02": "10.10.2.24"},
        "switchHostKeys": {sw: f"ssh-ed25519 {key}" for sw, key in switch_keys.items()}}


def storage_port_rows(lines: list[str]) -> list[str]:
    """Each GPU node's storage ports added to the inventory as `ibstat` reads them: a row per
    port, rail `storage<i>` (its management MAC and host key stay on the rail rows)."""
    nodes = sorted({ln.split(",")[0] for ln in lines[1:] if ln.startswith("gpu-node-")})
    return lines + [f"{host},storage{i},{hca},0x0c42a10300d1{n:02x}{2 * i + 1:02x},,"
                    for n, host in enumerate(nodes) for i, hca in enumerate(STORAGE_HCAS)]
