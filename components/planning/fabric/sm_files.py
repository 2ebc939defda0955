"""Subnet-manager files for opensm 3.3: opensm.conf, partitions.conf, GUID lists, name map.

One shared `opensm.conf` (what reviewers diff and the simulator runs) plus a per-host copy
under `sm/<host>/` that differs only in `sm_priority`, and a per-host `opensm.default` for
Debian's /etc/default/opensm (PORTS = the host's fabric port GUID; the opensm@<guid> unit
passes it as --guid). Per-host files keep the SSH apply a plain "write file, restart unit".
"""

from __future__ import annotations

from collections.abc import Iterable

from .model import FabricPlan, Partition, PlanError

_HEADER = "# Rendered by the gpu-cluster stack from the fabric plan; edits on the host are lost.\n"
IPOIB_MTU = 5  # IBTA MTU code: 5 = 4096 bytes, what ConnectX-7 ports and QM9700 switches run
# IBA vol. 1, 14.2.4: level 2 fails Sets without the M_Key and returns Gets with it zeroed.
M_KEY_PROTECTION = 2
# opensm.conf options whose values are secrets: only the SM host's installed file has them.
SECRET_OPTIONS = ("m_key", "sm_key", "sa_key")


def top_tier_guids(plan: FabricPlan) -> list[str]:
    """ftree roots: the spines of a two-tier tree, the cores of a three-tier one."""
    top = max(s.tier for s in plan.switches)
    return [s.guid for s in plan.switches if s.tier == top]


def compute_port_guids(plan: FabricPlan) -> list[str]:
    return [r.port_guid for n in plan.nodes for r in n.rails]


def io_port_guids(plan: FabricPlan) -> list[str]:
    """ftree's I/O nodes: the subnet managers' and the storage servers' ports, off the rails."""
    return [s.port_guid for s in plan.sm] + [s.port_guid for s in plan.storage]


def storage_port_guids(plan: FabricPlan) -> list[str]:
    return [s.port_guid for s in plan.storage]


def guid_list(guids: Iterable[str]) -> str:
    """opensm GUID files take one GUID per line and nothing else."""
    return "".join(f"{g}\n" for g in guids)


def render_opensm_conf(plan: FabricPlan, priority: int = 0, etc_dir: str | None = None,
                       log_file: str | None = None) -> str:
    spec = plan.spec
    d = (etc_dir or spec.sm_conf_dir).rstrip("/")
    log = log_file or spec.sm_log_file
    lines = [
        _HEADER.rstrip(),
        f"# Fabric: {len(plan.nodes)} GPU nodes, {plan.hca_ports} compute HCA ports, "
        f"{len(plan.switches)} switches, {plan.tiers}-tier fat tree.",
        "",
        "# Master = highest priority (0..15); standbys poll it and take over.",
        f"sm_priority {priority}",
        "",
        "# Fat-tree routing ranked from the planned roots; compute nodes are the rails, so",
        "# subnet-manager and storage-server HCAs (off the rails) are I/O nodes allowed one",
        "# reverse hop, which keeps them reachable. If a failure breaks the fat-tree shape opensm",
        "# falls back to updn (still credit-loop free), never to plain minhop.",
        "routing_engine ftree,updn",
        f"root_guid_file {d}/root_guids.conf",
        f"cn_guid_file {d}/cn_guids.conf",
    ]
    if io_port_guids(plan):  # an empty io_guid_file is ERR AB29 and a silent fallback off ftree
        lines += [f"io_guid_file {d}/io_guids.conf", "max_reverse_hops 1"]
    lines += [
        "# ftree does not support LMC > 0",
        "lmc 0",
        "",
        f"partition_config_file {d}/partitions.conf",
        "no_partition_enforcement FALSE",
        "part_enforce both",
        "allow_both_pkeys FALSE",
        "",
        f"node_name_map_name {d}/node-name-map",
        "",
        "# Management keys. M_Key at protection level 2: a port refuses every Set of its",
        "# configuration (P_Keys, LIDs, state) without the key and hides the key from Gets, so a",
        "# pod holding the HCA's umad device cannot rewrite the fabric. SM_Key: the subnet",
        "# managers only elect and hand over among SMs holding it. SA_Key: what trusted SA",
        "# queries carry. The key values are Pulumi secrets that `pulumi up` appends to the",
        "# installed file (0600); a rendering never holds them. The lease never expires: the",
        "# standby holds the same key, and a port forgets it only on an HCA reset.",
        f"m_key_protection_level {M_KEY_PROTECTION}",
        "m_key_lease_period 0",
        "",
        "# Heavy sweep period (s); light sweeps and traps still react at once.",
        f"sweep_interval {spec.sm_sweep_interval}",
        "sminfo_polling_timeout 10000",
        "polling_retry_number 4",
        "",
        "# Errors and info; the log is rotated by logrotate, capped at 1 GB here.",
        "log_flags 0x03",
        f"log_file {log}",
        "log_max_size 1024",
        "accum_log_file TRUE",
        "force_log_flush FALSE",
        "",
    ]
    return "\n".join(lines)


def _guid_lines(items: list[str], indent: str = "    ", per_line: int = 4) -> list[str]:
    rows = [items[i:i + per_line] for i in range(0, len(items), per_line)]
    return [indent + ", ".join(r) + ("," if i < len(rows) - 1 else "")
            for i, r in enumerate(rows)]


def render_partitions(plan: FabricPlan, partitions: Iterable[Partition] | None = None
                      ) -> tuple[str, list[str]]:
    """partitions.conf text and warnings. Membership lists end with `;` on the last GUID line
    (a line holding only `;` is a parse error in opensm 3.3.23 and drops every pkey)."""
    parts = tuple(plan.spec.partitions if partitions is None else partitions)
    warnings: list[str] = []
    seen: dict[int, str] = {}
    for p in parts:
        if not 0x0001 <= p.pkey <= 0x7FFE:
            raise PlanError(f"fabric.partitions.{p.name}.pkey", f"{p.pkey:#06x}",
                            "is outside 0x0001-0x7ffe (0x7fff is the Default partition)",
                            "pick a pkey within 0x0001-0x7ffe")
        if p.pkey in seen:
            raise PlanError(f"fabric.partitions.{p.name}.pkey", f"{p.pkey:#06x}",
                            f"already used by {seen[p.pkey]}", "give each partition its own pkey")
        if not p.name or any(ch in p.name for ch in "=,:;# \t"):
            raise PlanError("fabric.partitions[].name", p.name, "is not a partition name",
                            "use letters, digits, - _ .")
        seen[p.pkey] = p.name
    data_path = [p.name for p in parts if p.data_path]
    # On a storage fabric the data path is the clients' way to the servers (IPoIB, LNet), so
    # clients may be limited there; on the compute rails NCCL needs every port full.
    limited_ok = plan.spec.purpose == "storage"
    if len(data_path) != 1 or any(p.data_path and ((p.members == "storage" and not limited_ok)
                                                   or p.hosts) for p in parts):
        raise PlanError("fabric.partitions[].dataPath", data_path or "none",
                        "the data path needs exactly one partition where every compute port is "
                        "a full member (NCCL, IPoIB and LNet use P_Key index 0; on the Default "
                        "partition compute ports are limited and cannot reach each other)",
                        "mark one partition with members: compute (or all) dataPath: true")
    hosts = {n.hostname for n in plan.nodes}
    out = [
        _HEADER.rstrip(),
        "# Default: every port limited (no port-to-port traffic), subnet managers full.",
    ]
    sm_full = [f"{s.port_guid}=full" for s in plan.sm]
    default = ["ALL=limited", "SELF=full"] + sm_full
    out += [f"Default=0x7fff, ipoib, mtu={IPOIB_MTU} :"] + _with_semicolon(
        _guid_lines(default)) + [""]
    for p in parts:
        # indx0: the P_Key NCCL, an IPoIB parent interface and LNet use (table index 0).
        # mtu=5: the IPoIB broadcast group at 4096 bytes (default 4 = 2048).
        flags = (", indx0" if p.data_path else "") + (f", ipoib, mtu={IPOIB_MTU}"
                                                       if p.ipoib else "")
        use = " (data path: P_Key index 0)" if p.data_path else ""
        unknown = sorted(set(p.hosts) - hosts)
        if unknown:
            warnings.append(f"fabric.partitions.{p.name}.hosts: {', '.join(unknown)} not in "
                            "the fabric")
        nodes = [n for n in plan.nodes if not p.hosts or n.hostname in p.hosts]
        compute = [r.port_guid for n in nodes for r in n.rails]
        servers = [f"{g.lower()}=full" for g in dict.fromkeys(
            [*p.port_guids, *storage_port_guids(plan)])]
        if p.members == "all":
            out += [f"# {p.name}: every end port full{use}", f"{p.name}=0x{p.pkey:04x}{flags} :",
                    "    ALL=full ;", ""]
            continue
        if p.members == "compute":
            members = compute + servers
            head = f"{p.name}=0x{p.pkey:04x}{flags}, defmember=full :"
            note = (f"# {p.name}: {len(compute)} compute HCA ports"
                    + (f" and {len(servers)} server ports" if servers else "")
                    + f", full members{use}")
        else:
            members = compute + servers
            head = f"{p.name}=0x{p.pkey:04x}{flags}, defmember=limited :"
            note = (f"# {p.name}: {len(compute)} compute HCA ports limited (clients), "
                    f"{len(servers)} storage server ports full{use}")
        if not members:
            warnings.append(f"fabric.partitions.{p.name}: no member ports; not rendered")
            out += [f"# {p.name}=0x{p.pkey:04x}: no member ports yet", ""]
            continue
        out += [note, head] + _with_semicolon(_guid_lines(members)) + [""]
    return "\n".join(out), warnings


def _with_semicolon(lines: list[str]) -> list[str]:
    return lines[:-1] + [lines[-1] + " ;"]


def render_node_name_map(plan: FabricPlan) -> str:
    """GUID -> name for ibnetdiscover/ibtracert/opensm logs. ConnectX-7 node GUID equals its
    port GUID, so HCAs are keyed by port GUID."""
    lines = [_HEADER.rstrip(), "# switches"]
    lines += [f'{s.guid} "{s.name}"' for s in plan.switches]
    lines.append("# compute HCAs: hostname/rail/device")
    lines += [f'{r.port_guid} "{n.hostname}/rail{r.rail}/{r.hca}"'
              for n in plan.nodes for r in n.rails]
    if plan.sm:
        lines.append("# subnet-manager hosts")
        lines += [f'{s.port_guid} "{s.hostname}/sm/{s.hca}"' for s in plan.sm]
    return "\n".join(lines) + "\n"


def render_default_file(guid: str, placeholder: bool) -> str:
    if placeholder:
        return (_HEADER + "# The fabric port GUID is still a placeholder: start on every port\n"
                "# until the inventory has the real one (ibstat -p).\nPORTS=ALL\n")
    return _HEADER + f'PORTS="{guid}"\n'
