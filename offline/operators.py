"""What a change of the GPU or Network Operator does to the GPU nodes (pure, from the diff).

A driver the operator runs in a container is updated by the operator's upgrade controller, one
node at a time: it waits for the pods its `waitForCompletion` selector names, drains the node,
and reloads the driver (GPU Operator: "GPU Driver Upgrades", `driver.upgradePolicy`; Network
Operator: `ofedDriver.upgradePolicy`). A new operator release brings new driver DaemonSets
even where the driver version is pinned, so it is read the same way. The node agents (device
plugins, exporters, CNI plugins) roll as DaemonSets without a drain. DOCA-OFED installed on
the hosts (`ofed: host`) has no driver container: the Network Operator drains nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .conventions import cluster_change, names, resource_name, span, subject
from .diff import Change

RELEASE = "kubernetes:helm.sh/v3:Release"
COMMAND = "command:remote:Command"
NIC_POLICY = "kubernetes:mellanox.com/v1alpha1:NicClusterPolicy"
GPU_OPERATOR, NETWORK_OPERATOR = "gpu-operator", "network-operator"


@dataclass(frozen=True)
class OperatorRollout:
    """One operator's change, as the GPU nodes see it."""

    release: str
    what: str  # "GPU driver 580.95.05 -> 580.105.08", "network-operator 26.4.1 -> 26.7.0"
    drained: tuple[str, ...]  # the GPU nodes it drains, one after another; () when none
    how: str  # what it does on each node, or why it drains none

    def line(self) -> str:
        if not self.drained:
            return f"{self.what}: {self.how}"
        n = len(self.drained)
        return (f"{self.what}: the {_OWNER[self.release]} updates {n} GPU node{'s' * (n != 1)} "
                f"({span(self.drained, whole_up_to=3)}) {self.how}")


_OWNER = {GPU_OPERATOR: "GPU Operator", NETWORK_OPERATOR: "Network Operator"}


def _dig(doc: Any, *path: str) -> Any:
    for key in path:
        doc = doc.get(key) if isinstance(doc, Mapping) else None
    return doc


def _gpu_nodes(changes: list[Change], new_inputs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The GPU nodes already in the cluster (each has a planned-reboot chain); a node that
    joins in this change starts with the new driver."""
    joining = {h for c in changes if c.action == "create"
               and (h := subject(c.name, names().KUBEADM_JOIN)) is not None}
    return sorted(h for urn in new_inputs
                  if (h := subject(resource_name(urn), names().REBOOT)) is not None
                  and h not in joining)


def _policy_words(policy: Mapping[str, Any] | None) -> str:
    """How an upgrade controller takes each node, from its upgradePolicy."""
    if not isinstance(policy, Mapping) or not policy.get("autoUpgrade"):
        return ("only as each node's driver pod is deleted by hand (upgradePolicy.autoUpgrade "
                "is off): drain the node first")
    parallel = policy.get("maxParallelUpgrades") or "all"
    words = f"{parallel} at a time: on each"
    wait = _dig(policy, "waitForCompletion", "podSelector")
    if wait:
        limit = _dig(policy, "waitForCompletion", "timeoutSeconds") or 0
        words += (f" it waits for the pods of `{wait}` to finish "
                  + ("(no time limit)" if not limit else f"(up to {limit} s)") + ", then")
    drain = _dig(policy, "drain", "enable")
    return words + (" drains it (its other pods evicted within their disruption budgets) and "
                    "reloads the driver" if drain else
                    " evicts its GPU pods and reloads the driver (drain.enable is off)")


def _version_change(c: Change, path: str) -> tuple[Any, Any] | None:
    """(old, new) of a changed value (`("?", "?")` when the diff says only that it changed)."""
    if path not in c.paths:
        return None
    return c.values.get(path) or ("?", "?")


def operator_rollouts(changes: Iterable[Change],
                      new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[OperatorRollout]:
    """The network operator's change first, then the GPU operator's (the safe order)."""
    changes, new_inputs = list(changes), new_inputs or {}
    out = []
    releases = {c.name: c for c in changes if c.type == RELEASE and c.action in (
        "update", "replace")}
    nic = next((c for c in changes if c.type == NIC_POLICY and c.action in (
        "update", "replace")), None)
    if NETWORK_OPERATOR in releases or nic is not None:
        out.append(_network_operator(releases.get(NETWORK_OPERATOR), nic, changes, new_inputs))
    if GPU_OPERATOR in releases:
        out.append(_gpu_operator(releases[GPU_OPERATOR], changes, new_inputs))
    return out


def _gpu_operator(c: Change, changes: list[Change],
                  new_inputs: Mapping[str, Mapping[str, Any]]) -> OperatorRollout:
    values = _dig(new_inputs.get(c.urn), "values") or {}
    driver = _version_change(c, "values.driver.version")
    chart = _version_change(c, "version")
    driver_changed = any(p.startswith("values.driver.") and not p.startswith(
        "values.driver.upgradePolicy") for p in c.paths)
    if driver:
        what = f"GPU driver {driver[0]} -> {driver[1]}"
    elif chart:
        what = f"{GPU_OPERATOR} {chart[0]} -> {chart[1]} (its driver DaemonSet with it)"
    else:
        what = f"{GPU_OPERATOR} values"
    if _dig(values, "driver", "enabled") is False:
        if driver and driver[1] is None:
            what = f"GPU driver {driver[0]} in the operator's container -> the hosts' own"
        elif chart:
            what = f"{GPU_OPERATOR} {chart[0]} -> {chart[1]}"
        return OperatorRollout(GPU_OPERATOR, what, (), "the hosts' own driver (driver.enabled "
                               "is off; the hosts' planned reboots install its releases): its "
                               "node agents roll one node at a time, no drain")
    if not (driver_changed or chart):
        return OperatorRollout(GPU_OPERATOR, what, (), "its node agents roll one node at a "
                               "time; the driver is unchanged, so no node is drained")
    return OperatorRollout(GPU_OPERATOR, what, tuple(_gpu_nodes(changes, new_inputs)),
                           _policy_words(_dig(values, "driver", "upgradePolicy")))


def _network_operator(c: Change | None, nic: Change | None, changes: list[Change],
                      new_inputs: Mapping[str, Mapping[str, Any]]) -> OperatorRollout:
    chart = _version_change(c, "version") if c is not None else None
    what = (f"{NETWORK_OPERATOR} {chart[0]} -> {chart[1]}" if chart
            else f"{NETWORK_OPERATOR} settings")
    policy = _dig(new_inputs.get(nic.urn) if nic else next(
        (v for v in new_inputs.values() if v.get("kind") == "NicClusterPolicy"), None), "spec")
    ofed = _dig(policy, "ofedDriver")
    if not ofed:
        return OperatorRollout(NETWORK_OPERATOR, what, (), "its node agents (RDMA device "
                               "plugin, IPAM, CNI plugins) roll one node at a time; DOCA-OFED "
                               "is the hosts' own (no driver container), so no node is drained")
    ofed_changed = chart is not None or (nic is not None and any(
        p.startswith("spec.ofedDriver") for p in nic.paths))
    if not ofed_changed:
        return OperatorRollout(NETWORK_OPERATOR, what, (), "its node agents roll one node at "
                               "a time; the DOCA-OFED driver is unchanged, so no node is drained")
    return OperatorRollout(NETWORK_OPERATOR, what, tuple(_gpu_nodes(changes, new_inputs)),
                           _policy_words(ofed.get("upgradePolicy")))


# The hosts' GPU driver release the kubeadm cluster publishes (components/planning/facts.py
# gpu_driver_facts); absent while the GPU Operator's driver container owns the driver.
OWNER, HOST_DRIVER = "facts.gpuDriverOwner", "facts.hostGpuDriver"


def host_driver_change(changes: Iterable[Change]) -> tuple[str, str, list[str]] | None:
    """(old, new, nodes) when the hosts' own GPU driver release changes: each node whose
    planned reboot changes installs the new one."""
    changes = list(changes)
    cluster = cluster_change(changes)
    if cluster is None:
        return None
    old, new = cluster.values.get(HOST_DRIVER, (None, None))
    # A state from before the cluster published its driver's owner tells nothing of it.
    if old is None and cluster.values.get(OWNER, ("", ""))[0] is None:
        return None
    nodes = sorted(node for c in changes if c.type == COMMAND
                   and c.action in ("update", "replace")
                   and (node := subject(c.name, names().REBOOT)) is not None)
    if old == new or not nodes:
        return None
    return str(old or "none"), str(new or "the operator's"), nodes

