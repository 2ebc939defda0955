"""Inventory files: per-node hardware facts (HCAs, port GUIDs, MACs, SSH host keys).

The CSV form is one row per (host, rail), as exported from `ibstat` on each host; the YAML form
nests rails under hosts. Errors must name the file and, for CSV, the line to edit.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from components.model.inventory import (
    CSV_COLUMNS,
    Inventory,
    InventoryError,
    NodeFacts,
    RailFacts,
    load_inventory,
)

PROJECT_DIR = Path(__file__).resolve().parents[1]
PROD_CSV = PROJECT_DIR / "inventory" / "prod.csv"
DGX_H100_HCAS = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]

HEADER = "hostname,rail,hca,portGuid,managementMac,sshHostKey"
KEY_A = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPs4XNMUAOfqFVFNAWn3zQVNft4G0IWKJNnStirB1sN+"
KEY_B = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILpiMfe29g/pHY8WZUFRyTQV/dA7vZd6ODyfx6+e6vgd"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def inventory_error(path: Path) -> str:
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    return str(info.value)


# ---------------------------------------------------------------- CSV


def test_prod_csv_has_eight_dgx_h100_nodes():
    inv = load_inventory(PROD_CSV)
    assert sorted(inv.nodes) == [f"gpu-node-{i:02d}" for i in range(8)]
    for host, facts in inv.nodes.items():
        assert sorted(facts.rails) == list(range(8)), host
        assert [facts.rails[r].hca for r in range(8)] == DGX_H100_HCAS, host
        assert facts.ssh_host_key.startswith("ssh-ed25519 ")
    node3 = inv.nodes["gpu-node-03"]
    assert node3.rails[5] == RailFacts(hca="mlx5_9", port_guid="0xb83fd20300a43c1a")
    assert node3.management_mac == "5c:25:73:31:03:10"
    assert inv.source == str(PROD_CSV)


def test_csv_columns_after_hostname_are_optional_and_in_any_order(tmp_path):
    path = write(tmp_path, "inv.csv", "managementMac,hostname\n5c:25:73:31:00:10,gpu-node-00\n")
    inv = load_inventory(path)
    assert inv.nodes == {"gpu-node-00": NodeFacts(management_mac="5c:25:73:31:00:10")}
    path = write(tmp_path, "inv2.csv",
                 "portGuid,rail,hostname\n0xb83fd20300a13c10,0,gpu-node-00\n")
    assert load_inventory(path).nodes["gpu-node-00"].rails == {
        0: RailFacts(hca=None, port_guid="0xb83fd20300a13c10")}


def test_csv_skips_comments_and_blank_lines(tmp_path):
    text = (f"# exported from ibstat on 2026-11-20\n{HEADER}\n\n"
            f"gpu-node-00,0,mlx5_0,0xb83fd20300a13c10,5c:25:73:31:00:10,{KEY_A}\n"
            "# gpu-node-01 is out for RMA\n")
    inv = load_inventory(write(tmp_path, "inv.csv", text))
    assert list(inv.nodes) == ["gpu-node-00"]


def test_csv_spaces_around_values_are_ignored(tmp_path):
    text = " hostname , rail , hca \n gpu-node-00 , 0 , mlx5_0 \n"
    inv = load_inventory(write(tmp_path, "inv.csv", text))
    assert inv.nodes["gpu-node-00"].rails[0].hca == "mlx5_0"


def test_empty_csv_is_an_empty_inventory(tmp_path):
    assert load_inventory(write(tmp_path, "inv.csv", "")).nodes == {}


def test_csv_rail_that_is_not_a_number_names_file_and_line(tmp_path):
    path = write(tmp_path, "inv.csv", f"{HEADER}\n"
                 "gpu-node-00,0,mlx5_0,0xb83fd20300a13c10,,\n"
                 "gpu-node-00,one,mlx5_3,0xb83fd20300a13c12,,\n")
    msg = inventory_error(path)
    assert f"{path}:3:" in msg and "'one'" in msg and "Fix:" in msg


def test_csv_rail_listed_twice_names_the_second_line(tmp_path):
    path = write(tmp_path, "inv.csv", f"{HEADER}\n"
                 "gpu-node-00,0,mlx5_0,0xb83fd20300a13c10,,\n"
                 "gpu-node-01,0,mlx5_0,0xb83fd20300a23c10,,\n"
                 "gpu-node-00,0,mlx5_3,0xb83fd20300a13c12,,\n")
    msg = inventory_error(path)
    assert f"{path}:4:" in msg and "gpu-node-00 rail 0" in msg


@pytest.mark.parametrize(("column", "first", "second"), [
    ("managementMac", "5c:25:73:31:00:10", "5c:25:73:31:00:11"),
    ("sshHostKey", KEY_A, KEY_B),
])
def test_csv_host_fact_that_disagrees_between_rows(tmp_path, column, first, second):
    path = write(tmp_path, "inv.csv", f"hostname,rail,{column}\n"
                 f"gpu-node-00,0,{first}\ngpu-node-00,1,{first}\ngpu-node-00,2,{second}\n")
    msg = inventory_error(path)
    assert f"{path}:4:" in msg
    assert column in msg and first in msg and second in msg


def test_csv_host_fact_may_be_given_on_one_row_only(tmp_path):
    path = write(tmp_path, "inv.csv", "hostname,rail,managementMac\n"
                 "gpu-node-00,0,5c:25:73:31:00:10\ngpu-node-00,1,\n")
    assert load_inventory(path).nodes["gpu-node-00"].management_mac == "5c:25:73:31:00:10"


def test_csv_unknown_column_is_named(tmp_path):
    path = write(tmp_path, "inv.csv", "hostname,rail,portGUID\ngpu-node-00,0,0x1\n")
    msg = inventory_error(path)
    assert f"{path}:1:" in msg and "portGUID" in msg
    assert ",".join(CSV_COLUMNS) in msg  # the fix shows the header to use


def test_csv_without_hostname_column(tmp_path):
    path = write(tmp_path, "inv.csv", "rail,hca\n0,mlx5_0\n")
    msg = inventory_error(path)
    assert f"{path}:1:" in msg and "hostname" in msg


def test_csv_row_without_hostname_names_its_line(tmp_path):
    path = write(tmp_path, "inv.csv", "hostname,rail,hca\ngpu-node-00,0,mlx5_0\n,1,mlx5_3\n")
    msg = inventory_error(path)
    assert f"{path}:3:" in msg and "hostname" in msg


def test_csv_line_numbers_count_comment_and_blank_lines(tmp_path):
    path = write(tmp_path, "inv.csv", f"# exported by ibstat\n\n{HEADER}\n"
                 "gpu-node-00,0,mlx5_0,0xb83fd20300a13c10,,\n"
                 "gpu-node-00,x,mlx5_3,0xb83fd20300a13c12,,\n")
    assert f"{path}:5:" in inventory_error(path)


def test_csv_negative_rail_is_rejected(tmp_path):
    path = write(tmp_path, "inv.csv", "hostname,rail,hca\ngpu-node-00,-1,mlx5_0\n")
    msg = inventory_error(path)
    assert f"{path}:2:" in msg


# ---------------------------------------------------------------- files


def test_missing_inventory_file_is_named(tmp_path):
    path = tmp_path / "inventory" / "prod.csv"
    msg = inventory_error(path)
    assert str(path) in msg and "does not exist" in msg and "Fix:" in msg


def test_inventory_file_must_be_csv_or_yaml(tmp_path):
    path = write(tmp_path, "inv.txt", f"{HEADER}\n")
    msg = inventory_error(path)
    assert str(path) in msg and ".csv" in msg and ".yaml" in msg


# ---------------------------------------------------------------- YAML

YAML_INVENTORY = f"""\
nodes:
  gpu-node-00:
    managementMac: 5c:25:73:31:00:10
    sshHostKey: {KEY_A}
    rails:
      0: {{hca: mlx5_0, portGuid: 0xb83fd20300a13c10}}
      5: {{hca: mlx5_9, portGuid: "0xb83fd20300a13c1a"}}
  gpu-node-01:
    rails:
      0: {{hca: mlx5_0, portGuid: 0x0000000000000001}}
switches:
  leaf-su1-01: {{guid: 0xfc6a1c0300a00001}}
"""


def test_yaml_inventory_parses_nodes_rails_and_switches(tmp_path):
    inv = load_inventory(write(tmp_path, "inv.yaml", YAML_INVENTORY))
    node0 = inv.nodes["gpu-node-00"]
    assert node0.management_mac == "5c:25:73:31:00:10"
    assert node0.ssh_host_key == KEY_A
    # An unquoted GUID (read by YAML as an integer) and a quoted one come out alike.
    assert node0.rails == {0: RailFacts("mlx5_0", "0xb83fd20300a13c10"),
                           5: RailFacts("mlx5_9", "0xb83fd20300a13c1a")}
    # Leading zeros survive: a GUID is always 16 hex digits.
    assert inv.nodes["gpu-node-01"].rails[0].port_guid == "0x0000000000000001"
    assert inv.switch_guids == {"leaf-su1-01": "0xfc6a1c0300a00001"}


def test_yml_suffix_and_empty_yaml(tmp_path):
    assert load_inventory(write(tmp_path, "inv.yml", "")) == Inventory(
        source=str(tmp_path / "inv.yml"))


@pytest.mark.parametrize(("text", "words"), [
    pytest.param("hosts: {}\n", ("'nodes'",), id="unknown-top-level-key"),
    pytest.param("- gpu-node-00\n", ("'nodes'",), id="top-level-list"),
    pytest.param("nodes:\n  gpu-node-00: {managementMAC: 5c:25:73:31:00:10}\n",
                 ("nodes.gpu-node-00", "managementMAC"), id="unknown-node-key"),
    pytest.param("nodes: {gpu-node-00: [\n", ("not valid YAML",), id="broken-yaml"),
])
def test_yaml_inventory_errors_name_file_and_key(tmp_path, text, words):
    path = write(tmp_path, "inv.yaml", text)
    msg = inventory_error(path)
    assert str(path) in msg
    for w in words:
        assert w in msg


@pytest.mark.parametrize("text", [
    pytest.param("nodes:\n  - gpu-node-00\n", id="nodes-as-a-list"),
    pytest.param("nodes:\n  gpu-node-00:\n    rails: {first: {hca: mlx5_0}}\n",
                 id="rail-key-not-a-number"),
    pytest.param("nodes:\n  gpu-node-00:\n    rails: {0: mlx5_0}\n", id="rail-not-a-mapping"),
])
def test_malformed_yaml_inventory_is_an_inventory_error(tmp_path, text):
    path = write(tmp_path, "inv.yaml", text)
    msg = inventory_error(path)
    assert str(path) in msg


def test_yaml_rail_with_misspelled_key_is_rejected(tmp_path):
    path = write(tmp_path, "inv.yaml",
                 "nodes:\n  gpu-node-00:\n    rails:\n"
                 "      0: {hca: mlx5_0, portGUID: 0xb83fd20300a13c10}\n")
    msg = inventory_error(path)
    assert "portGUID" in msg


def test_yaml_unquoted_mac_stays_a_mac(tmp_path):
    path = write(tmp_path, "inv.yaml",
                 "nodes:\n  gpu-node-00: {managementMac: 10:25:53:31:00:10}\n")
    try:
        inv = load_inventory(path)
    except InventoryError as err:  # asking for quotes is fine too
        assert "managementMac" in str(err)
        return
    assert inv.nodes["gpu-node-00"].management_mac == "10:25:53:31:00:10"


# ---------------------------------------------------------------- CSV and YAML agree

hosts = st.lists(st.from_regex(r"gpu-[a-z0-9]{1,6}", fullmatch=True), min_size=1, max_size=4,
                 unique=True)
rail_facts = st.dictionaries(
    st.integers(0, 7),
    st.tuples(st.sampled_from(DGX_H100_HCAS), st.integers(0, 2**64 - 1)),
    min_size=1, max_size=8,
)
macs = st.lists(st.integers(0, 255), min_size=6, max_size=6).map(
    lambda bs: ":".join(f"{b:02x}" for b in bs))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_csv_and_yaml_forms_give_the_same_facts(data):
    facts = {h: (data.draw(macs), data.draw(rail_facts)) for h in data.draw(hosts)}
    rows = [HEADER.rsplit(",", 1)[0]]
    doc: dict = {"nodes": {}}
    for host, (mac, rails) in facts.items():
        for rail, (hca, guid) in rails.items():
            rows.append(f"{host},{rail},{hca},0x{guid:016x},{mac}")
        doc["nodes"][host] = {
            "managementMac": mac,
            "rails": {r: {"hca": h, "portGuid": g} for r, (h, g) in rails.items()},
        }
    with tempfile.TemporaryDirectory() as tmp:
        from_csv = load_inventory(write(Path(tmp), "inv.csv", "\n".join(rows) + "\n"))
        from_yaml = load_inventory(write(Path(tmp), "inv.yaml", yaml.safe_dump(doc)))
    assert from_csv.nodes == from_yaml.nodes
    assert set(from_csv.nodes) == set(facts)


def test_a_switch_without_a_guid_is_refused(tmp_path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("switches:\n  leaf-su1-r0-1: {}\n")
    with pytest.raises(InventoryError, match=r"switches\.leaf-su1-r0-1 has no guid\. Fix: "):
        load_inventory(path)


def test_storage_port_rows_in_either_form(tmp_path) -> None:
    """A storage fabric's ports: CSV rows with rail `storage<i>`, YAML `storagePorts`; the
    same facts either way, apart from the node's rails."""
    csv_path = write(tmp_path, "inv.csv", f"{HEADER}\n"
                     "gpu-node-00,0,mlx5_0,0xb83fd20300a13c10,,\n"
                     "gpu-node-00,storage0,mlx5_7,0x0c42a10300d10001,,\n"
                     "gpu-node-00,storage1,mlx5_1,0x0c42a10300d10003,,\n")
    yaml_path = write(tmp_path, "inv.yaml", yaml.safe_dump({"nodes": {"gpu-node-00": {
        "rails": {0: {"hca": "mlx5_0", "portGuid": "0xb83fd20300a13c10"}},
        "storagePorts": {0: {"hca": "mlx5_7", "portGuid": "0x0c42a10300d10001"},
                         1: {"hca": "mlx5_1", "portGuid": "0x0c42a10300d10003"}}}}}))
    want = {0: RailFacts("mlx5_7", "0x0c42a10300d10001"),
            1: RailFacts("mlx5_1", "0x0c42a10300d10003")}
    for path in (csv_path, yaml_path):
        node = load_inventory(path).nodes["gpu-node-00"]
        assert node.storage_ports == want and set(node.rails) == {0}
    twice = write(tmp_path, "twice.csv", f"{HEADER}\n"
                  "gpu-node-00,storage0,mlx5_7,0x0c42a10300d10001,,\n"
                  "gpu-node-00,storage0,mlx5_7,0x0c42a10300d10001,,\n")
    msg = inventory_error(twice)
    assert f"{twice}:3:" in msg and "gpu-node-00 storage port 0 listed twice" in msg
