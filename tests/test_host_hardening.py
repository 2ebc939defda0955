"""Host hardening in the preparation scripts: the Kubernetes repository key pinned by
fingerprint, the sshd drop-in, the nftables allowlist on the management interface, and the
kernel settings the kubelet's protectKernelDefaults requires.

Rendering is checked against the upstream facts (kept here, apart from the code under test);
behaviour runs in the bubblewrap sandbox of tests/support/sandbox.py, twice where a rerun must be a
no-op. The rendered ruleset is also checked by the real `nft -c` when nftables is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.project import REPO, prod_raw
from support.sandbox import (
    DGX_H100_HCAS,
    K8S_KEY_FPR,
    Run,
    Sandbox,
    dgx_h100,
    diff_snapshots,
    ok,
    prod_cluster,
    prod_scripts,
    run_twice,
    unavailable,
)

from components.model.fields import CLUSTER_KEY
from components.planning import host_scripts
from components.wiring.loading import validate_cluster

CLUSTER = prod_cluster()
SCRIPTS = prod_scripts()
CP = CLUSTER.control_plane[0]
SM = CLUSTER.sm_hosts[0]
GPU = CLUSTER.nodes[0]
KUBE_HOSTS = [h.hostname for h in CLUSTER.control_plane] + [n.hostname for n in CLUSTER.nodes]
RULES = host_scripts.FIREWALL_FILE
DROPIN = "/etc/ssh/sshd_config.d/10-gpu-cluster.conf"
KEYRING = "/etc/apt/keyrings/kubernetes-apt-keyring.gpg"
needs_sandbox = pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")

# pkgs.k8s.io's signing key, "isv:kubernetes OBS Project <isv:kubernetes@build.opensuse.org>":
# the fingerprint gpg prints for core:/stable:/v1.XX/deb/Release.key (kubernetes/kubernetes#128609,
# kubernetes/release#3818).
PKGS_K8S_IO_KEY = "DE15B14486CD377B9E876E1A234654DA9A296436"
OTHER_KEY = "0123456789ABCDEF0123456789ABCDEF01234567"

# setupKernelTunables (kubernetes pkg/kubelet/cm/container_manager_linux.go) with the values of
# k8s.io/component-helpers/node/util/sysctl: what protectKernelDefaults requires of the host.
KUBELET_KERNEL_DEFAULTS = {
    "vm.overcommit_memory": 1,  # VMOvercommitMemoryAlways
    "vm.panic_on_oom": 0,  # VMPanicOnOOMInvokeOOMKiller
    "kernel.panic": 10,  # KernelPanicRebootTimeout
    "kernel.panic_on_oops": 1,  # KernelPanicOnOopsAlways
    "kernel.keys.root_maxkeys": 1000000,  # RootMaxKeysSetting
    "kernel.keys.root_maxbytes": 25000000,  # RootMaxBytesSetting (25 x RootMaxKeysSetting)
}


def script(host: str) -> str:
    return SCRIPTS[f"{host}/prepare-host.sh"]


def variable(text: str, name: str) -> str:
    """A NAME="..." or NAME='...' value of a rendered script's header."""
    m = re.search(rf"^{name}=([\"'])(.*?)\1$", text, re.M | re.S)
    assert m, name
    return m.group(2)


def sandbox(tmp_path: Path, host: str) -> Sandbox:
    hcas = {r.hca: DGX_H100_HCAS[r.hca] for r in GPU.rails} if host == GPU.hostname else {}
    sb = Sandbox(tmp_path / host, host, hcas)
    if hcas:
        dgx_h100(sb, data_array=False)
    return sb


def index(run: Run, *prefix: str) -> int:
    return next(i for i, c in enumerate(run.calls) if c[: len(prefix)] == prefix)


# --- 1. the Kubernetes repository key, pinned by fingerprint ----------------------------------
def test_every_kubernetes_host_pins_the_pkgs_k8s_io_key() -> None:
    assert host_scripts.KUBE_APT_KEY_FINGERPRINT == PKGS_K8S_IO_KEY == K8S_KEY_FPR
    for host in KUBE_HOSTS:
        assert variable(script(host), "KUBE_KEY_FPR") == PKGS_K8S_IO_KEY, host
        assert not re.search(r"curl[^\n]*\|\s*gpg", script(host)), host  # never piped unchecked


@pytest.mark.slow
@needs_sandbox
def test_the_pinned_key_is_checked_before_it_is_installed(tmp_path: Path) -> None:
    sb = sandbox(tmp_path, CP.hostname)
    first = run_twice(sb, script(CP.hostname))
    fetched = first.find("curl")
    assert len(fetched) == 1 and fetched[0][-1].endswith("/deb/Release.key")
    download = fetched[0][fetched[0].index("-o") + 1]
    show = index(first, "gpg", "--show-keys", "--with-colons", download)
    assert index(first, "curl") < show < index(first, "gpg", "--batch", "--yes", "--dearmor")
    assert sb.path(KEYRING).read_text() == f"stub-key {PKGS_K8S_IO_KEY}\n"
    assert first.count("apt-get", "update") == 1
    assert not list(sb.path("/tmp").iterdir())  # the download is not left behind


@pytest.mark.slow
@needs_sandbox
@pytest.mark.parametrize("served", [
    [(OTHER_KEY, None)],  # someone else's key
    [(PKGS_K8S_IO_KEY, None), (OTHER_KEY, None)],  # the right key, and another apt would trust
], ids=["other-key", "extra-key"])
def test_a_key_that_is_not_the_pinned_one_is_refused_and_nothing_is_written(
        tmp_path: Path, served: list[tuple[str, int | None]]) -> None:
    sb = sandbox(tmp_path, CP.hostname)
    sb.serve_release_key(*served)
    run = sb.run(script(CP.hostname))
    assert run.returncode == 1, run.explain()
    assert f"the pinned one {PKGS_K8S_IO_KEY}" in run.stderr
    if len(served) == 1:
        assert f"its fingerprint is {OTHER_KEY}" in run.stderr
    else:
        assert "none (no key, or more than one)" in run.stderr
    assert not sb.path(KEYRING).exists()
    assert not sb.path("/etc/apt/sources.list.d/kubernetes.list").exists()
    assert not run.find("gpg", "--batch", "--yes", "--dearmor")
    assert not run.find("apt-get", "update")
    assert not run.find("apt-get", "install", "-y", "--allow-change-held-packages")
    assert not list(sb.path("/tmp").iterdir())


@pytest.mark.slow
@needs_sandbox
@pytest.mark.parametrize("installed", [f"stub-key {OTHER_KEY}\n",
                                       f"stub-key {PKGS_K8S_IO_KEY} 1735171200\n"],
                         ids=["not-the-pinned-key", "pinned-key-expired"])
def test_an_installed_keyring_without_the_pinned_key_is_fetched_again(
        tmp_path: Path, installed: str) -> None:
    """A keyring an earlier, unpinned run installed, or the pinned key past an expiry the
    project has since extended (same fingerprint): fetched, checked and replaced once."""
    sb = sandbox(tmp_path, CP.hostname)
    ok(sb.run(script(CP.hostname)))
    sb.path(KEYRING).write_text(installed)
    run = ok(sb.run(script(CP.hostname)))
    assert run.count("curl") == 1 and run.count("apt-get", "update") == 1
    assert sb.path(KEYRING).read_text() == f"stub-key {PKGS_K8S_IO_KEY}\n"
    assert ok(sb.run(script(CP.hostname))).changes == []


# --- 2. sshd: key logins only ----------------------------------------------------------------
SSHD = {"PasswordAuthentication": "no", "KbdInteractiveAuthentication": "no",
        "PermitRootLogin": "no", "PubkeyAuthentication": "yes"}


def effective_sshd(sb: Sandbox) -> dict[str, str]:
    out = ok(sb.run("sshd -T\n")).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def test_every_host_renders_the_sshd_drop_in() -> None:
    text = host_scripts.sshd_config(CLUSTER_KEY)
    settings = dict(line.split(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert settings == SSHD
    for host in [h.hostname for h in CLUSTER.hosts] + [n.hostname for n in CLUSTER.nodes]:
        assert variable(script(host), "SSHD_CONFIG") == text, host
    login = CLUSTER.hosts[0].model_copy(update={"role": "login", "hostname": "login-01"})
    rendered = host_scripts.prepare_host(CLUSTER, login, CLUSTER_KEY)
    assert variable(rendered, "SSHD_CONFIG") == text and "FIREWALL_RULES" not in rendered


@pytest.mark.slow
@needs_sandbox
@pytest.mark.parametrize("host", [CP.hostname, SM.hostname, GPU.hostname])
def test_the_drop_in_is_tested_before_it_is_installed_and_a_rerun_changes_nothing(
        tmp_path: Path, host: str) -> None:
    sb = sandbox(tmp_path, host)
    first = run_twice(sb, script(host))
    staged = next(c for c in first.calls if c[:3] == ("sshd", "-t", "-f"))[3]
    assert staged.startswith("/etc/ssh/sshd_config.d/.") and not staged.endswith(".conf")
    assert index(first, "sshd", "-t", "-f") < index(first, "systemctl", "reload", "ssh")
    assert first.count("systemctl", "reload", "ssh") == 1
    assert sb.path(DROPIN).read_text() == host_scripts.sshd_config(CLUSTER_KEY) + "\n"
    assert {k.lower(): v for k, v in SSHD.items()}.items() <= effective_sshd(sb).items()


@pytest.mark.slow
@needs_sandbox
def test_a_login_host_gets_the_drop_in_and_no_firewall(tmp_path: Path) -> None:
    login = CLUSTER.hosts[0].model_copy(update={"role": "login", "hostname": "login-01"})
    first = run_twice(Sandbox(tmp_path / "login-01", "login-01"),
                      host_scripts.prepare_host(CLUSTER, login, CLUSTER_KEY))
    assert first.changes == [("systemctl", "reload", "ssh")], first.explain()


@pytest.mark.slow
@needs_sandbox
def test_the_drop_in_wins_over_cloud_init(tmp_path: Path) -> None:
    """sshd keeps the first value it reads: 10-gpu-cluster.conf is read before cloud-init's
    50-cloud-init.conf, which turns password logins on."""
    sb = sandbox(tmp_path, SM.hostname)
    sb.path("/etc/ssh/sshd_config.d/50-cloud-init.conf").write_text(
        "PasswordAuthentication yes\n")
    assert effective_sshd(sb)["passwordauthentication"] == "yes"
    ok(sb.run(script(SM.hostname)))
    assert effective_sshd(sb)["passwordauthentication"] == "no"


@pytest.mark.slow
@needs_sandbox
def test_a_value_read_before_the_drop_in_stops_the_script(tmp_path: Path) -> None:
    sb = sandbox(tmp_path, SM.hostname)
    config = sb.path("/etc/ssh/sshd_config")
    config.write_text("PasswordAuthentication yes\n" + config.read_text())
    run = sb.run(script(SM.hostname))
    assert run.returncode == 1, run.explain()
    assert "sshd: PasswordAuthentication is yes in effect, not no" in run.stderr


@pytest.mark.slow
@needs_sandbox
def test_an_invalid_sshd_configuration_is_never_left_in_place(tmp_path: Path) -> None:
    # Invalid before any change: nothing is written, nothing reloaded.
    sb = sandbox(tmp_path / "before", SM.hostname)
    config = sb.path("/etc/ssh/sshd_config")
    config.write_text(config.read_text() + "PasswordAuthentcation no\n")
    run = sb.run(script(SM.hostname))
    assert run.returncode == 1 and "invalid before any change" in run.stderr, run.explain()
    assert list(sb.path("/etc/ssh/sshd_config.d").iterdir()) == []
    assert not run.find("systemctl", "reload", "ssh")
    # A rendered drop-in that sshd rejects on its own: never installed.
    sb = sandbox(tmp_path / "alone", SM.hostname)
    bad = script(SM.hostname).replace("PermitRootLogin no", "PermitRootLogin maybe")
    run = sb.run(bad)
    assert run.returncode == 1 and "nothing was changed" in run.stderr, run.explain()
    assert list(sb.path("/etc/ssh/sshd_config.d").iterdir()) == []
    # Valid alone, not with the rest (a second sftp Subsystem): the previous file comes back.
    sb = sandbox(tmp_path / "together", SM.hostname)
    ok(sb.run(script(SM.hostname)))
    before = sb.snapshot()
    clash = script(SM.hostname).replace("PubkeyAuthentication yes",
                                        "PubkeyAuthentication yes\nSubsystem sftp internal-sftp")
    run = sb.run(clash)
    assert run.returncode == 1 and "the previous state is back" in run.stderr, run.explain()
    assert diff_snapshots(before, sb.snapshot()) == [] and run.changes == []


# --- 3. the host firewall ----------------------------------------------------------------------
MGMT = str(CLUSTER.network.management_cidr)
# The control planes, and kube-vip's VIP: the host holding it may send from that address.
_VIP = CLUSTER.kubernetes.control_plane_endpoint.vip
PLANES = {str(h.management_ip) for h in CLUSTER.control_plane} | ({str(_VIP)} if _VIP else set())
# What the stack runs, port by port (docs/hosts.md, "Host firewall"), and who may reach it.
EVERY_HOST = {("tcp", "22"): MGMT}
KUBE_NODE = EVERY_HOST | {
    ("tcp", "10250"): PLANES,  # kubelet: API servers, Prometheus (on the control planes)
    ("tcp", "9100"): PLANES,  # node-exporter (hostNetwork): Prometheus
    ("tcp", "5473"): MGMT,  # Calico Typha
    ("udp", "4789"): MGMT,  # Calico VXLAN (BGP disabled, no IP-in-IP)
    ("tcp", "7946"): MGMT, ("udp", "7946"): MGMT,  # MetalLB memberlist
}
EXPECTED = {
    "control-plane": KUBE_NODE | {
        ("tcp", str(CLUSTER.kubernetes.control_plane_endpoint.port)): MGMT,  # API server
        ("tcp", "2379-2380"): PLANES,  # etcd
    },
    "gpu-worker": KUBE_NODE,
    "sm-host": EVERY_HOST,
}


def allowlist(text: str) -> dict[tuple[str, str], str | set[str]]:
    """The rendered ruleset's allow rules: (protocol, ports) -> the sources."""
    rules = variable(text, "FIREWALL_RULES")
    defines = dict(re.findall(r"^define (\w+) = (.+)$", rules, re.M))
    out: dict[tuple[str, str], str | set[str]] = {}
    for name, proto, ports in re.findall(
            r"^\s*ip saddr \$(\w+) (tcp|udp) dport (\S+) accept", rules, re.M):
        value = defines[name]
        out[proto, ports] = set(value.strip("{} ").split(", ")) if "{" in value else value
    return out


@pytest.mark.parametrize("host", sorted(h.hostname for h in CLUSTER.hosts) + [GPU.hostname])
def test_the_allowlist_holds_exactly_what_the_role_runs(host: str) -> None:
    role = {h.hostname: h.role for h in CLUSTER.hosts}.get(host, "gpu-worker")
    text = script(host)
    assert allowlist(text) == EXPECTED[role]
    rules = variable(text, "FIREWALL_RULES")
    assert "ip protocol ipip" not in rules and "dport 179 " not in rules  # VXLAN, BGP off
    # Only the management interface(s) are filtered; replies, DHCP and ICMP get in.
    assert "iifname $management_ifaces jump management" in rules
    for line in ("ct state established,related accept", "udp sport 67 udp dport 68 accept",
                 "icmpv6 type {", "    drop"):
        assert line in rules, line
    assert variable(text, "HOST_FIREWALL") == "on"
    assert variable(text, "SSH_CIDRS") == MGMT


def test_every_gpu_node_renders_the_same_allowlist() -> None:
    """The sources are networks and control planes, never the list of GPU nodes: adding one
    changes no other host's script."""
    lists = {n.hostname: allowlist(script(n.hostname)) for n in CLUSTER.nodes}
    assert all(rules == EXPECTED["gpu-worker"] for rules in lists.values())


def nft_available() -> str | None:
    """Why the real `nft -c` cannot run here, or None."""
    if shutil.which("nft") is None:
        return ("nft is not installed (apt-get install nftables; the Makefile's DEB_PACKAGES "
                "lacks it)")
    probe = subprocess.run(["unshare", "-rn", "nft", "-c", "-f", "-"], capture_output=True,
                           text=True, input="table inet probe {\n  chain c {\n    type filter "
                           "hook input priority 0;\n  }\n}\n")
    if probe.returncode != 0:
        return f"nft cannot check a ruleset here (user and network namespace): {probe.stderr}"
    return None


@pytest.mark.skipif(nft_available() is not None, reason=str(nft_available()))
@pytest.mark.parametrize("host", [CP.hostname, SM.hostname, GPU.hostname])
def test_the_rendered_ruleset_passes_the_real_nft_check(tmp_path: Path, host: str) -> None:
    rules = variable(script(host), "FIREWALL_RULES").replace(
        host_scripts.FIREWALL_IFACES_PLACEHOLDER, '"eno1", "bond0.100"')
    path = tmp_path / "gpu-cluster.nft"
    path.write_text(rules + "\n")
    # Loaded twice in a namespace of its own: the add, delete, re-create idiom replaces the table.
    proc = subprocess.run(["unshare", "-rn", "sh", "-c", f"nft -c -f {path} && nft -f {path} "
                           f"&& nft -f {path} && nft list table inet gpu_cluster"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert 'iifname { "eno1", "bond0.100" } jump management' in proc.stdout
    broken = tmp_path / "broken.nft"
    broken.write_text(rules.replace("accept comment", "acept comment", 1) + "\n")
    assert subprocess.run(["unshare", "-rn", "nft", "-c", "-f", str(broken)],
                          capture_output=True).returncode != 0


@pytest.mark.slow
@needs_sandbox
def test_the_ruleset_is_checked_then_loaded_and_a_rerun_changes_nothing(tmp_path: Path) -> None:
    sb = sandbox(tmp_path, CP.hostname)
    first = run_twice(sb, script(CP.hostname))
    check = next(c for c in first.calls if c[:2] == ("nft", "-c"))
    assert check[2] == "-f" and check[3] != RULES and check[3].startswith("/etc/nftables.d/.")
    assert index(first, "nft", "-c") < index(first, "nft", "-f", RULES)
    assert first.count("nft", "-f", RULES) == 1
    rules = sb.path(RULES).read_text()
    # The stub's default interface, and the one kube-vip announces the VIP on (prod: bond0).
    assert 'define management_ifaces = { "eno1", "bond0" }' in rules
    assert rules == variable(script(CP.hostname), "FIREWALL_RULES").replace(
        host_scripts.FIREWALL_IFACES_PLACEHOLDER, '"eno1", "bond0"') + "\n"
    unit = sb.path("/etc/systemd/system/gpu-cluster-firewall.service").read_text()
    assert f"ExecStart=/usr/sbin/nft -f {RULES}" in unit and "WantedBy=sysinit.target" in unit
    assert (sb.state / "units/gpu-cluster-firewall.enabled").exists()
    # The boot loads it again (the unit); the next run changes nothing.
    sb.reboot()
    assert (sb.state / "nft-loaded").read_text() == rules
    assert ok(sb.run(script(CP.hostname))).changes == []
    # Flushed by hand: loaded once more.
    (sb.state / "nft-loaded").unlink()
    assert ok(sb.run(script(CP.hostname))).changes == [("nft", "-f", RULES)]


@pytest.mark.slow
@needs_sandbox
def test_a_ruleset_nft_rejects_is_never_installed(tmp_path: Path) -> None:
    sb = sandbox(tmp_path, SM.hostname)
    sb.fail_next("nft -c")
    run = sb.run(script(SM.hostname))
    assert run.returncode == 1 and "nft -c rejects the rendered ruleset" in run.stderr
    assert not sb.path(RULES).exists() and list(sb.path("/etc/nftables.d").iterdir()) == []
    assert not run.find("nft", "-f") and not (sb.state / "nft-loaded").exists()
    assert not sb.path("/etc/systemd/system/gpu-cluster-firewall.service").exists()


@pytest.mark.slow
@needs_sandbox
def test_the_management_interface_is_the_one_holding_the_management_address(
        tmp_path: Path) -> None:
    sb = sandbox(tmp_path, CP.hostname)
    sb.set_addresses({"bond0": f"{CP.management_ip}/16", "bond0.112": "10.12.0.5/24"})
    ok(sb.run(script(CP.hostname)))
    assert 'define management_ifaces = { "bond0" }' in sb.path(RULES).read_text()


@pytest.mark.slow
@needs_sandbox
def test_no_interface_with_the_management_address_stops_before_any_firewall_change(
        tmp_path: Path) -> None:
    sb = sandbox(tmp_path, SM.hostname)
    sb.set_addresses({"eno1": "10.99.0.11/16"})
    run = sb.run(script(SM.hostname))
    assert run.returncode == 1, run.explain()
    assert f"no interface holds this host's management address {SM.management_ip}" in run.stderr
    assert not run.find("nft") and not sb.path(RULES).exists()


@pytest.mark.slow
@needs_sandbox
def test_the_firewall_never_locks_out_the_ssh_client_running_it(tmp_path: Path) -> None:
    sb = sandbox(tmp_path, SM.hostname)
    sb.ssh_clients("192.168.7.7")
    run = sb.run(script(SM.hostname))
    assert run.returncode == 1, run.explain()
    assert "SSH clients ( 192.168.7.7 ) are outside network.managementCidr" in run.stderr
    assert not run.find("nft") and not sb.path(RULES).exists()
    sb.ssh_clients("192.168.7.7", "10.10.9.9")  # an operator elsewhere, and the runner
    ok(sb.run(script(SM.hostname)))
    assert sb.path(RULES).exists()


@pytest.mark.slow
@needs_sandbox
def test_a_runner_on_an_admin_network_is_not_locked_out(tmp_path: Path) -> None:
    cluster = _with_firewall(adminCidrs=["192.168.7.0/24"])
    host = next(h for h in cluster.hosts if h.hostname == SM.hostname)
    sb = sandbox(tmp_path, SM.hostname)
    sb.ssh_clients("192.168.7.7")  # only the runner, on the operators' VPN
    ok(sb.run(host_scripts.prepare_host(cluster, host, CLUSTER_KEY)))
    assert "ip saddr $admin_nets tcp dport 22 accept" in sb.path(RULES).read_text()


@pytest.mark.slow
@needs_sandbox
def test_turning_the_firewall_off_removes_exactly_what_the_stack_installed(
        tmp_path: Path) -> None:
    sb = sandbox(tmp_path, SM.hostname)
    ok(sb.run(script(SM.hostname)))
    off = script(SM.hostname).replace('HOST_FIREWALL="on"', 'HOST_FIREWALL="off"')
    first = run_twice(sb, off)
    assert first.changes == [("systemctl", "disable", "gpu-cluster-firewall"),
                             ("nft", "delete", "table", "inet", "gpu_cluster"),
                             ("systemctl", "daemon-reload")], first.explain()
    assert not sb.path(RULES).exists() and not (sb.state / "nft-loaded").exists()
    assert not sb.path("/etc/systemd/system/gpu-cluster-firewall.service").exists()


# --- 4. the kernel settings the kubelet's protectKernelDefaults requires ----------------------
@pytest.mark.parametrize("host", KUBE_HOSTS)
def test_every_kubernetes_host_has_the_kubelet_kernel_defaults(host: str) -> None:
    sysctls = dict(line.split(" = ") for line in variable(script(host), "SYSCTLS").splitlines())
    for key, value in KUBELET_KERNEL_DEFAULTS.items():
        assert sysctls.get(key) == str(value), (host, key)


@pytest.mark.slow
@needs_sandbox
def test_a_sysctl_file_read_after_ours_stops_the_script(tmp_path: Path) -> None:
    """`sysctl --system` applies the last value: a later file would make the kubelet refuse
    to start; the script names the setting instead."""
    sb = sandbox(tmp_path, CP.hostname)
    sb.path("/etc/sysctl.d/99-vendor.conf").write_text("kernel.panic = 0\n")
    run = sb.run(script(CP.hostname))
    assert run.returncode == 1, run.explain()
    assert "sysctl: kernel.panic is 0, the kubelet requires 10" in run.stderr
    assert not run.find("apt-get", "install", "-y", "--allow-change-held-packages")


# --- the firewall's settings --------------------------------------------------------------------
def _with_firewall(**settings: object):
    raw = prod_raw()
    raw["network"]["hostFirewall"] = settings
    return validate_cluster(raw, REPO)


def test_admin_networks_reach_ssh_everywhere_and_the_api_server_on_control_planes() -> None:
    """An operators' VPN outside managementCidr: SSH on every host, the API server port on the
    control planes, nothing else (no etcd, no kubelet)."""
    cluster = _with_firewall(adminCidrs=["192.168.50.0/24"])
    cp = host_scripts.prepare_host(cluster, cluster.control_plane[0], CLUSTER_KEY)
    node = host_scripts.prepare_gpu_node(cluster, cluster.nodes[0], CLUSTER_KEY)
    for text, ports in ((cp, {"22", "6443"}), (node, {"22"})):
        rules = variable(text, "FIREWALL_RULES")
        assert "define admin_nets = { 192.168.50.0/24 }" in rules
        assert set(re.findall(r"ip saddr \$admin_nets tcp dport (\S+) accept", rules)) == ports
    assert "admin_nets" not in variable(SCRIPTS[f"{CP.hostname}/prepare-host.sh"],
                                        "FIREWALL_RULES")


@pytest.mark.skipif(nft_available() is not None, reason=str(nft_available()))
def test_the_ruleset_with_admin_networks_passes_the_real_nft_check(tmp_path: Path) -> None:
    cluster = _with_firewall(adminCidrs=["192.168.50.0/24", "172.16.0.0/12"])
    text = host_scripts.prepare_host(cluster, cluster.control_plane[0], CLUSTER_KEY)
    path = tmp_path / "gpu-cluster.nft"
    path.write_text(variable(text, "FIREWALL_RULES").replace(
        host_scripts.FIREWALL_IFACES_PLACEHOLDER, '"eno1"') + "\n")
    proc = subprocess.run(["unshare", "-rn", "nft", "-c", "-f", str(path)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_firewall_turned_off_in_the_config_is_off_in_every_script() -> None:
    cluster = _with_firewall(enabled=False)
    for text in (host_scripts.prepare_host(cluster, cluster.control_plane[0], CLUSTER_KEY),
                 host_scripts.prepare_gpu_node(cluster, cluster.nodes[0], CLUSTER_KEY)):
        assert variable(text, "HOST_FIREWALL") == "off"
