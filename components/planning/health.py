"""Node health detection on the GPU nodes (pure): node-problem-detector's monitor configs, the
checks its custom plugin monitors run (scripts/health/) and each node's rails as the fabric plan
has them, so a problem names the switch port and cable (docs/health.md has the table of what
is detected, from which source, and its condition and reason).

A custom plugin monitor keeps one rule per condition: node-problem-detector sets a condition
from each rule's result in turn, so a second rule that passes would clear what the first found
(pkg/custompluginmonitor/custom_plugin_monitor.go, generateStatus). A check that looks at eight
rails therefore looks at all eight and names every one that fails.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from components.model.cluster import Cluster
from components.planning import placement
from components.planning.fabric.bom import cable_parts
from components.planning.fabric.model import FabricPlan
from components.planning.script_files import body

# The checks, as node-problem-detector runs them (scripts/health/<name>.sh).
PLUGINS = ("ib-rails", "nvlink", "fabric-manager", "dcgm-health", "md-raid")
# How long one check may run (seconds), and the longest message a condition keeps: eight rails'
# worth of switch ports and cables (node-problem-detector's own limit is 4 KiB of output).
PLUGIN_TIMEOUT_S = 10
MAX_MESSAGE = 1024


@dataclass(frozen=True, slots=True)
class Layout:
    """Where node-problem-detector finds the checks and the rails files (its container's
    mounts on a node, the checks executable; a scratch directory in the tests)."""

    plugins: str = "/config/health/plugins"
    rails: str = "/config/health/rails"


@dataclass(frozen=True, slots=True)
class Kmsg:
    """The kernel's log as node-problem-detector reads it on a node: /dev/kmsg, the last five
    minutes on start (its config/kernel-monitor.json)."""


@dataclass(frozen=True, slots=True)
class LogFile:
    """A file of `<RFC 3339 time> <kernel message>` lines: the same rules over a log a test
    writes (node-problem-detector's filelog watcher)."""

    path: str


# ---------------------------------------------------------------- the kernel log


@dataclass(frozen=True, slots=True)
class KernelRule:
    """One kernel message: a condition it sets (None: an event only) and its reason."""

    condition: str | None
    reason: str
    pattern: str
    source: str  # where the classification comes from


def _xid(number: int) -> str:
    # NVRM's Xid line: "NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus."
    return rf"NVRM: Xid \(PCI:[0-9a-fA-F:.]+\): {number},.*"


_CATALOG = "NVIDIA Xid catalog, Xid {}: {} ({})"
# The Xids a training node is taken out of service for, and the ones worth an event, by NVIDIA's
# Xid catalog (docs.nvidia.com/deploy/xid-errors: mnemonic and immediate action).
KERNEL_RULES = (
    KernelRule("GPUFallenOffBus", "GPUFellOffBus", _xid(79),
               _CATALOG.format(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM")),
    KernelRule("GPUFallenOffBus", "GPUFellOffBus",
               r"NVRM: GPU [0-9a-fA-F:.]+: GPU has fallen off the bus\..*",
               "NVRM's own line for the same loss, logged with or without the Xid"),
    KernelRule("GPUNeedsReset", "DoubleBitECCError", _xid(48),
               _CATALOG.format(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48")),
    KernelRule("GPUNeedsReset", "RowRemapFailure", _xid(64),
               _CATALOG.format(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU")),
    KernelRule("GPUNeedsReset", "UncontainedECCError", _xid(95),
               _CATALOG.format(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU")),
    KernelRule("GPUNeedsReset", "GSPRPCTimeout", _xid(119),
               _CATALOG.format(119, "GSP_RPC_TIMEOUT", "RESET_GPU")),
    KernelRule("GPUNeedsReset", "GSPError", _xid(120),
               _CATALOG.format(120, "GSP_ERROR", "RESET_GPU")),
    KernelRule(None, "RowRemapPending", _xid(63),
               _CATALOG.format(63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE") +
               "; the remap takes effect at the next GPU reset"),
    KernelRule(None, "ContainedECCError", _xid(94),
               _CATALOG.format(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP")),
    KernelRule(None, "NVLinkError", _xid(74),
               _CATALOG.format(74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR")),
    KernelRule(None, "TaskHung", r"task \S+:\w+ blocked for more than \w+ seconds\.",
               "node-problem-detector's config/kernel-monitor.json"),
)
KERNEL_CONDITIONS = {
    "GPUFallenOffBus": ("GPUsOnBus", "no GPU has fallen off the bus"),
    "GPUNeedsReset": ("NoGPUNeedsReset", "no GPU needs a reset"),
}
KERNEL_SOURCE = "gpu-kernel-monitor"


def _log_source(source: Kmsg | LogFile) -> dict[str, Any]:
    if isinstance(source, Kmsg):
        return {"plugin": "kmsg", "logPath": "/dev/kmsg", "lookback": "5m"}
    return {"plugin": "filelog", "logPath": source.path, "lookback": "5m",
            "pluginConfig": {"timestamp": r"^(\S+)", "message": r"^\S+ (.*)$",
                             "timestampFormat": "2006-01-02T15:04:05.999999999Z07:00"}}


def kernel_monitor(source: Kmsg | LogFile = Kmsg()) -> dict[str, Any]:
    """The system log monitor of the GPU kernel messages (`--config.system-log-monitor`)."""
    return {
        **_log_source(source),
        "bufferSize": 10,
        "source": KERNEL_SOURCE,
        "metricsReporting": True,
        "conditions": [{"type": t, "reason": r, "message": m}
                       for t, (r, m) in KERNEL_CONDITIONS.items()],
        "rules": [{"type": "temporary" if r.condition is None else "permanent",
                   **({"condition": r.condition} if r.condition else {}),
                   "reason": r.reason, "pattern": r.pattern} for r in KERNEL_RULES],
    }


# ---------------------------------------------------------------- the checks


@dataclass(frozen=True, slots=True)
class Check:
    """One condition and the check that sets it: True while the check finds a problem."""

    condition: str
    healthy_reason: str
    healthy_message: str
    reason: str
    plugin: str
    args: tuple[str, ...] = ()


def checks(cluster: Cluster, layout: Layout = Layout()) -> dict[str, tuple[Check, ...]]:
    """Each custom plugin monitor (by its source name) and its checks, with the cluster's
    thresholds and plan as their arguments."""
    h = cluster.health
    gbps = str(cluster.gpu_nodes.template.link_gbps)
    drives = cluster.gpu_nodes.template.data_drives
    return {
        "infiniband-rail-monitor": (
            Check("InfinibandRailDown", "RailsUp", "every rail is ACTIVE and LinkUp",
                  "RailPortDown", "ib-rails", ("state", layout.rails)),
            Check("InfinibandRailDegraded", "RailsAtPlannedRate",
                  f"every rail runs at {gbps} Gb/sec", "RailBelowPlannedRate", "ib-rails",
                  ("rate", layout.rails, gbps)),
            Check("InfinibandRailErrors", "RailCountersWithinLimits",
                  "no rail's error counters rose past their limits", "RailErrorCountersRising",
                  "ib-rails", ("errors", layout.rails, gbps,
                               f"{h.infiniband.symbol_error_ber:g}",
                               str(h.infiniband.link_downed_per_check))),
        ),
        "nvidia-fabric-monitor": (
            Check("NVLinkDown", "NVLinksUp", "every GPU has all its NVLinks active",
                  "NVLinkInactive", "nvlink", (str(h.nvlink.links_per_gpu),)),
            Check("NVSwitchFabricNotReady", "FabricReady",
                  "nvidia-fabricmanager is active and every GPU is registered",
                  "FabricManagerNotReady", "fabric-manager"),
        ),
        "dcgm-health-monitor": (
            Check("GPUHealthFailure", "DCGMHealthy", "DCGM's health watches report no failure",
                  "DCGMHealthFailure", "dcgm-health", (h.dcgm_host_engine,)),
        ),
        "local-raid-monitor": (
            Check("RAIDDegraded", "RAIDArraysWhole", "every md array is whole",
                  "MDArrayDegraded", "md-raid", (str(drives.count if drives else 0),)),
        ),
    }


def custom_monitor(source: str, monitor_checks: tuple[Check, ...], layout: Layout,
                   interval_s: int) -> dict[str, Any]:
    """One custom plugin monitor (`--config.custom-plugin-monitor`)."""
    return {
        "plugin": "custom",
        "pluginConfig": {"invoke_interval": f"{interval_s}s", "timeout": f"{PLUGIN_TIMEOUT_S}s",
                         "max_output_length": MAX_MESSAGE, "concurrency": 3},
        "source": source,
        "metricsReporting": True,
        "conditions": [{"type": c.condition, "reason": c.healthy_reason,
                        "message": c.healthy_message} for c in monitor_checks],
        "rules": [{"type": "permanent", "condition": c.condition, "reason": c.reason,
                   "path": f"{layout.plugins}/{c.plugin}.sh", "args": list(c.args),
                   "timeout": f"{PLUGIN_TIMEOUT_S}s"} for c in monitor_checks],
    }


def plugins() -> dict[str, str]:
    """Each check's bash, as it runs (scripts/health/<name>.sh with its shared part)."""
    return {name: body(f"health/{name}.sh") for name in PLUGINS}


# ---------------------------------------------------------------- the rails as planned


def rails_files(cluster: Cluster) -> dict[str, str]:
    """hostname -> the node's rails as planned (ib-rails.sh reads RAILS_DIR/<hostname>)."""
    return _rails_files(placement.plan(cluster))


def _rails_files(plan: FabricPlan) -> dict[str, str]:
    lines: dict[str, list[str]] = {n.hostname: [] for n in plan.nodes}
    for cable, parts in zip(plan.cables, cable_parts(plan.cables), strict=True):
        b = cable.b
        if cable.kind != "hca" or b.rail is None or b.device not in lines:
            continue
        lines[b.device].append("\t".join((str(b.rail), b.hca or "", cable.a.device,
                                          str(cable.a.port), cable.id,
                                          parts.b_cage.label(parts.b_pos))))
    return {host: "".join(f"{line}\n" for line in sorted(rows, key=lambda r: int(r.split()[0])))
            for host, rows in lines.items()}


# ---------------------------------------------------------------- everything, as files


def files(cluster: Cluster, layout: Layout = Layout(), source: Kmsg | LogFile = Kmsg(),
          interval_s: int | None = None) -> dict[str, str]:
    """Path -> text: monitors/<source>.json, plugins/<check>.sh and rails/<hostname>, what
    node-problem-detector on a GPU node is given (`interval_s` overrides how often the checks
    run: the tests run them every second)."""
    every = interval_s or cluster.health.check_interval_seconds
    out = {f"monitors/{KERNEL_SOURCE}.json": _json(kernel_monitor(source))}
    for name, monitor_checks in checks(cluster, layout).items():
        out[f"monitors/{name}.json"] = _json(custom_monitor(name, monitor_checks, layout, every))
    out |= {f"plugins/{name}.sh": text for name, text in plugins().items()}
    out |= {f"rails/{host}": text for host, text in rails_files(cluster).items()}
    return out


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, indent=2) + "\n"
