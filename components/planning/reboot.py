"""Planned reboots of GPU nodes (pure text, no pulumi).

Host preparation stages what only a boot applies: kernel arguments, an initramfs without
nouveau, the OS's own interface names back after a rename. `pulumi up` then takes every GPU node
whose boot settings changed through four commands (components/bootstrap.py):

  drain (control plane)  take the cluster-wide reboot lock, cordon, drain: only when the node is
                         a cluster member and its preparation said a reboot is required
  reboot (node)          `shutdown -r +1`: /run/nologin refuses new logins until it goes down
  after-boot (node)      dialled until the host answers again; checks a new boot ID, the kernel
                         command line and every rail interface
  uncordon (control plane)  only if the drain cordoned it; releases the lock

The lock (a ConfigMap in kube-system, created atomically) lets one member at a time be out, in
whatever order `pulumi up` reaches them; hosts that are not members yet (first bring-up) reboot
without it, all at once. docs/hosts.md, "Planned reboots".
"""

from __future__ import annotations

import hashlib
from textwrap import dedent

from components.config import GpuNode

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


def boot_fingerprint(node: GpuNode) -> str:
    """What the node's boot must apply (kernel arguments, the nouveau blacklist): the reboot
    commands run again when it changes."""
    text = "\n".join(["kernel: " + " ".join(node.template.kernel_args), NOUVEAU_BLACKLIST])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# Sets reboot_why to what only a boot applies: a kernel argument missing from this boot, or a
# change host preparation staged (it marks reboot.pending).
_REBOOT_WHY = r"""
reboot_why=""
for arg in $KERNEL_ARGS; do
  case " $(cat /proc/cmdline) " in
    *" $arg "*) ;;
    *) reboot_why="$reboot_why kernel-argument:$arg" ;;
  esac
done
if [ -e "$STATE/reboot.pending" ]; then reboot_why="$reboot_why staged-boot-changes"; fi
"""

_NODE_HEADER = """\
#!/usr/bin/env bash
# {title} of {node} — rendered by gpu-cluster; do not edit.
set -euo pipefail
log() {{ printf '[%s] %s\\n' "{node}" "$*"; }}
STATE=/var/lib/gpu-cluster
KERNEL_ARGS="{kernel_args}"
"""


def _node_script(title: str, node: GpuNode, body: str) -> str:
    return _NODE_HEADER.format(title=title, node=node.hostname,
                               kernel_args=" ".join(node.template.kernel_args)) + body


def check_script(node: GpuNode) -> str:
    """On the node, after its preparation: prints the REBOOT_REQUIRED line when it must boot
    again (the drain acts on it), changes nothing."""
    return _node_script("Reboot check", node, _REBOOT_WHY + dedent(
        f"""
        if [ -n "$reboot_why" ]; then
          echo "{REBOOT_REQUIRED}$reboot_why"
        else
          log "no reboot required"
        fi
        """))


def reboot_script(node: GpuNode) -> str:
    """On the node: schedule the reboot a minute out (so this command returns cleanly) and
    record the boot it leaves; nothing when no reboot is required."""
    return _node_script("Planned reboot", node, _REBOOT_WHY + dedent(
        r"""
        if [ -z "$reboot_why" ]; then
          log "no reboot required"
          exit 0
        fi
        mkdir -p "$STATE"
        cat /proc/sys/kernel/random/boot_id > "$STATE/reboot.boot-id"
        # `shutdown -r +1` writes /run/nologin now: new (non-root) logins are refused until the
        # host is down, so the check after the boot cannot run on this boot.
        shutdown -r +1 "gpu-cluster: planned reboot:$reboot_why"
        log "rebooting in one minute:$reboot_why"
        """))


def after_boot_script(node: GpuNode) -> str:
    """On the node, once it answers again: a new boot, the kernel arguments in effect, every
    rail's interface present; then the staged state is settled."""
    netdevs = " ".join(r.netdev for r in node.rails)
    return _node_script("Check after the planned reboot", node, f'RAIL_NETDEVS="{netdevs}"\n'
                        + dedent(r"""
        if [ -e "$STATE/reboot.boot-id" ]; then
          if [ "$(cat /proc/sys/kernel/random/boot_id)" = "$(cat "$STATE/reboot.boot-id")" ]; then
            echo "the planned reboot has not happened (same boot ID; was it cancelled with" \
              "shutdown -c?)" >&2
            echo "  fix: reboot the node (drained) and run pulumi up again" >&2
            exit 1
          fi
          # The boot applied what was staged: netplan, sysctls and lnet.service's import too.
          rm -f "$STATE/reboot.boot-id" "$STATE/reboot.pending" "$STATE/rename.pending" \
            "$STATE/lnet-addresses.pending" "$STATE/lnet-sysctl.pending" "$STATE/lnet.pending"
          log "booted again"
        fi
        problems=""
        for arg in $KERNEL_ARGS; do
          case " $(cat /proc/cmdline) " in
            *" $arg "*) ;;
            *) problems="$problems; kernel argument $arg is not in /proc/cmdline" ;;
          esac
        done
        for dev in $RAIL_NETDEVS; do
          [ -e "/sys/class/net/$dev" ] || problems="$problems; no rail interface $dev"
        done
        if [ -n "$problems" ]; then
          echo "after the reboot:${problems#;}" >&2
          echo "  fix: compare /etc/default/grub.d/90-gpu-cluster.cfg with /proc/cmdline and" \
            "\`ibdev2netdev\` with gpuNodes netdevs, then run pulumi up again" >&2
          exit 1
        fi
        log "kernel arguments and rail interfaces as configured"
        """))


_CP_HEADER = """\
#!/usr/bin/env bash
# {title} of {node} — rendered by gpu-cluster; do not edit.
set -euo pipefail
export KUBECONFIG=/etc/kubernetes/admin.conf
NODE={node}
LOCK={lock}
"""


def drain_script(node: str) -> str:
    """On the control plane, with the node's check verdict as its argument (`reboot` when it
    printed REBOOT_REQUIRED): a member takes the lock (one member rebooting at a time) and is
    drained; anything else is left alone."""
    return _CP_HEADER.format(title="Drain before the planned reboot", node=node,
                             lock=LOCK) + dedent(
        rf"""
        if [ "${{1-}}" != reboot ]; then
          echo "$NODE: no reboot required; no drain"
          exit 0
        fi
        if [ ! -f "$KUBECONFIG" ]; then
          echo "$NODE: no control plane yet; it reboots without a drain"
          exit 0
        fi
        # Only NotFound means "not a member": an unreachable API server fails the script
        # (set -e acts on the assignment, not on a test of the output).
        member="$(kubectl get node "$NODE" --ignore-not-found -o name)"
        if [ -z "$member" ]; then
          echo "$NODE is not a cluster member yet; it reboots without a drain"
          exit 0
        fi
        holder() {{
          kubectl -n kube-system get configmap "$LOCK" --ignore-not-found \
            -o 'jsonpath={{.data.holder}}'
        }}
        cordoned="$(kubectl get node "$NODE" -o 'jsonpath={{.spec.unschedulable}}')"
        waited=0
        until [ "$(holder)" = "$NODE" ] || kubectl -n kube-system create configmap "$LOCK" \
            --from-literal=holder="$NODE" --from-literal=cordoned="${{cordoned:-false}}" \
            >/dev/null 2>&1; do
          if [ "$waited" -ge {LOCK_WAIT_S} ]; then
            echo "$NODE: the reboot lock is still held by $(holder) after {LOCK_WAIT_S} s" >&2
            echo "  fix: finish that node's reboot (pulumi up), or if it is gone:" \
              "kubectl -n kube-system delete configmap $LOCK" >&2
            exit 1
          fi
          echo "$NODE: waiting for $(holder)'s reboot (one member at a time)"
          sleep 30; waited=$((waited + 30))
        done
        kubectl drain "$NODE" --ignore-daemonsets --delete-emptydir-data --timeout={DRAIN_TIMEOUT}
        """)


def uncordon_script(node: str) -> str:
    """On the control plane after the check: uncordon unless the node was cordoned before the
    drain (someone else's maintenance), and release the lock."""
    return _CP_HEADER.format(title="Uncordon after the planned reboot", node=node,
                             lock=LOCK) + dedent(
        r"""
        if [ ! -f "$KUBECONFIG" ]; then exit 0; fi
        get() {
          kubectl -n kube-system get configmap "$LOCK" --ignore-not-found -o "jsonpath={.data.$1}"
        }
        if [ "$(get holder)" != "$NODE" ]; then
          echo "$NODE was not drained for a reboot; nothing to uncordon"
          exit 0
        fi
        if [ "$(get cordoned)" = true ]; then
          echo "$NODE was cordoned before its reboot; it stays cordoned"
        else
          kubectl uncordon "$NODE"
        fi
        kubectl -n kube-system delete configmap "$LOCK"
        """)
