"""Planned reboots of GPU nodes (pure text, no pulumi).

Host preparation stages what only a boot applies: kernel arguments, an initramfs without
nouveau, the OS's own interface names back after a rename; a host-owned GPU driver other than
the pinned release is installed by the reboot step itself, once the node is drained (a driver's
libraries replaced under running GPU pods would not match the loaded module). `pulumi up` then
takes every GPU node whose boot settings changed through four commands
(components/layers/bootstrap.py):

  drain (control plane)  take the cluster-wide reboot lock, cordon, drain: only when the node is
                         a cluster member and its preparation said a reboot is required
  reboot (node)          `shutdown -r +1`: /run/nologin refuses new logins until it goes down
  after-boot (node)      dialled until the host answers again; checks a new boot ID, the kernel
                         command line and every rail interface
  uncordon (control plane)  only if the drain cordoned it; releases the lock

The lock (a ConfigMap in kube-system, created atomically) lets one member at a time be out;
hosts that are not members yet (first bring-up) reboot without it, all at once. Each SU's nodes
queue for it in hostname order (`reboot_queue`): a node's drain starts once the one before it
has drained, so no more than one drain per SU waits for the lock. A waiting drain holds one of
the engine's parallel operations (`pulumi up --parallel`, eight on a two-CPU runner): a drain
per node waiting at once would fill them all on a day-2 change of nine nodes there, and the
lock holder's reboot step would never start. docs/hosts.md, "Planned reboots".
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from components.model.gpu_nodes import GpuNode
from components.planning.script_files import template

# What the nouveau blacklist file holds; a change needs a new initramfs and a boot.
NOUVEAU_BLACKLIST = "blacklist nouveau\noptions nouveau modeset=0"
# The line host preparation prints when the node must boot again; the drain acts on it.
REBOOT_REQUIRED = "gpu-cluster: reboot required:"
LOCK = "gpu-cluster-reboot-lock"  # ConfigMap in kube-system
LOCK_WAIT_S = 6 * 3600  # a member waits this long for the others' reboots
DRAIN_TIMEOUT = "30m"
# Dials of the after-boot check: 5 s apart at most (pulumi's retry backoff), 15 s each while the
# host is down, so at least 20 minutes and about an hour at most (a DGX H100 boots in 5-10).
BOOT_WAIT_DIALS = 240


def reboot_queue(su_of: Mapping[str, int]) -> dict[str, str]:
    """Each GPU node -> the node before it in its SU's queue for the reboot lock (hostname
    order); the first of each SU has none. One lane per SU keeps every dependency chain an
    SU's length, as the Kubernetes upgrade's lanes do."""
    lanes: dict[int, list[str]] = {}
    for host in sorted(su_of):
        lanes.setdefault(su_of[host], []).append(host)
    return {host: before for hosts in lanes.values()
            for before, host in zip(hosts, hosts[1:], strict=False)}


def engine_slots_problem(lanes: int, parallel: int | None) -> str | None:
    """Why `pulumi up` with the engine's `parallel` operations could hang on a planned reboot
    of every member: each of the `lanes` SU queues has one drain waiting for the lock, holding
    an operation, and the holder's next step needs one free. None when there is room (half
    the operations for the waiters) or no engine runs the program."""
    if not parallel or parallel >= 2 * lanes:
        return None
    return (f"pulumi's --parallel {parallel}: the GPU nodes' {lanes} SUs each queue one drain "
            "for the reboot lock, and each waiting drain holds one of the engine's parallel "
            f"operations, so a reboot of every node could leave none for the lock holder's "
            f"next step; run `pulumi up --parallel {2 * lanes}` (and preview) or more")


def boot_fingerprint(node: GpuNode, host_driver: str | None) -> str:
    """What the node's boot must apply (kernel arguments, the nouveau blacklist, the host's GPU
    driver): the reboot commands run again when it changes."""
    text = "\n".join(["kernel: " + " ".join(node.template.kernel_args), NOUVEAU_BLACKLIST,
                      *([f"gpu driver: {host_driver}"] if host_driver else [])])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _node_script(name: str, node: GpuNode, title: str, host_driver: str | None,
                 **values: str) -> str:
    return template(f"reboot/{name}.sh", title=title, node=node.hostname,
                    kernel_args=" ".join(node.template.kernel_args),
                    gpu_driver=host_driver or "", **values)


def check_script(node: GpuNode, host_driver: str | None) -> str:
    """On the node, after its preparation: prints the REBOOT_REQUIRED line when it must boot
    again (the drain acts on it), changes nothing. `host_driver`: the GPU driver release the
    host owns (platform.gpuOperator.driver: host), None when the GPU Operator owns it."""
    return _node_script("check", node, "Reboot check", host_driver,
                        reboot_required=REBOOT_REQUIRED)


def reboot_script(node: GpuNode, host_driver: str | None) -> str:
    """On the node, drained: install the pinned host GPU driver when another one is loaded,
    schedule the reboot a minute out (so this command returns cleanly) and record the boot it
    leaves; nothing when no reboot is required."""
    return _node_script("reboot", node, "Planned reboot", host_driver)


def after_boot_script(node: GpuNode, host_driver: str | None) -> str:
    """On the node, once it answers again: a new boot, the kernel arguments in effect, every
    rail's interface present, the pinned GPU driver loaded with its fabric manager running;
    then the staged state is settled."""
    return _node_script("after-boot", node, "Check after the planned reboot", host_driver,
                        netdevs=" ".join(r.netdev for r in node.rails))


def drain_script(node: str, gang_wait_s: int) -> str:
    """On the control plane, with the node's check verdict as its argument (`reboot` when it
    printed REBOOT_REQUIRED): a member takes the lock (one member rebooting at a time), waits
    up to `gang_wait_s` for gang jobs it shares with other nodes (evicting one rank restarts
    the job), and is drained; anything else is left alone."""
    return template("reboot/drain.sh", title="Drain before the planned reboot", node=node,
                    lock=LOCK, lock_wait_s=LOCK_WAIT_S, drain_timeout=DRAIN_TIMEOUT,
                    gang_wait_s=gang_wait_s)


def uncordon_script(node: str) -> str:
    """On the control plane after the check: uncordon unless the node was cordoned before the
    drain (someone else's maintenance), and release the lock."""
    return template("reboot/uncordon.sh", title="Uncordon after the planned reboot", node=node,
                    lock=LOCK)
