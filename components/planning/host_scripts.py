"""Host preparation scripts rendered from the model (pure text, no pulumi).

Every script is idempotent: each step checks the state it wants before changing anything, so a
second run changes nothing (tests run them twice against recording stub binaries). No script
ever contains a secret: credentials reach a host only on a command's stdin, as Pulumi secrets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import ip_address
from textwrap import dedent
from typing import Literal

from components.model.cluster import AptSource, Cluster, Host
from components.model.gpu_nodes import GpuNode
from components.model.tunables import (
    KUBELET_SYSCTLS,
    POD_NETWORK_MODULES,
    POD_NETWORK_SYSCTLS,
)
from components.planning import lnet, platform, reboot
from components.planning.script_files import body, single_quoted, template

# Bash helpers for "change a file, then act on it" steps (host preparation, kubelet settings).
CHANGE_TRACKING = body("host/change-tracking.sh")

# Shared steps every Kubernetes node needs; each guarded so a rerun is a no-op.
KUBE_PREREQS = body("host/kube-prereqs.sh")

# Every host: keys only, no root logins (docs/hosts.md, "SSH daemon"). sshd keeps the FIRST value
# it reads for most keywords, and Ubuntu's sshd_config includes /etc/ssh/sshd_config.d/*.conf
# (in name order) near its top: 10-gpu-cluster.conf is read before cloud-init's
# 50-cloud-init.conf, which may turn password logins on, and before the rest of sshd_config, so
# its values win. The stack itself logs in as cluster.sshUser with a key and uses sudo.
SSHD_STEPS = body("host/sshd.sh")

# The host firewall (docs/hosts.md, "Host firewall"): an nftables table of its own, `inet
# gpu_cluster`, loaded at boot by gpu-cluster-firewall.service before the network comes up. Only
# the management interface(s) are filtered; loopback, the InfiniBand rails (IPoIB) and Calico's
# interfaces (cali*, vxlan.calico) are left alone: pods are governed by NetworkPolicies, and
# filtering the CNI's interfaces would break it. The file is checked (`nft -c -f`) before it is
# installed; `nft -f` applies it as one transaction (add, delete and re-create the table), which
# touches no other table (kube-proxy's, Calico's).
FIREWALL_FILE = "/etc/nftables.d/gpu-cluster.nft"
FIREWALL_UNIT_NAME = "gpu-cluster-firewall"
FIREWALL_IFACES_PLACEHOLDER = "@MANAGEMENT_IFACES@"
FIREWALL_STEPS = body("host/firewall.sh")

GPU_STEPS = body("host/gpu.sh")
# Reads only: with a storage fabric, each storage port is there under the name LNet uses.
STORAGE_PORTS = body("host/storage-ports.sh")


# Local NVMe scratch (DataDrives). DGX H100: 2 x 1.92 TB M.2 NVMe for DGX OS (RAID1) and
# 8 x 3.84 TB U.2 NVMe for storage/cache (NVIDIA DGX BasePOD reference architecture, "Core
# Components"); DGX OS ships the U.2 drives as one md RAID0 mounted at /raid. Kernel names
# (nvme0n1, ...) are enumeration order, so drives are picked by what they are, through the
# links udev's 60-persistent-storage.rules makes under /dev/disk/by-id for every namespace:
# nvme-<model>_<serial>, nvme-<model>_<serial>_<nsid>, nvme-<wwid> (eui.*, nvme.*, uuid.*), and
# the same with -part<N> for partitions. See docs/hosts.md, "Local NVMe scratch on DGX OS".
DATA_DRIVE_TOLERANCE_PERCENT = 2  # /sys/block/<dev>/size against the marketed decimal size

# Read only, first: the board answering on this address is the one the inventory describes. Its
# management MAC is what the DHCP/PXE reservation hands the address to
# (build/<stack>/network/dhcp-hosts); a replaced board has new MACs.
BOARD_CHECK = body("host/board-check.sh")

# Part 1 runs first and only reads: a missing, foreign or busy data drive stops the script
# before it has changed anything on the host. It leaves scratch_action (adopt, assemble or
# create), scratch_dev and the chosen drives for part 2.
SCRATCH_SELECT = body("host/scratch-select.sh")

# Read only too: a host driver where the GPU Operator is to own the driver stops the script,
# and so does a package repository that does not serve what the host still needs.
DRIVER_OWNER = body("host/driver-owner.sh")
PACKAGE_SOURCES = body("host/package-sources.sh")
# Functions (no change) for the repositories whose signing keys are pinned.
APT_KEYS = body("host/apt-keys.sh")

SCRATCH_STEPS = body("host/scratch.sh")
SM_PACKAGES = body("host/sm-packages.sh")
COMPLETE = body("host/complete.sh")


def _header(title: str, hostname: str, address: object, stack_key: str) -> str:
    """The top of a host preparation script: shebang, shell options and its `log`."""
    return template("host/header.sh", title=title, hostname=hostname, address=address,
                    stack_key=stack_key)


def _data_drive_env(node: GpuNode) -> dict[str, str]:
    """What SCRATCH_SELECT matches drives against; empty values when the node has none."""
    drives = node.template.data_drives
    if drives is None:
        return dict.fromkeys(("count", "size", "min", "max", "models"), "")
    want = round(drives.size_tb * 10**12)
    slack = want * DATA_DRIVE_TOLERANCE_PERCENT // 100
    return {"count": str(drives.count), "size": f"{drives.size_tb:g} TB",
            "min": str(want - slack), "max": str(want + slack), "models": "|".join(drives.models)}


def kube_pkg_version(version: str) -> str:
    """Debian package version of the pkgs.k8s.io repository for a Kubernetes release."""
    return f"{version}-1.1"


# The OpenPGP key that signs the pkgs.k8s.io repositories, the same key for every
# core:/stable:/v1.XX/deb/ minor: "isv:kubernetes OBS Project <isv:kubernetes@build.opensuse.org>",
# rsa2048, created 2022-08-25. Its fingerprint as `gpg` prints it for .../deb/Release.key in
# kubernetes/kubernetes#128609 and kubernetes/release#3818 (the project extends this key's
# expiry in place, fingerprint unchanged; kubernetes/website#49049 gives 2026-12-29 as the
# current expiry). A new key is a reviewed change of this constant.
KUBE_APT_KEY_FINGERPRINT = "DE15B14486CD377B9E876E1A234654DA9A296436"

def _common_env(cluster: Cluster) -> str:
    modules = POD_NETWORK_MODULES
    kubelet = "\n".join(f"{key} = {value}" for key, value in KUBELET_SYSCTLS.items())
    sysctls = "\n".join([*POD_NETWORK_SYSCTLS, kubelet])
    minor = ".".join(cluster.kubernetes.version.split(".")[:2])
    # Not dedent(): the multi-line SYSCTLS value would leave the lines indented.
    return (f'MODULES="{modules}"\n'
            f'SYSCTLS="{sysctls}"\n'
            f'KUBELET_SYSCTLS="{kubelet}"\n'
            f'KUBE_PKG_VERSION="{kube_pkg_version(cluster.kubernetes.version)}"\n'
            f'KUBE_REPO="https://pkgs.k8s.io/core:/stable:/v{minor}/deb"\n'
            f'KUBE_KEY_FPR="{KUBE_APT_KEY_FINGERPRINT}"\n')


# The sshd drop-in every host gets (SSHD_STEPS): what the stack needs to log in (a key, as
# cluster.sshUser, which the config never lets be root) and nothing a password could open.
SSHD_SETTINGS: tuple[tuple[str, str], ...] = (
    ("PasswordAuthentication", "no"),
    ("KbdInteractiveAuthentication", "no"),  # PAM's password and one-time-code prompts
    ("PermitRootLogin", "no"),  # the stack logs in as cluster.sshUser and uses sudo
    ("PubkeyAuthentication", "yes"),  # how the stack logs in
)


def sshd_config(stack_key: str) -> str:
    """/etc/ssh/sshd_config.d/10-gpu-cluster.conf."""
    return "\n".join([f"# Rendered by gpu-cluster from {stack_key}; do not edit (docs/hosts.md).",
                      *(f"{key} {value}" for key, value in SSHD_SETTINGS)])


# --- host firewall: the allowlist, from what this stack runs -------------------------------------
# Port lists relied on:
# - Kubernetes "Ports and Protocols" (kubernetes.io/docs/reference/networking/ports-and-protocols,
#   k/website content/en/docs/reference/networking/ports-and-protocols.md): API server 6443
#   (here control_plane_endpoint.port, kubeadm's bindPort) used by all; etcd 2379-2380 used by
#   kube-apiserver and etcd; kubelet 10250 used by self and the control plane; scheduler 10259
#   and controller manager 10257 used by self only (kubeadm binds them to 127.0.0.1); NodePort
#   30000-32767: no NodePort Service here (ingress is a MetalLB LoadBalancer, whose traffic
#   kube-proxy DNATs to the pods before the input hook).
# - Calico "System requirements, Network requirements" (docs.tigera.io/calico/latest/
#   getting-started/kubernetes/requirements): BGP TCP 179, IP-in-IP protocol 4, VXLAN UDP 4789,
#   Typha TCP 5473 on Typha hosts (the Tigera operator always runs Typha). Which of them this
#   stack uses is read from its own Calico values (components/planning/platform.py).
# - MetalLB "Requirements" (metallb.io): in L2 mode TCP and UDP 7946 between the speakers
#   (memberlist). L2 announcements are ARP, which nftables' inet family never sees; so is
#   kube-vip's VIP (ARP mode): only the API server port behind it is opened.
# - prometheus-community/helm-charts charts/prometheus-node-exporter/values.yaml: hostNetwork
#   true, port 9100, scraped by Prometheus, which runs on the control planes
#   (release_placement). The GPU Operator's DCGM exporter (gpu-operator values.yaml
#   dcgmExporter.hostNetwork: false) is scraped on its pod address, not the host's.
# - Lustre: LNet runs over o2ib on the InfiniBand rails (storage.lnetNetwork must be o2ib*), not
#   over TCP 988 on the management network; the rails are not filtered.
# Sources: "management_net" is network.managementCidr (every node, the pulumi runner);
# "control_planes" the control-plane hosts and the kube-vip VIP: pods reach other hosts
# masqueraded to their node's management address (Calico natOutgoing), so a pod's scrape or
# API call arrives from a node address.
@dataclass(frozen=True)
class FirewallRule:
    """Inbound `proto` traffic to `ports` from the nft set `sources`, for `purpose`."""

    proto: Literal["tcp", "udp", "ipip"]
    ports: str  # "22", "2379-2380"; empty for ipip
    sources: Literal["management_net", "control_planes", "admin_nets"]
    purpose: str


def _cni_rules(cluster: Cluster) -> list[FirewallRule]:
    """What the stack's Calico needs between nodes, read from the values it installs with."""
    calico = next(r for r in platform.helm_releases(cluster) if r.name == "calico")
    network = calico.values["installation"]["calicoNetwork"]
    encapsulations = {pool.get("encapsulation", "IPIP") for pool in network.get("ipPools", ())}
    rules = [FirewallRule("tcp", "5473", "management_net", "Calico Typha: every calico-node")]
    if encapsulations & {"VXLAN", "VXLANCrossSubnet"}:
        rules.append(FirewallRule("udp", "4789", "management_net", "Calico VXLAN between nodes"))
    if encapsulations & {"IPIP", "IPIPCrossSubnet"}:
        rules.append(FirewallRule("ipip", "", "management_net", "Calico IP-in-IP between nodes"))
    if network.get("bgp", "Enabled") != "Disabled":
        rules.append(FirewallRule("tcp", "179", "management_net", "Calico BGP between nodes"))
    return rules


def firewall_allowlist(cluster: Cluster, role: str) -> tuple[FirewallRule, ...]:
    """Inbound traffic the host's management interface admits, besides replies (established
    connections), DHCP replies and ICMP; an empty tuple: no firewall for this role."""
    admins = bool(cluster.network.host_firewall.admin_cidrs)
    ssh = [FirewallRule("tcp", "22", "management_net", "SSH: the stack and operators")]
    if admins:
        ssh.append(FirewallRule("tcp", "22", "admin_nets", "SSH: network.hostFirewall.adminCidrs"))
    if role == "sm-host":
        return tuple(ssh)  # opensm speaks InfiniBand only
    if role not in ("control-plane", "gpu-worker"):
        return ()  # login hosts run what their users need: not known here
    rules = list(ssh)
    if role == "control-plane":
        port = str(cluster.kubernetes.control_plane_endpoint.port)
        rules += [FirewallRule("tcp", port, "management_net",
                               "Kubernetes API server and its VIP: kubelets, pods, pulumi"),
                  FirewallRule("tcp", "2379-2380", "control_planes", "etcd: the control planes")]
        if admins:
            rules.append(FirewallRule("tcp", port, "admin_nets",
                                      "Kubernetes API server: network.hostFirewall.adminCidrs"))
    rules += [
        FirewallRule("tcp", "10250", "control_planes",
                     "kubelet API: the API servers and Prometheus"),
        FirewallRule("tcp", "9100", "control_planes", "node-exporter: Prometheus"),
        *_cni_rules(cluster),
        FirewallRule("tcp", "7946", "management_net", "MetalLB speakers (memberlist)"),
        FirewallRule("udp", "7946", "management_net", "MetalLB speakers (memberlist)"),
    ]
    return tuple(rules)


def firewall_ruleset(cluster: Cluster, role: str, hostname: str, stack_key: str) -> str:
    """/etc/nftables.d/gpu-cluster.nft, but for the management interfaces, which the host
    script puts in place of FIREWALL_IFACES_PLACEHOLDER (as a comma-separated list of quoted
    names) once it has found them."""
    rules = firewall_allowlist(cluster, role)
    planes = {ip_address(h.management_ip) for h in cluster.control_plane}
    if (vip := cluster.kubernetes.control_plane_endpoint.vip) is not None:
        planes.add(ip_address(vip))
    defines = [f"define management_ifaces = {{ {FIREWALL_IFACES_PLACEHOLDER} }}",
               f"define management_net = {cluster.network.management_cidr}"]
    if any(r.sources == "control_planes" for r in rules):
        defines.append(f"define control_planes = {{ {', '.join(map(str, sorted(planes)))} }}")
    if any(r.sources == "admin_nets" for r in rules):
        admin = ", ".join(map(str, cluster.network.host_firewall.admin_cidrs))
        defines.append(f"define admin_nets = {{ {admin} }}")
    allow = []
    for r in rules:
        match = "ip protocol ipip" if r.proto == "ipip" else f"{r.proto} dport {r.ports}"
        allow.append(f'    ip saddr ${r.sources} {match} accept comment "{r.purpose}"')
    text = "\n".join([
        f"# Host firewall of {hostname} ({role}): rendered by gpu-cluster from {stack_key};",
        "# do not edit (docs/hosts.md, Host firewall). Port lists: Kubernetes Ports and Protocols,",
        "# Calico network requirements, MetalLB requirements.",
        "# Inbound traffic on the management interface is dropped unless allowed below; other",
        "# interfaces (loopback, InfiniBand rails, cali*, vxlan.calico) are not filtered here.",
        *defines,
        "",
        "table inet gpu_cluster",
        "delete table inet gpu_cluster",
        "table inet gpu_cluster {",
        "  chain input {",
        "    type filter hook input priority filter; policy accept;",
        "    iifname $management_ifaces jump management",
        "  }",
        "",
        "  chain management {",
        "    ct state established,related accept",
        "    ct state invalid drop",
        "    icmp type { echo-request, destination-unreachable, time-exceeded,"
        " parameter-problem } accept",
        "    icmpv6 type { destination-unreachable, packet-too-big, time-exceeded,"
        " parameter-problem, echo-request, nd-router-advert, nd-neighbor-solicit,"
        " nd-neighbor-advert, mld-listener-query } accept",
        '    udp sport 67 udp dport 68 accept comment "DHCP replies"',
        '    udp sport 547 udp dport 546 accept comment "DHCPv6 replies"',
        *allow,
        '    limit rate 10/minute burst 5 packets log prefix "gpu-cluster drop: " level info',
        "    drop",
        "  }",
        "}",
    ])
    single_quoted(text, "the firewall ruleset")  # a single-quoted shell value in the script
    return text


FIREWALL_UNIT = f"""\
[Unit]
Description=gpu-cluster host firewall (nftables table inet gpu_cluster)
Documentation=file:{FIREWALL_FILE}
DefaultDependencies=no
Wants=network-pre.target
Before=network-pre.target shutdown.target
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/nft -f {FIREWALL_FILE}
ExecReload=/usr/sbin/nft -f {FIREWALL_FILE}

[Install]
WantedBy=sysinit.target"""


def _hardening_env(cluster: Cluster, role: str, hostname: str, address: object,
                   stack_key: str) -> str:
    """What SSHD_STEPS and FIREWALL_STEPS read, as unindented (single-quoted) values."""
    env = f"SSHD_CONFIG={single_quoted(sshd_config(stack_key), 'the sshd drop-in')}\n"
    if not firewall_allowlist(cluster, role):
        return env
    ep = cluster.kubernetes.control_plane_endpoint
    extra = ep.interface if role == "control-plane" and ep.vip and ep.interface else ""
    # network.hostFirewall.enabled; "off" removes the stack's table, unit and file.
    state = "on" if cluster.network.host_firewall.enabled else "off"
    ssh_cidrs = (cluster.network.management_cidr, *cluster.network.host_firewall.admin_cidrs)
    return env + (f'HOST_FIREWALL="{state}"\n'
                  f'MANAGEMENT_IP="{address}"\n'
                  f'SSH_CIDRS="{" ".join(map(str, ssh_cidrs))}"\n'
                  f'FIREWALL_EXTRA_IFACES="{extra}"\n'
                  "# shellcheck disable=SC2016  # $names in it are nft's own variables\n"
                  f"FIREWALL_RULES='{firewall_ruleset(cluster, role, hostname, stack_key)}'\n"
                  f"FIREWALL_UNIT='{FIREWALL_UNIT}'\n")


def _lnet_env(cluster: Cluster, node: GpuNode) -> str:
    """The files the LNet step writes, as single-quoted multi-line values (not dedent()ed)."""
    files = {"LNET_CONF": lnet.lnet_conf(cluster, node),
             "LNET_NETPLAN": lnet.netplan(cluster, node),
             "LNET_SYSCTLS": lnet.sysctls(cluster, node)}
    return "".join(f"{name}={single_quoted(text, name)}\n" for name, text in files.items())


def _source_env(name: str, source: AptSource | None) -> str:
    """The header lines of one package source (empty values: none configured)."""
    return (f'{name}_URL="{source.url if source else ""}"\n'
            f'{name}_KEY_URL="{source.key_url if source else ""}"\n'
            f'{name}_KEY_FPR="{source.key_fingerprint if source else ""}"\n')


def prepare_gpu_node(cluster: Cluster, node: GpuNode, stack_key: str) -> str:
    """GPU nodes: the read-only checks, then the Kubernetes prerequisites, sshd, the firewall,
    the GPU steps and, with data drives, the scratch array."""
    gpu_op = cluster.platform.gpu_operator
    sf = cluster.fabric.storage_fabric
    drives = _data_drive_env(node)
    env = _common_env(cluster) + dedent(
        f"""\
        KERNEL_ARGS="{' '.join(node.template.kernel_args)}"
        MANAGEMENT_MAC="{node.management_mac or ''}"
        RAIL_HCAS="{' '.join(r.hca for r in node.rails)}"
        RAIL_NETDEVS="{' '.join(r.netdev for r in node.rails)}"
        GPU_DRIVER="{gpu_op.driver}"
        DATA_DRIVE_COUNT="{drives['count']}"
        DATA_DRIVE_SIZE="{drives['size']}"
        DATA_DRIVE_MIN_BYTES="{drives['min']}"
        DATA_DRIVE_MAX_BYTES="{drives['max']}"
        DATA_DRIVE_MODELS="{drives['models']}"
        SCRATCH_FS="{cluster.storage.scratch.filesystem}"
        SCRATCH_MOUNT="{cluster.storage.scratch.mount_point}"
        LNET_NET="{cluster.storage.lnet_network}"
        LNET_IFACES="{' '.join(netdev for _, netdev in lnet.lnet_interfaces(cluster, node))}"
        LUSTRE_CLIENT_VERSION="{cluster.storage.lustre_client.version}"
        """
    ) + _source_env("LUSTRE", cluster.storage.lustre_client.source) + _source_env(
        "DOCA", cluster.platform.network_operator.doca_source) + (
        f'STORAGE_HCAS="{" ".join(sf.hcas)}"\nSTORAGE_NETDEVS="{" ".join(sf.netdevs)}"\n'
        if sf else "") + (
        f"NOUVEAU_BLACKLIST='{reboot.NOUVEAU_BLACKLIST}'\n") + _lnet_env(cluster, node) + (
        _hardening_env(cluster, "gpu-worker", node.hostname, node.management_ip, stack_key))
    header = _header("Host preparation (GPU node)", node.hostname, node.management_ip,
                     stack_key)
    # Only the scratch array depends on NVMe drives; every GPU node gets the GPU steps. The
    # checks run first: they only read, and stop the script before any change.
    scratch = node.template.data_drives is not None
    steps = (APT_KEYS + BOARD_CHECK + (STORAGE_PORTS if sf else "") + DRIVER_OWNER
             + PACKAGE_SOURCES + (SCRATCH_SELECT if scratch else "") + KUBE_PREREQS
             + SSHD_STEPS + FIREWALL_STEPS + GPU_STEPS + (SCRATCH_STEPS if scratch else ""))
    return header + env + steps + COMPLETE


def dhcp_hosts(nodes: Iterable[GpuNode]) -> str:
    """dnsmasq's --dhcp-hostsfile (`<MAC>,<address>,<hostname>`): the management address each
    GPU node's board gets, for the DHCP/PXE server of the management network."""
    return "".join(f"{n.management_mac},{n.management_ip},{n.hostname}\n"
                   for n in nodes if n.management_mac)


def prepare_host(cluster: Cluster, host: Host, stack_key: str) -> str:
    """Control-plane and SM hosts: Kubernetes prerequisites or the subnet-manager packages;
    every host: the sshd drop-in, and the firewall where the stack knows what the host runs."""
    header = _header(f"Host preparation ({host.role})", host.hostname, host.management_ip,
                     stack_key)
    env = _hardening_env(cluster, host.role, host.hostname, host.management_ip, stack_key)
    if host.role == "control-plane":
        return (header + _common_env(cluster) + env + APT_KEYS + KUBE_PREREQS + SSHD_STEPS
                + FIREWALL_STEPS + COMPLETE)
    if host.role == "sm-host":
        return (header + env + CHANGE_TRACKING + SM_PACKAGES + SSHD_STEPS + FIREWALL_STEPS
                + COMPLETE)
    return header + env + CHANGE_TRACKING + SSHD_STEPS + COMPLETE
