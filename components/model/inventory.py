"""Per-node hardware facts read from an inventory file (CSV or YAML).

A 1024-node stack stays short because the facts that differ per machine — HCA device names, HCA
port GUIDs, management MACs, SSH host keys — live in a file exported from the hosts (`ibstat`,
`ssh-keyscan`), not in the stack file. Parsing errors name the file, the line and the column.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import yaml


class InventoryError(ValueError):
    """An inventory file that cannot be read; the message names file, line and fix."""


@dataclass(frozen=True)
class RailFacts:
    hca: str | None = None
    port_guid: str | None = None


@dataclass(frozen=True)
class NodeFacts:
    """What the inventory knows about one host; every field is optional."""

    rails: dict[int, RailFacts] = field(default_factory=dict)
    management_mac: str | None = None
    ssh_host_key: str | None = None
    # Storage port i (fabric.storageFabric.hcas[i]) on a storage fabric of its own.
    storage_ports: dict[int, RailFacts] = field(default_factory=dict)


@dataclass(frozen=True)
class Inventory:
    nodes: dict[str, NodeFacts] = field(default_factory=dict)
    switch_guids: dict[str, str] = field(default_factory=dict)
    source: str = ""


CSV_COLUMNS = ("hostname", "rail", "hca", "portGuid", "managementMac", "sshHostKey")
# A row whose rail is `storage<i>` is storage port i (fabric.storageFabric.hcas[i]).
STORAGE_RAIL = "storage"


def load_inventory(path: Path) -> Inventory:
    if not path.is_file():
        raise InventoryError(
            f"inventory file {path} does not exist. Fix: point inventoryFile at a CSV or YAML "
            "file relative to the project directory, or remove the key."
        )
    if path.suffix == ".csv":
        return _load_csv(path)
    if path.suffix in (".yaml", ".yml"):
        return _load_yaml(path)
    raise InventoryError(f"inventory file {path} must end in .csv, .yaml or .yml")


def _load_csv(path: Path) -> Inventory:
    """One row per (host, rail), or per storage port (`storage<i>`); node-level columns repeat
    and must agree across a host's rows."""
    nodes: dict[str, dict] = {}
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        # Keep the file's own line numbers for messages, skipping comments and blank lines.
        rows = [(reader.line_num, row) for row in reader
                if row and any(c.strip() for c in row) and not row[0].startswith("#")]
    if not rows:
        return Inventory(source=str(path))
    header_line, header_row = rows[0]
    header = [c.strip() for c in header_row]
    unknown = [c for c in header if c not in CSV_COLUMNS]
    if unknown or "hostname" not in header:
        raise InventoryError(
            f"{path}:{header_line}: unknown or missing columns {unknown or ['hostname']}. "
            f"Fix: use the header {','.join(CSV_COLUMNS)} (columns after hostname are optional)."
        )
    for lineno, row in rows[1:]:
        rec = {k: v.strip() for k, v in zip(header, row, strict=False) if v.strip()}
        host = rec.get("hostname")
        if not host:
            raise InventoryError(f"{path}:{lineno}: empty hostname. Fix: fill the hostname column.")
        node = nodes.setdefault(host, {"rails": {}, "storage_ports": {}})
        for key, attr in (("managementMac", "management_mac"), ("sshHostKey", "ssh_host_key")):
            if key in rec:
                if node.get(attr) not in (None, rec[key]):
                    raise InventoryError(
                        f"{path}:{lineno}: {host} {key} {rec[key]!r} disagrees with an earlier "
                        f"row ({node[attr]!r}). Fix: give each host one {key}."
                    )
                node[attr] = rec[key]
        if "rail" in rec:
            storage = rec["rail"].startswith(STORAGE_RAIL)
            kind = "storage port" if storage else "rail"
            rail = _rail(rec["rail"].removeprefix(STORAGE_RAIL), f"{path}:{lineno}")
            ports = node["storage_ports" if storage else "rails"]
            if rail in ports:
                raise InventoryError(
                    f"{path}:{lineno}: {host} {kind} {rail} listed twice. Fix: one row per "
                    f"{kind}."
                )
            ports[rail] = RailFacts(hca=rec.get("hca"), port_guid=rec.get("portGuid"))
    return Inventory(
        nodes={h: NodeFacts(**n) for h, n in sorted(nodes.items())}, source=str(path)
    )


def _load_yaml(path: Path) -> Inventory:
    """`nodes: {host: {managementMac, sshHostKey, rails: {0: {hca, portGuid}}, storagePorts:
    {0: {hca, portGuid}}}}`, `switches`."""
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise InventoryError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(doc, dict) or set(doc) - {"nodes", "switches"}:
        raise InventoryError(f"{path}: top-level keys must be 'nodes' and/or 'switches'")
    nodes: dict[str, NodeFacts] = {}
    for host, facts in sorted(_mapping(doc.get("nodes"), f"{path}: nodes").items()):
        where = f"{path}: nodes.{host}"
        facts = _mapping(facts, where)
        extra = set(facts) - {"managementMac", "sshHostKey", "rails", "storagePorts"}
        if extra:
            raise InventoryError(
                f"{where}: unknown keys {sorted(extra)}. "
                "Fix: use managementMac, sshHostKey, rails and storagePorts."
            )
        rails, storage = (_yaml_ports(facts.get(key), f"{where}.{key}")
                          for key in ("rails", "storagePorts"))
        mac = facts.get("managementMac")
        if mac is not None and not isinstance(mac, str):
            raise InventoryError(
                f"{where}.managementMac: YAML read {mac!r} as a number. Fix: quote the MAC."
            )
        nodes[str(host)] = NodeFacts(
            rails=rails, management_mac=mac, ssh_host_key=facts.get("sshHostKey"),
            storage_ports=storage,
        )
    switches = {}
    for name, v in sorted(_mapping(doc.get("switches"), f"{path}: switches").items()):
        guid = _hex(_mapping(v, f"{path}: switches.{name}").get("guid"))
        if guid is None:
            raise InventoryError(
                f"{path}: switches.{name} has no guid. Fix: add its guid (`ibswitches` on the "
                "fabric lists every switch's) or remove the entry."
            )
        switches[str(name)] = guid
    return Inventory(nodes=nodes, switch_guids=switches, source=str(path))


def _yaml_ports(value: object, where: str) -> dict[int, RailFacts]:
    """A node's `rails` or `storagePorts`: {number: {hca, portGuid}}."""
    ports = {}
    for r, v in _mapping(value, where).items():
        v = _mapping(v, f"{where}.{r}")
        if set(v) - {"hca", "portGuid"}:
            raise InventoryError(
                f"{where}.{r}: unknown keys {sorted(set(v) - {'hca', 'portGuid'})}. "
                "Fix: a port has hca and portGuid."
            )
        ports[_rail(r, where)] = RailFacts(hca=v.get("hca"), port_guid=_hex(v.get("portGuid")))
    return ports


def _mapping(value: object, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InventoryError(f"{where}: expected a mapping, got {value!r}")
    return value


def _rail(value: object, where: str) -> int:
    try:
        rail = int(str(value))
    except ValueError:
        rail = -1
    if rail < 0 or isinstance(value, bool):
        raise InventoryError(
            f"{where}: rail {value!r} is not a rail number. Fix: rails are numbered from 0."
        )
    return rail


def _hex(value: object) -> str | None:
    """YAML reads an unquoted 0x… GUID as an int; keep GUIDs as 0x-prefixed 16-digit text."""
    if value is None:
        return None
    if isinstance(value, int):
        return f"0x{value:016x}"
    return str(value)
