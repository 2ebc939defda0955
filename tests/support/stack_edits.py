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
    from components.stack_config import validate_cluster

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
