"""The host Lustre client and LNet (docs/hosts.md, "Lustre client and LNet").

Rendering (components/planning/lnet.py): the `lnetctl import` document, the rails' addresses,
sysctls and routing tables; the shape validator on good and bad documents; the config's
refusals (the driver container model, addresses); and the GPU node's host script in the
sandbox: a first run installs the client and configures LNet, a second changes nothing, a
changed address reloads LNet once.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml
from support.project import REPO, prod_raw
from support.sandbox import (
    DGX_H100_HCAS,
    DGX_H100_RAIL_NETDEVS,
    Run,
    Sandbox,
    dgx_h100,
    ok,
    unavailable,
)

from components.model.fields import CLUSTER_KEY, ConfigError
from components.planning import host_scripts, lnet
from components.wiring.loading import validate_cluster


@pytest.fixture(scope="module")
def prod():
    return validate_cluster(prod_raw(), REPO)


def problems(raw: dict) -> list:
    with pytest.raises(ConfigError) as info:
        validate_cluster(raw, REPO)
    return info.value.problems


# --- rendering ---------------------------------------------------------------------------------
def test_lnet_conf_is_one_o2ib_net_over_every_rail(prod):
    node = prod.nodes[0]
    text = lnet.lnet_conf(prod, node)
    assert lnet.lnet_yaml_problems(text) == []
    doc = yaml.safe_load(text)
    (net,) = doc["net"]
    assert net["net type"] == prod.storage.lnet_network == "o2ib0"
    # Multi-rail: one local NI per rail, by the stable IPoIB names, parents (no P_Key child:
    # the data path P_Key is at index 0, docs/fabric.md).
    assert [ni["interfaces"] for ni in net["local NI(s)"]] == [
        {0: name} for name in DGX_H100_RAIL_NETDEVS]
    assert doc["global"] == {"discovery": 1}


def test_rail_addresses_are_deterministic_disjoint_and_clear_of_the_servers(prod):
    la = prod.storage.lnet_addresses
    mgs = {ipaddress.IPv4Address(n.split("@")[0]) for fs in prod.storage.lustre
           for n in fs.mgs_nids}
    seen = set()
    for node in prod.nodes:
        addrs = lnet.rail_addresses(prod, node)
        assert addrs == lnet.rail_addresses(prod, node)
        assert [a.netdev for a in addrs] == [r.netdev for r in node.rails]
        for a in addrs:
            assert a.address in la.client_range and a.address in la.cidr
            assert a.prefixlen == la.cidr.prefixlen and a.address not in mgs
            assert a.address not in seen
            seen.add(a.address)
    first = lnet.rail_addresses(prod, prod.nodes[0])
    assert [str(a.address) for a in first[:2]] == ["172.20.128.1", "172.20.144.1"]
    assert len(seen) == 8 * len(prod.nodes)


def test_multi_rail_sysctls_and_a_routing_table_per_rail(prod):
    node = prod.nodes[0]
    lines = lnet.sysctls(prod, node).splitlines()
    for r in node.rails:
        dev = r.netdev
        assert {f"net.ipv4.conf.{dev}.arp_ignore = 1", f"net.ipv4.conf.{dev}.arp_announce = 2",
                f"net.ipv4.conf.{dev}.rp_filter = 2"} <= set(lines)
    plan = yaml.safe_load(lnet.netplan(prod, node))["network"]
    for a in lnet.rail_addresses(prod, node):
        eth = plan["ethernets"][a.netdev]
        assert eth["addresses"] == [a.cidr]
        assert eth["routes"] == [{"to": "172.20.0.0/16", "scope": "link",
                                  "from": str(a.address), "table": 100 + a.rail}]
        assert eth["routing-policy"] == [{"from": str(a.address), "table": 100 + a.rail}]


# --- the shape validator -----------------------------------------------------------------------
GOOD = """\
net:
    - net type: o2ib0
      local NI(s):
        - interfaces:
              0: ib0
          tunables:
              peer_credits: 32
        - interfaces:
              0: ib1
global:
    discovery: 1
"""


@pytest.mark.parametrize(("text", "why"), [
    ("net: o2ib0(ib0)\n", "'net' must be a non-empty list"),
    ("- net type: o2ib0\n", "must be a mapping of sections"),
    ("global:\n  discovery: 1\n", "no 'net' section"),
    ("nets:\n  - net type: o2ib0\n", "unknown section 'nets'"),
    ("net:\n  - net type: ib0\n    local NI(s):\n      - interfaces: {0: ib0}\n",
     "'net type' 'ib0' is not an LNet network"),
    ("net:\n  - net type: o2ib0\n    local NI(s): []\n", "'local NI(s)' must be a non-empty"),
    ("net:\n  - net type: o2ib0\n    local NIs:\n      - interfaces: {0: ib0}\n",
     "unknown key 'local NIs'"),
    ("net:\n  - net type: o2ib0\n    local NI(s):\n      - interfaces: ib0\n",
     "'interfaces' must map 0, 1, ..."),
    ("net:\n  - net type: o2ib0\n    local NI(s):\n      - interfaces: {1: ib0}\n",
     "interface keys must be 0..0"),
    ("net:\n  - net type: o2ib0\n    local NI(s):\n      - interfaces: {0: ib0}\n"
     "      - interfaces: {0: ib0}\n", "interface ib0 appears twice"),
    ("net:\n  - net type: o2ib0\n    local NI(s):\n      - interfaces: {0: ib0}\n"
     "global:\n  discovery: on\n", "global: discovery must be an integer"),
    ("net: [\n", "not YAML"),
])
def test_the_validator_names_what_lnetctl_would_reject(text, why):
    assert lnet.lnet_yaml_problems(GOOD) == []
    found = lnet.lnet_yaml_problems(text)
    assert any(why in p for p in found), found


# --- config ------------------------------------------------------------------------------------
def test_the_driver_container_with_a_host_lustre_client_is_refused():
    raw = prod_raw()
    raw["platform"]["networkOperator"]["ofed"] = "operator"
    (p,) = problems(raw)
    assert p.path == "platform.networkOperator.ofed" and p.value == "operator"
    assert "ko2iblnd" in p.message and "ib_core" in p.message
    assert "ofed: host" in p.fix


@pytest.mark.parametrize(("change", "path", "why"), [
    ({"clientRange": "172.21.0.0/17"}, "storage.lnetAddresses.clientRange",
     "is not inside storage.lnetAddresses.cidr"),
    ({"clientRange": "172.20.0.0/17"}, "storage.lnetAddresses.clientRange",
     "contains the MGS address 172.20.0.10"),
    ({"cidr": "172.21.0.0/16", "clientRange": "172.21.128.0/17"}, "storage.lustre[0].mgsNids",
     "is outside storage.lnetAddresses.cidr"),
    ({"clientRange": "172.20.255.0/29"}, "storage.lnetAddresses.clientRange",
     "gives each rail 1 addresses; gpu-node-00 (SU 1, slot 0) is node number 1"),
])
def test_lnet_addresses_are_checked(change, path, why):
    raw = prod_raw()
    raw["storage"]["lnetAddresses"].update(change)
    found = problems(raw)
    assert any(p.path == path and why in p.message for p in found), found


def test_lnet_addresses_must_not_overlap_the_other_networks():
    raw = prod_raw()
    raw["network"]["rdmaCidr"] = "172.20.0.0/16"
    assert any(p.path == "storage.lnetAddresses.cidr" and "network.rdmaCidr" in p.message
               for p in problems(raw))


@pytest.mark.parametrize("key", ["lnetAddresses", "lustreClient"])
def test_the_lnet_settings_are_required(key):
    raw = prod_raw()
    del raw["storage"][key]
    assert [p.path for p in problems(raw)] == [f"storage.{key}"]


# --- the host script in the sandbox ------------------------------------------------------------
needs_sandbox = pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")


def gpu_host(tmp_path: Path, cluster) -> tuple[Sandbox, str]:
    """A DGX H100 on DGX OS: its rails under the names DGX OS gives them."""
    node = cluster.nodes[0]
    sb = Sandbox(tmp_path / node.hostname, node.hostname, DGX_H100_HCAS)
    dgx_h100(sb, data_array=False)
    return sb, host_scripts.prepare_gpu_node(cluster, node, CLUSTER_KEY)


def lnet_calls(run: Run) -> list[tuple[str, ...]]:
    """The LNet step's state changes, in order."""
    return [c for c in run.changes
            if c[0] in ("lnetctl", "netplan") or c == ("modprobe", "lnet")
            or c[:2] == ("sysctl", "-p")]


@pytest.mark.slow
@needs_sandbox
def test_first_run_configures_lnet_and_a_second_changes_nothing(tmp_path, prod):
    sb, script = gpu_host(tmp_path, prod)
    first = ok(sb.run(script))
    v = prod.storage.lustre_client.version
    assert first.count("apt-get", "install", "-y", "--allow-change-held-packages",
                       f"lustre-client-utils={v}", f"lustre-client-modules-dkms={v}") == 1
    assert first.count("apt-mark", "hold", "lustre-client-utils",
                       "lustre-client-modules-dkms") == 1
    assert first.count("systemctl", "enable", "lnet") == 1
    assert lnet_calls(first) == [
        ("netplan", "apply"),
        ("sysctl", "-p", "/etc/sysctl.d/91-gpu-cluster-lnet.conf"),
        ("modprobe", "lnet"),
        ("lnetctl", "lnet", "configure"),
        ("lnetctl", "import", "/etc/lnet.conf"),
    ], first.explain()
    assert first.count("netplan", "apply") == 1 and first.count("lnetctl", "import") == 1
    assert first.count("sysctl", "-p", "/etc/sysctl.d/91-gpu-cluster-lnet.conf") == 1
    node = prod.nodes[0]
    assert sb.path("/etc/lnet.conf").read_text() == lnet.lnet_conf(prod, node) + "\n"
    assert sb.path("/etc/netplan/60-gpu-cluster-lnet.yaml").read_text() == (
        lnet.netplan(prod, node) + "\n")
    assert sb.path("/etc/netplan/60-gpu-cluster-lnet.yaml").stat().st_mode & 0o777 == 0o600
    assert "arp_ignore = 1" in sb.path("/etc/sysctl.d/91-gpu-cluster-lnet.conf").read_text()
    assert not sb.path("/etc/modprobe.d/lustre.conf").exists()
    exported = ok(sb.run("lnetctl export\n")).stdout
    assert lnet.lnet_yaml_problems(exported) == [] and "net type: o2ib0" in exported
    second = ok(sb.run(script))
    assert second.changes == [], second.explain()


@pytest.mark.slow
@needs_sandbox
def test_a_changed_address_reloads_lnet_once(tmp_path, prod):
    sb, script = gpu_host(tmp_path, prod)
    ok(sb.run(script))
    raw = prod_raw()
    raw["storage"]["lnetAddresses"]["clientRange"] = "172.20.64.0/18"
    moved = validate_cluster(raw, REPO)
    changed = host_scripts.prepare_gpu_node(moved, moved.nodes[0], CLUSTER_KEY)
    run = ok(sb.run(changed))
    assert run.count("netplan", "apply") == 1
    assert run.find("lnetctl", "net") == [("lnetctl", "net", "del", "--net", "o2ib0")]
    assert run.count("lnetctl", "import", "/etc/lnet.conf") == 1
    assert run.count("apt-get", "install") == 0 and run.count("sysctl", "-p") == 0
    assert "172.20.64.1/16" in sb.path("/etc/netplan/60-gpu-cluster-lnet.yaml").read_text()
    again = ok(sb.run(changed))
    assert again.changes == [], again.explain()


@pytest.mark.slow
@needs_sandbox
def test_a_failed_import_is_retried_by_the_next_run(tmp_path, prod):
    sb, script = gpu_host(tmp_path, prod)
    sb.fail_next("lnetctl import")
    assert sb.run(script).returncode != 0
    retry = ok(sb.run(script))
    assert retry.count("lnetctl", "import", "/etc/lnet.conf") == 1
    assert ok(sb.run(script)).changes == []
