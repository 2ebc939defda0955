"""The ordered physical work a diff implies: what a technician does, in which order, and the
checks afterwards. Read from the diff alone, so it works for any two renderings.

Its inputs are conventions of the stack's resources: `<host>-member` (cluster membership, its
delete drains), `<host>-kubeadm-join` (its delete resets), `<switch>-config` (a switch's port
map, one `interface ib 1/<port> description "<peer> [<media> <length>]"` line per cable),
`<host>-opensm` (subnet-manager files), `<host>-reboot` (a GPU node's planned reboot, re-created
when its boot settings change), `kubelet-config` (the KubeletConfiguration joining nodes
read), `<host>-kubeadm-init` (settings applied once), Helm releases named after their chart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from .acceptance import UNTESTED, gate_urn, gpu_nodes, mark_untested, recabled_check
from .addresses import address_steps
from .conventions import ports as _ports
from .conventions import span as _span
from .conventions import suffix as _suffix
from .diff import Change, Diff
from .operators import host_driver_change, operator_rollouts
from .replacements import (
    board_steps,
    hca_steps,
    management_macs,
    replaced_boards,
    replaced_hcas,
    replaced_switches,
    sm_roles,
    switch_swap_steps,
)
from .rotations import Rotation, rotation_steps, secret_rotations

# Operators whose upgrade touches drivers on every GPU node, in the safe order: the network
# stack (DOCA/OFED) first, the GPU driver (which builds GPUDirect on it) second.
OPERATOR_ORDER = ("network-operator", "gpu-operator")


@dataclass(frozen=True)
class CableMove:
    switch: str
    port: int
    old: str | None  # what the port was cabled to, None if it was free
    new: str | None  # what it must be cabled to, None if it must be free
    old_cable: str | None
    new_cable: str | None


def _switch(ch: Change) -> str | None:
    """The switch whose port map this change is, if it is one (`<switch>-config` of the fabric
    layer; other layers have `-config` commands too, e.g. the kubelet's)."""
    if ch.layer != "fabric" or ch.type != "command:remote:Command":
        return None
    return _suffix(ch.name, "-config")


def cable_moves(changes: Iterable[Change],
                new_inputs: Mapping[str, Mapping[str, Any]] | None = None) -> list[CableMove]:
    """Port changes of every switch; a new switch's whole port map comes from `new_inputs`
    (urn -> inputs of the new rendering)."""
    moves: list[CableMove] = []
    for ch in changes:
        switch = _switch(ch)
        if switch is None:
            continue
        if ch.action == "delete":  # a retired switch: every cable on it is pulled
            moves += _whole_map(switch, "-", str(ch.old_inputs.get("stdin", "")))
            continue
        if ch.action == "create" and new_inputs and ch.urn in new_inputs:
            moves += _whole_map(switch, "+", str(new_inputs[ch.urn].get("stdin", "")))
            continue
        ports: dict[int, dict[str, tuple[str, str | None]]] = {}
        for line in ch.text_diffs.get("stdin", []):
            parsed = _ports().parse_port_line(line[1:]) if line[:1] in ("+", "-") else None
            if parsed:
                ports.setdefault(parsed[0], {})[line[0]] = _ports().split_cable(parsed[1])
        moves += [_move(switch, port, sides.get("-"), sides.get("+"))
                  for port, sides in sorted(ports.items())]
    return _once_per_cable(moves)


def _move(switch: str, port: int, old: tuple[str, str | None] | None,
          new: tuple[str, str | None] | None) -> CableMove:
    return CableMove(switch, port, old and old[0], new and new[0], old and old[1],
                     new and new[1])


@lru_cache(maxsize=4096)
def _whole_map(switch: str, side: str, text: str) -> tuple[CableMove, ...]:
    """Every cable of a switch's port map, all plugged (`+`) or all pulled (`-`); a new
    fabric's maps are read several times per preview (the runbook, the impact)."""
    ports = sorted(dict(parsed for line in text.splitlines()
                        if (parsed := _ports().parse_port_line(line))).items())
    return tuple(_move(switch, port, None if side == "+" else cable,
                       cable if side == "+" else None)
                 for port, cable in ((p, _ports().split_cable(d)) for p, d in ports))


def _once_per_cable(moves: list[CableMove]) -> list[CableMove]:
    """A switch-to-switch cable shows on both switches' port maps: keep it once."""
    seen: set[frozenset[tuple[str, int]]] = set()
    out = []
    for mv in moves:
        peer = _ports().switch_peer(mv.new or mv.old or "")
        if peer:
            key = frozenset({(mv.switch, mv.port), peer})
            if key in seen:
                continue
            seen.add(key)
        out.append(mv)
    return out


def _hosts(changes: Iterable[Change], suffix: str, action: str) -> list[str]:
    return sorted(h for c in changes if c.action == action
                  if (h := _suffix(c.name, suffix)) is not None)


def _rehosted(changes: Iterable[Change]) -> list[tuple[str, str, str]]:
    """(resource, old host, new host) for every command whose connection moved to another
    address: an update in pulumi-command, not a replace."""
    out = []
    for c in changes:
        lines = c.text_diffs.get("connection", []) if c.action == "update" else []
        old = next((ln[len("-host: "):] for ln in lines if ln.startswith("-host: ")), None)
        new = next((ln[len("+host: "):] for ln in lines if ln.startswith("+host: ")), None)
        if old and new and old != new:
            out.append((c.name, old, new))
    return sorted(out)


# Kubelet settings whose change needs the kubelet's checkpoint removed before it restarts.
_CHECKPOINTED = {"cpuManagerPolicy": "cpu_manager_state", "memoryManagerPolicy":
                 "memory_manager_state"}


def _kubelet_roll(change: Change, joining: list[str],
                  new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """A changed KubeletConfiguration: uploaded by `pulumi up`, rolled by hand node by node."""
    # Control-plane hosts run a kubelet with the same settings: every host that inits or joins.
    resources = [urn.rpartition("::")[2] for urn in new_inputs or {}]
    members = sorted({h for name in resources for suffix in ("-kubeadm-init", "-kubeadm-join")
                      if (h := _suffix(name, suffix)) is not None})
    existing = [h for h in members if h not in joining]
    changed = " ".join(change.text_diffs.get("stdin", []))
    states = [f"/var/lib/kubelet/{f}" for key, f in _CHECKPOINTED.items() if f"{key}:" in changed]
    if not existing:
        which = "every node already in the cluster"
    else:
        listed = ", ".join(existing) if len(existing) <= 12 else _span(existing)
        plural = "s" if len(existing) > 1 else ""
        which = f"the {len(existing)} node{plural} already in the cluster ({listed})"
    # The kubelet refuses to start on a checkpoint written under the other policy.
    restart = (f"systemctl stop kubelet && rm -f {' '.join(states)} && systemctl start kubelet"
               if states else "systemctl restart kubelet")
    return [
        "kubelet configuration changes: `pulumi up` uploads it to the kubelet-config ConfigMap "
        "before any join, so nodes joining from now on get it",
        f"roll it to {which}, one node at a time: kubectl drain <node> --ignore-daemonsets "
        "--delete-emptydir-data; on the node: kubeadm upgrade node phase kubelet-config && "
        f"{restart}; kubectl uncordon <node>",
    ]


# Settings the kubelet's upload carries too, but that no running cluster takes by a re-upload.
_CLUSTER_WIDE = ("kubernetesVersion:", "podSubnet:", "serviceSubnet:", "dnsDomain:")


def _control_plane_settings(changes: Iterable[Change], kubelet: Change | None) -> list[str]:
    """Init hosts whose script changed in more than the kubelet settings `kubelet-config`
    carries (those reach joining nodes; everything else in the init needs a hand)."""
    carried = set(kubelet.text_diffs.get("stdin", [])) if kubelet is not None else set()
    hosts = []
    for c in changes:
        host = _suffix(c.name, "-kubeadm-init")
        if host is None or c.action not in ("update", "replace"):
            continue
        lines = set(c.text_diffs.get("stdin", []))
        if lines - carried or any(key in line for line in lines for key in _CLUSTER_WIDE):
            hosts.append(host)
    return sorted(hosts)


_VERSION_LINE = re.compile(r"^[-+]\s*kubernetesVersion: v(\d+)\.(\d+)\.(\d+)$")
_PKG_LINE = re.compile(r'^\+KUBE_PKG_VERSION="([^"]+)"$')


def kubernetes_upgrade(changes: Iterable[Change]) -> tuple[str, str, str] | None:
    """(old version, new version, new package version) when the control plane's
    kubernetesVersion changes, else None."""
    old = new = pkg = None
    for c in changes:
        for line in c.text_diffs.get("stdin", []):
            m = _VERSION_LINE.match(line)
            if m and c.name.endswith("-kubeadm-init"):
                version = ".".join(m.groups())
                old, new = (version, new) if line.startswith("-") else (old, version)
            if (p := _PKG_LINE.match(line)) is not None:
                pkg = p.group(1)
    if not (old and new and old != new):
        return None
    return old, new, pkg or f"{new}-*"


_ENDPOINT_LINE = re.compile(r"^([-+])\s*controlPlaneEndpoint: (\S+)$")


def endpoint_move(changes: Iterable[Change]) -> tuple[str, str] | None:
    """(old, new) when the API endpoint `kubeadm init` is given changes: refused, since
    kubeadm cannot move a running cluster (components/planning/refusals.endpoint_moved)."""
    moved: dict[str, str] = {}
    for c in changes:
        if c.name.endswith("-kubeadm-init") and c.action in ("update", "replace"):
            for line in c.text_diffs.get("stdin", []):
                if (m := _ENDPOINT_LINE.match(line)) is not None:
                    moved[m.group(1)] = m.group(2)
    old, new = moved.get("-"), moved.get("+")
    return (old, new) if old and new and old != new else None


def endpoint_refusal(old: str, new: str) -> str:
    return (f"REFUSED control-plane endpoint {old} -> {new}: kubeadm init wrote {old} into the "
            "API server's certificate and every kubeconfig, and kubeadm cannot move a running "
            "cluster to another endpoint (nor turn one control plane into several); keep "
            "kubernetes.controlPlaneEndpoint, or build the new cluster as a new stack "
            "(docs/day2.md, \"Control planes\")")


def upgrade_refused(old: str, new: str) -> bool:
    """kubeadm's version skew policy: one minor at a time, never back (the program refuses the
    same in components/planning/refusals.py; tests/test_refusals.py holds them equal)."""
    o, n = [int(x) for x in old.split(".")], [int(x) for x in new.split(".")]
    return n < o or n[0] != o[0] or n[1] - o[1] > 1


def _other_than_version(change: Change, path: str = "stdin") -> bool:
    return any(not _VERSION_LINE.match(line) for line in change.text_diffs.get(path, []))


_BATCH = re.compile(r'^BATCH="([^"]*)"$', re.M)


def upgrade_lanes(new_inputs: Mapping[str, Mapping[str, Any]] | None
                  ) -> dict[str, list[list[str]]]:
    """The GPU-node batches of the upgrade, per SU (a lane: its batches in order, the lanes
    side by side), as the drain scripts and the nodes' placement labels carry them."""
    # Imported here: the program's own `components` package is the first this process imports.
    from components.planning.labels import SU_LABEL

    inputs = new_inputs or {}
    su_of = {str(meta.get("name")): str((meta.get("labels") or {}).get(SU_LABEL, ""))
             for urn, i in inputs.items() if urn.endswith("-placement")
             for meta in [i.get("metadata") or {}]}
    batches = {tuple(m.group(1).split()) for urn, i in inputs.items()
               if urn.endswith("-upgrade-drain")
               if (m := _BATCH.search(str(i.get("create", ""))))}
    lanes: dict[str, list[list[str]]] = {}
    for batch in sorted(batches):
        lanes.setdefault(su_of.get(batch[0], ""), []).append(list(batch))
    return dict(sorted(lanes.items(), key=lambda kv: _su_order(kv[0])))


def _su_order(su: str) -> tuple[int, str]:
    digits = su.removeprefix("su")
    return (int(digits), su) if digits.isdigit() else (-1, su)


def upgraded_control_planes(changes: Iterable[Change]) -> list[str]:
    """Control-plane hosts whose upgrade command re-runs (GPU nodes have a drain beside it)."""
    changes = list(changes)
    nodes = set(_hosts(changes, "-upgrade-drain", "update"))
    return sorted(h for h in _hosts(changes, "-kubernetes-upgrade", "update") if h not in nodes)


def batch_words(lanes: Mapping[str, list[list[str]]]) -> str:
    size = max((len(b) for lane in lanes.values() for b in lane), default=1)
    words = "one at a time" if size == 1 else f"{size} at a time"
    return words + (f" in each SU, the {len(lanes)} SUs side by side" if len(lanes) > 1 else "")


def _lane_order(lanes: Mapping[str, list[list[str]]]) -> str:
    """`a, then b, …` for one lane; `su1: …; su2: …` for several (two shown, the rest counted)."""
    def order(lane: list[list[str]]) -> str:
        return ", then ".join(" + ".join(b) for b in lane[:4]) + (
            f", … ({len(lane)} batches)" if len(lane) > 4 else "")
    if len(lanes) == 1:
        return order(next(iter(lanes.values())))
    shown = list(lanes.items())[:2]
    return "; ".join(f"{su}: {order(lane)}" for su, lane in shown) + (
        f"; … ({len(lanes)} SUs)" if len(lanes) > len(shown) else "")


_GANG_WAIT = re.compile(r"^GANG_WAIT_S=(\d+)$", re.M)


def _gang_wait(new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    """How long a drain waits for a gang job, as the rendered drain scripts say."""
    for urn, inputs in (new_inputs or {}).items():
        if urn.endswith("-upgrade-drain") and (m := _GANG_WAIT.search(str(inputs.get("create",
                                                                                      "")))):
            return f"{int(m.group(1)) // 60} min (kubernetes.gangWaitMinutes)"
    return "kubernetes.gangWaitMinutes"


def _upgrade_steps(old: str, new: str, pkg: str,
                   new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """What `pulumi up` runs, in kubeadm's order (components/planning/upgrade.py): the first
    control plane (`upgrade apply`), the others (`upgrade node`), then the GPU nodes in
    batches, each drained; kubeadm before kubelet and kubectl; one minor at a time."""
    o = [int(x) for x in old.split(".")]
    if upgrade_refused(old, new):
        return [f"REFUSED Kubernetes {old} -> {new}: kubeadm upgrades one minor version at a time "
                "and never downgrades (version skew policy); the upgrade commands would stop on "
                "the control plane. Do not apply this change: set kubernetes.version to a "
                f"1.{o[1] + 1} release first, apply, then the next"]
    names = [urn.rpartition("::")[2] for urn in new_inputs or {}]
    upgraded = sorted(h for x in names if (h := _suffix(x, "-kubernetes-upgrade")))
    first = next((h for x in names if (h := _suffix(x, "-kubeadm-init"))), "the first control "
                 "plane")
    others = sorted(h for h in upgraded if h != first and f"{h}-upgrade-drain" not in names
                    and f"{h}-kubeadm-join" in names)
    lanes = upgrade_lanes(new_inputs)
    steps = [
        f"Kubernetes upgrade {old} -> {new} (packages {pkg}): `pulumi up` runs kubeadm's "
        "upgrade, in this order; every step is a no-op where a host already runs the target. "
        "Before the window, let long gang jobs reach a checkpoint or suspend them (a Kubeflow "
        "job: `kubectl patch <pytorchjob|mpijob> <job> --type=merge -p "
        "'{\"spec\":{\"runPolicy\":{\"suspend\":true}}}'`), or raise "
        "kubernetes.upgradeBatch to cover their nodes, so no batch waits on them",
        f"kubeadm upgrade apply -y v{new} on {first} (its kubeadm package first, then "
        f"`kubeadm upgrade plan`); {first} is then drained for its kubelet and kubectl and "
        "uncordoned",
    ]
    if others:
        steps.append(f"kubeadm upgrade node on each further control plane, one at a time "
                     f"({', '.join(others)}), each then drained for its kubelet and kubectl")
    if lanes:
        steps.append(
            f"the GPU nodes {batch_words(lanes)} (kubernetes.upgradeBatch): "
            f"{_lane_order(lanes)}. Each "
            "is drained from the control plane (PodDisruptionBudgets hold an eviction back; "
            "a running gang job on the batch and other nodes is waited for, up to "
            f"{_gang_wait(new_inputs)}, never split: then `pulumi up` fails naming it), gets "
            f"kubeadm upgrade node and its kubelet and kubectl, and is uncordoned once its "
            f"kubelet reports v{new}")
    return steps


def _sm_step(changes: Iterable[Change], sms: list[str],
             new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    """The SM hosts in the order `pulumi up` restarts them: standbys first, the master (whose
    apply script waits for MASTER) last."""
    stdin = {h: str((new_inputs or {}).get(c.urn, {}).get("stdin", "")) for c in changes
             if (h := _suffix(c.name, "-opensm")) in sms}
    master = {h for h, text in stdin.items() if "not MASTER;" in text}
    order = sorted(sms, key=lambda h: (h in master, h))
    standbys = [h for h in order if h not in master]
    text = ("subnet-manager files change on " + ", ".join(order) + ": `pulumi up` installs "
            "them and restarts opensm only where content changed, one host at a time")
    if master and standbys:
        return text + (f": the standby {', '.join(standbys)} first, back to STANDBY (sminfo) "
                       f"before the master {', '.join(sorted(master))} restarts; the fabric "
                       "keeps a master throughout, so running work is not interrupted")
    # One subnet manager: the switches keep forwarding on the routes it programmed.
    return text + (" (no standby: while opensm restarts the fabric has no subnet manager; "
                   "established routes keep forwarding, a port that changes meanwhile waits for "
                   "it)")


@dataclass(frozen=True)
class Cabling:
    """A diff's cable work: cables moved between ports (same peer), pulled, plugged, and
    ports whose peer changes (re-cabled)."""

    moved: list[tuple[CableMove, CableMove]]  # (where it is pulled, where it is plugged)
    pulled: list[CableMove]
    plugged: list[CableMove]
    recabled: list[CableMove]

    @property
    def existing_links_moved(self) -> int:
        return len(self.moved) + len(self.recabled)

    @property
    def new_media(self) -> list[str]:
        """The cable each moved link needs where its old one no longer fits (a node moved to
        another rack: in-rack copper becomes cross-rack optics, or the other way)."""
        return [b.new_cable or "cable" for a, b in self.moved if a.old_cable != b.new_cable]


def cabling(moves: list[CableMove]) -> Cabling:
    """A peer unplugged from one port and plugged into another is one cable moving."""
    pulled = {mv.old: mv for mv in moves if mv.old and not mv.new}
    plugged = {mv.new: mv for mv in moves if mv.new and not mv.old}
    moved = sorted(set(pulled) & set(plugged))
    return Cabling(
        moved=[(pulled[p], plugged[p]) for p in moved],
        pulled=[mv for mv in moves if mv.old and not mv.new and mv.old not in moved],
        plugged=[mv for mv in moves if mv.new and not mv.old and mv.new not in moved],
        recabled=[mv for mv in moves if mv.old and mv.new])


def _cabling_steps(moves: list[CableMove], switches: Mapping[str, str],
                   roles: Mapping[str, str]) -> list[str]:
    """New switches racked and powered before anything is plugged into them; retired links
    pulled first (freeing ports), then moves (a standby subnet manager's first, the master's
    last, as their own steps say), re-cables and new links; a retired switch goes once its
    cables are out."""
    work = cabling(moves)
    rank = {"standby": 0, "master": 2}

    def order(mv: CableMove) -> int:
        return rank.get(roles.get((mv.old or "").split(" ")[0], ""), 1)
    moved = sorted(work.moved, key=lambda ab: order(ab[0]))
    recabled = sorted(work.recabled, key=order)
    steps = [f"rack and power new switch {sw} (before any cable is plugged into it)"
             for sw, action in sorted(switches.items()) if action == "create"]
    steps += [f"pull   {mv.switch} port {mv.port} <-> {mv.old}  [{mv.old_cable}]"
              for mv in work.pulled]
    steps += [f"move   {a.old}: {a.switch} port {a.port} -> {b.switch} port {b.port}  "
              + (f"[{b.new_cable}]" if a.old_cable == b.new_cable else
                 f"[a new cable: {a.old_cable} -> {b.new_cable}]") for a, b in moved]
    steps += [f"re-cable {mv.switch} port {mv.port}: {mv.old} [{mv.old_cable}] -> {mv.new} "
              f"[{mv.new_cable}]" for mv in recabled]
    steps += [f"plug   {mv.switch} port {mv.port} <-> {mv.new}  [{mv.new_cable}]"
              for mv in work.plugged]
    steps += [f"retire switch {sw} (its cables are out)"
              for sw, action in sorted(switches.items()) if action == "delete"]
    return steps


def _sm_cable_steps(moves: list[CableMove],
                    new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Subnet-manager hosts whose cable moves: not Kubernetes nodes (nothing to drain), but the
    fabric's master or standby; the standby's cable first, the master's last."""
    roles = sm_roles(new_inputs)
    peers = {m.split(" ")[0] for mv in moves for m in (mv.old, mv.new) if m}
    master = {h for h, role in roles.items() if role == "master"}
    steps = []
    for h in sorted(peers & set(roles), key=lambda h: (h in master, h)):
        role = "master" if h in master else "standby"
        then = ("move it last, once the standby is back in STANDBY (sminfo): the standby takes "
                "over while it is unplugged" if h in master else
                "move it first, and check `sminfo` shows it STANDBY again before the master's")
        steps.append(f"{h}'s cable moves: it runs the {role} subnet manager (not a Kubernetes "
                     f"node, nothing to drain); {then}")
    return steps


def _reboot_step(hosts: list[str], driver: tuple[str, str, list[str]] | None) -> str:
    """GPU nodes whose boot settings change (the `<host>-reboot` chain is re-created);
    `driver`: the hosts' GPU driver release change, when it is one of them."""
    which = ", ".join(hosts) if len(hosts) <= 12 else _span(hosts)
    why = (f"the hosts' GPU driver {driver[0]} -> {driver[1]}" if driver
           else "kernel arguments, initramfs, interface names change")
    install = (f"; then the driver, fabric manager and NSCQ of {driver[1]} installed and "
               "held;" if driver else ",")
    return (
        f"planned reboot of {which} ({why}): "
        "`pulumi up` takes each through check -> drain -> reboot -> wait -> uncordon. A node "
        "that is a cluster member takes the kube-system/gpu-cluster-reboot-lock ConfigMap "
        "first, so one member is out at a time: kubectl drain on the control plane (after "
        f"waiting for the gang jobs it shares with other nodes){install} "
        "`shutdown -r +1` on the node, SSH dialled until it is back (about an hour at most), "
        "then a check of the new boot ID, /proc/cmdline, every rail interface"
        + (" and the loaded driver with its fabric manager" if driver else "")
        + ", then uncordon (unless it was cordoned before). A node that needs no reboot "
        "passes through without a drain. Running jobs on a drained node are evicted: plan a "
        "maintenance window")


def switch_changes(changes: Iterable[Change]) -> dict[str, str]:
    """switch -> the action on its port map (create: a new switch, delete: a retired one)."""
    return {sw: c.action for c in changes if (sw := _switch(c)) is not None}


def _members(new_inputs: Mapping[str, Mapping[str, Any]] | None) -> set[str]:
    """Hosts that are Kubernetes nodes in the new rendering (they have a `<host>-member`)."""
    return {h for urn in new_inputs or {}
            if (h := _suffix(urn.rpartition("::")[2], "-member")) is not None}


def drained_hosts(changes: Iterable[Change],
                  new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Cluster members drained by hand because their cables move, and members leaving. Hosts
    that are not Kubernetes nodes (the subnet-manager hosts) are never drained."""
    changes = list(changes)
    leaving = _hosts(changes, "-member", "delete")
    joining = _hosts(changes, "-kubeadm-join", "create")
    members = _members(new_inputs)
    peers = {m.split(" ")[0] for mv in cable_moves(changes, new_inputs)
             for m in (mv.old, mv.new) if m}
    moved = {h for h in peers | set(replaced_boards(changes)) if h in members}
    decommissioning = set(_hosts(changes, "-decommission", "create"))
    return sorted(set(leaving) | decommissioning | (moved - set(joining)))


def recabled_hosts(changes: Iterable[Change],
                   new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Members drained because their cables move, that stay in the cluster on the same
    board."""
    changes = list(changes)
    out = set(_hosts(changes, "-member", "delete")) | set(replaced_boards(changes))
    out |= set(_hosts(changes, "-decommission", "create"))
    return [h for h in drained_hosts(changes, new_inputs) if h not in out]


def retested_hosts(changes: Iterable[Change],
                   new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """GPU nodes whose links are re-made in place (cables moved, a new switch's ports): when
    the stack gates on the acceptance test, they are marked untested at their drain and tested
    again after their uncordon."""
    if gate_urn(new_inputs) is None:
        return []
    changes = list(changes)
    on_new_switch = {h for s in replaced_switches(changes, new_inputs) for h in s.nodes}
    return sorted((set(recabled_hosts(changes, new_inputs)) | on_new_switch)
                  & gpu_nodes(new_inputs))


def joined_hosts(changes: Iterable[Change]) -> list[str]:
    """Hosts that join the cluster in this change (a kubeadm join of their own is created)."""
    return _hosts(changes, "-kubeadm-join", "create")


def rebooted_hosts(changes: Iterable[Change]) -> list[str]:
    """GPU nodes already in the stack whose planned-reboot chain is re-created."""
    changes = list(changes)
    joining = set(_hosts(changes, "-kubeadm-join", "create"))
    return sorted(h for h in _hosts(changes, "-reboot", "create")
                  + _hosts(changes, "-reboot", "replace") if h not in joining)


@dataclass
class _Work:
    """What a diff asks of people and of `pulumi up`, read once from its changes."""

    changes: list[Change]
    leaving: list[str]
    joining: list[str]
    decommissioning: list[str]
    moves: list[CableMove]
    sms: list[str]
    switches: dict[str, str]
    prepared: list[str]
    operators: list[str]
    kubelet: Change | None
    control_plane: list[str]
    upgrade: tuple[str, str, str] | None
    rejoined: list[str]
    rehosted: list[tuple[str, str, str]]
    rebooting: bool
    rotations: list[Rotation]

    @property
    def fabric_touched(self) -> bool:
        """Cables, subnet managers, or a switch added or retired."""
        return bool(self.moves or self.sms or any(a != "update" for a in self.switches.values()))

    def __bool__(self) -> bool:
        return bool(self.leaving or self.joining or self.operators or self.prepared
                    or self.kubelet or self.rebooting or self.upgrade or self.rotations
                    or self.decommissioning or self.control_plane or self.rejoined
                    or self.rehosted or self.fabric_touched)


# What a command logs in with: a rotation or a new board behind the same address changes these,
# not what the command runs or where.
_LOGIN = ("privateKey: ", "password: ", "hostKey: ")


def login_only(change: Change) -> bool:
    """An update of only how a command logs in (the key or password it uses, the host key it
    expects), not of what it runs or where: it re-runs the same script, so it asks for no step
    beyond the rotation's or the board's own. (A host's preparation with a new host key is
    where a board swap is read from: it stays.)"""
    lines = [ln for ln in change.text_diffs.get("connection", []) if ln[:1] in ("-", "+")]
    board = _suffix(change.name, "-prepare") and any(ln[1:].startswith("hostKey: ")
                                                      for ln in lines)
    return (change.action == "update" and change.paths == ["connection"] and bool(lines)
            and all(ln[1:].startswith(_LOGIN) for ln in lines) and not board)


def _work(diff: Diff, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> _Work:
    # What a rotation or a new board re-runs unchanged is read by `secret_rotations` and
    # `replaced_boards`; every other step is about what changes on a host, a switch or the
    # cluster.
    changes = [c for c in diff.changes if not login_only(c)]
    kubelet = next((c for c in changes if c.name == "kubelet-config" and c.layer == "bootstrap"
                    and c.action in ("update", "replace")), None)
    control_plane = _control_plane_settings(changes, kubelet)
    upgrade = kubernetes_upgrade(changes)
    if upgrade is not None:
        # The upgrade steps carry the version; only other settings need their own steps.
        if kubelet is not None and not _other_than_version(kubelet):
            kubelet = None
        control_plane = [h for h in control_plane if _other_than_version(
            next(c for c in changes if c.name == f"{h}-kubeadm-init"))]
    return _Work(
        changes=changes,
        leaving=_hosts(changes, "-member", "delete"),
        joining=_hosts(changes, "-kubeadm-join", "create"),
        decommissioning=_hosts(changes, "-decommission", "create"),
        moves=cable_moves(changes, new_inputs),
        sms=sorted(h for c in changes if c.action in ("update", "create")
                   if (h := _suffix(c.name, "-opensm")) is not None),
        switches=switch_changes(changes),
        prepared=_hosts(changes, "-prepare", "update"),
        operators=[c.name for name in OPERATOR_ORDER for c in changes
                   if c.type == "kubernetes:helm.sh/v3:Release" and c.name == name
                   and c.action in ("update", "replace")],
        kubelet=kubelet, control_plane=control_plane, upgrade=upgrade,
        # A joined node's guarded join does nothing when re-run: its changed settings stay
        # unapplied. (A join script is the command itself; its credentials are its stdin.)
        # (A control plane's join carries the cluster's version: the upgrade steps apply it.)
        rejoined=sorted(h for c in changes if c.action == "update" and c.text_diffs.get("create")
                        and (upgrade is None or _other_than_version(c, "create"))
                        if (h := _suffix(c.name, "-kubeadm-join")) is not None),
        rehosted=_rehosted(changes),
        rebooting=any(_suffix(c.name, "-reboot") for c in changes
                      if c.action in ("create", "replace")),
        rotations=secret_rotations(diff.changes, new_inputs),
    )


def runbook(diff: Diff, stack: str = "prod",
            new_inputs: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """Numbered steps, or [] when the diff needs no physical or node-by-node work."""
    w = _work(diff, new_inputs)
    if not w:
        return []
    # Nodes whose cables move but who stay in the cluster are drained by hand first; a new
    # board's host gets its own step.
    boards = replaced_boards(w.changes)
    recabled = recabled_hosts(w.changes, new_inputs)
    retested = retested_hosts(w.changes, new_inputs)
    steps: list[str] = rotation_steps(w.rotations)
    steps += _membership_steps(w, recabled, retested)
    steps += board_steps(boards, new_inputs, stack)
    hca_before, hca_after = hca_steps(replaced_hcas(w.changes), new_inputs)
    steps += hca_before
    steps += switch_swap_steps(replaced_switches(w.changes, new_inputs), stack, retested)
    steps += _host_steps(w, boards)
    steps += _fabric_steps(w, new_inputs)
    steps += hca_after
    macs = management_macs(w.joining, new_inputs)
    steps += [f"{host} joins: " + (
        f"before it powers on, load build/{stack}/network/dhcp-hosts into the management "
        f"network's DHCP/PXE server (its management MAC {mac} gets its address); then "
        if (mac := macs.get(host)) else "") + "`pulumi up` runs its host "
        "preparation, its own join token, guarded kubeadm join, placement labels"
        for host in w.joining]
    steps += _software_steps(w, new_inputs)
    numbered = [f"  {i}. {s}" for i, s in enumerate(steps, 1)]
    checks = _checks(w, recabled, stack,
                     recabled_check(retested, new_inputs) if retested else None)
    return (["Hardware-change runbook (in this order):"] + numbered
            + (["  afterwards:"] + [f"    - {c}" for c in checks] if checks else []))


def _membership_steps(w: _Work, recabled: list[str], retested: list[str]) -> list[str]:
    """Nodes decommissioned, leaving, or drained before their cables move."""
    steps = []
    decommissioned = set(_hosts(w.changes, "-decommission", "delete"))
    for host in w.decommissioning:
        steps.append(
            f"decommission {host}: `pulumi up` cordons and drains it on the control plane "
            "before anything that waits for the cluster changes (the jobs sized by node count "
            "are resized after the drain); its cables, subnet-manager entries and membership "
            "stay. In a later change remove it from gpuNodes (its range and decommission): "
            "that change resets it and frees its ports")
    for host in w.leaving:
        if host in decommissioned:
            steps.append(f"{host} leaves, drained by its decommission: the Node is deleted, then "
                         f"kubeadm reset on {host}")
        else:
            steps.append(
                f"{host} leaves without a decommission first: `pulumi up` runs deletions after "
                "creates and updates, so its port maps, the SM files and the jobs sized by node "
                f"count change while it still runs work; its cordon and drain come last, then "
                f"kubeadm reset on {host}. To drain first: list it in gpuNodes.decommission, "
                "apply, then remove it")
    for host in recabled:
        steps.append(f"cordon and drain {host} before touching its cables: "
                     f"kubectl drain {host} --ignore-daemonsets --delete-emptydir-data"
                     + (f"; mark it untested ({mark_untested([host])}): its links are tested "
                        "again before work lands there" if host in retested else ""))
    return steps


def _host_steps(w: _Work, boards: list[str]) -> list[str]:
    """Planned reboots, and host preparation applied in place."""
    steps = []
    rebooted = rebooted_hosts(w.changes)
    if rebooted:
        steps.append(_reboot_step(sorted(rebooted), host_driver_change(w.changes)))
    in_place = [h for h in w.prepared if h not in w.joining and h not in w.leaving
                and h not in rebooted and h not in boards]
    if in_place:
        which = (f"{len(in_place)} hosts ({_span(in_place)})" if len(in_place) > 2
                 else " and ".join(in_place))
        steps.append(f"host preparation changes on {which}: applied in place by `pulumi up`; "
                     "boot settings are unchanged, so no reboot and no drain")
    return steps + address_steps(w.changes)


def _fabric_steps(w: _Work, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Cables, switch settings and the subnet managers."""
    steps = _sm_cable_steps(w.moves, new_inputs)
    steps += _cabling_steps(w.moves, w.switches, sm_roles(new_inputs))
    if w.switches:
        steps.append("switch port descriptions and settings are applied by `pulumi up`: "
                     + ", ".join(sorted(w.switches)))
    if w.sms:
        steps.append(_sm_step(w.changes, w.sms, new_inputs))
    return steps


def _software_steps(w: _Work, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Operators, Kubernetes, the kubelets and settings kubeadm applies only once."""
    steps = []
    rollouts = {r.release: r for r in operator_rollouts(w.changes, new_inputs)}
    for name in w.operators:
        policy = ("NicClusterPolicy" if name == "network-operator" else "ClusterPolicy")
        order = (" first" if name == "network-operator" else " after the network operator"
                 ) if len(w.operators) > 1 else ""
        steps.append(f"upgrade {name}{order}: the chart's pre-upgrade hook applies its new "
                     f"CRDs; {rollouts[name].line()}; `pulumi up` waits ({name}-rollout, up to "
                     f"2 h) until the {policy} reports ready before it goes on")
    if w.upgrade is not None:
        steps.extend(_upgrade_steps(*w.upgrade, new_inputs))
    if w.kubelet is not None:
        steps.extend(_kubelet_roll(w.kubelet, w.joining, new_inputs))
    if (moved := endpoint_move(w.changes)) is not None:
        steps.append(endpoint_refusal(*moved))
    for host in w.control_plane:
        steps.append(
            f"control-plane settings change in {host}-kubeadm-init: kubeadm applies them only "
            "at init, and the guarded re-run leaves a running control plane as it is. Apply "
            "them by kubeadm's reconfiguration procedure (the kubeadm-config ConfigMap, then "
            "each control-plane node's static Pod manifests, one node at a time). A Kubernetes "
            "version change is a `kubeadm upgrade`; the pod and service subnets and the cluster "
            "domain cannot change on a running cluster")
    if w.rejoined:
        which = (f"{len(w.rejoined)} joined nodes ({_span(w.rejoined)})" if len(w.rejoined) > 1
                 else w.rejoined[0])
        steps.append(
            f"join settings change for {which}: kubeadm applies them only when a node joins, "
            "and the guarded re-run leaves a joined node as it is. Apply them by hand (e.g. "
            "`kubectl taint` for taints, the static Pod manifest for kube-vip) or drain, remove "
            "and re-add the node")
    for name, old, new in w.rehosted:
        steps.append(
            f"{name} moves from {old} to {new}: `pulumi up` runs its create command on {new} "
            f"and nothing on {old} (pulumi-command updates a command whose host changed; it "
            f"runs no delete on the old host). Undo on {old} by hand what it set up there")
    return steps


def _checks(w: _Work, recabled: list[str], stack: str, retest: str | None) -> list[str]:
    """What to check once `pulumi up` is done; `retest`: the gate's re-run for the re-cabled
    nodes, once they are uncordoned."""
    checks = []
    if w.joining or w.leaving or w.fabric_touched:
        checks.append(f"ibnetdiscover > fabric.dump && make verify-fabric STACK={stack} "
                      "DISCOVERED=fabric.dump   (must report no difference)")
    # The nodes the acceptance test runs on are back in service before it.
    if recabled or w.leaving:
        checks.append("uncordon the drained nodes: " + ", ".join(recabled) if recabled
                      else "confirm the removed nodes are gone: kubectl get nodes")
    if retest:
        checks.append(retest)
    if replace(w, rotations=[]):  # a node, the fabric or the software stack changed
        checks.append("the NCCL acceptance gate passed (`pulumi up` fails otherwise; its log "
                      "has `acceptance test: …` and PASS), and `kubectl get nodes -l "
                      f"{UNTESTED}` lists no node")
    return checks
