"""What the quarantine (quarantine.py) runs with on the control-plane hosts (pure, no pulumi):
its own identity and the rights it needs, nothing more.

The rights are what its kubectl calls use: it reads nodes and pods, taints, annotates and
cordons nodes (a patch), evicts through the Eviction API (pods/eviction, which honours
PodDisruptionBudgets), reads a pod's DaemonSet (`kubectl drain --ignore-daemonsets` looks it
up) and suspends or resumes Kubeflow jobs (a patch). It cannot delete a pod, so it cannot
bypass a budget, and it cannot touch a Secret.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from components.model.cluster import Cluster
from components.planning.quarantine import LEASE
from components.planning.script_files import template

QUARANTINE_USER = "gpu-cluster:quarantine"
QUARANTINE_KUBECONFIG = "/etc/kubernetes/gpu-cluster-quarantine.conf"
PROGRAM = "/usr/local/sbin/gpu-cluster-quarantine"
POLICY_FILE = "/etc/kubernetes/gpu-cluster-quarantine.json"
UNIT = "gpu-cluster-quarantine"
SCRIPT = (Path(__file__).parent / "quarantine.py").read_text()

SERVICE = f"""\
[Unit]
Description=Take GPU nodes the health checks find unfit out of service (gpu-cluster)
After=network-online.target

[Service]
Type=oneshot
ExecStart={PROGRAM} {POLICY_FILE} {QUARANTINE_KUBECONFIG}
"""

# As often as node-problem-detector's checks run (health.checkIntervalSeconds' default): a
# GPU off the bus keeps the next gang off its node within a minute. A pass with nothing unfit
# is two LISTs.
TIMER = f"""\
[Unit]
Description=Quarantine unfit GPU nodes every 30 s (gpu-cluster)

[Timer]
OnBootSec=60s
OnUnitActiveSec=30s
AccuracySec=5s
Unit={UNIT}.service

[Install]
WantedBy=timers.target
"""
RBAC = "rbac.authorization.k8s.io"

# What each condition node-problem-detector sets (planning/health.py) does to a node.
# drain: the node cannot run a rank any more, or a job on it fails anyway: NCCL times out on a
# rail that is down or a GPU that is gone, a GPU that needs a reset corrupts or stops, and the
# scratch RAID0 loses everything with one drive. taint: the node still works, slower or with
# a link at risk: what runs keeps running, nothing new lands there until someone looks.
ACTIONS: dict[str, str] = {
    "GPUFallenOffBus": "drain",
    "GPUNeedsReset": "drain",
    "GPUHealthFailure": "drain",
    "NVLinkDown": "drain",
    "NVSwitchFabricNotReady": "drain",
    "InfinibandRailDown": "drain",
    "RAIDDegraded": "drain",
    "InfinibandRailDegraded": "taint",
    "InfinibandRailErrors": "taint",
}


def quarantine_rbac() -> list[dict]:
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"]},
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs", "mpijobs"],
         "verbs": ["get", "list", "patch"]},
    ]
    # One control plane's pass at a time: its Lease, by name (a create cannot be limited to a
    # name; it can only make this one, which the quarantine then owns).
    lease = [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": [LEASE], "verbs": ["get", "update"]},
    ]
    return [
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole",
         "metadata": {"name": QUARANTINE_USER}, "rules": rules},
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": QUARANTINE_USER},
         "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": QUARANTINE_USER},
         "subjects": [{"apiGroup": RBAC, "kind": "User", "name": QUARANTINE_USER}]},
        {"apiVersion": f"{RBAC}/v1", "kind": "Role",
         "metadata": {"name": QUARANTINE_USER, "namespace": "kube-system"}, "rules": lease},
        {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding",
         "metadata": {"name": QUARANTINE_USER, "namespace": "kube-system"},
         "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": QUARANTINE_USER},
         "subjects": [{"apiGroup": RBAC, "kind": "User", "name": QUARANTINE_USER}]},
    ]


def policy(cluster: Cluster) -> dict[str, Any]:
    """The policy file the program reads: the actions, the limits, and the hosts it must never
    touch (each control plane, each subnet manager's host: a GPU condition there is a person's
    call, after its role has moved)."""
    protected = {h.hostname: "control plane" for h in cluster.control_plane}
    for fabric in (cluster.fabric, cluster.fabric.storage_fabric):
        for sm in fabric.subnet_managers if fabric is not None else ():
            protected.setdefault(sm.host, "subnet manager's host")
    q = cluster.health.quarantine
    return {"conditions": ACTIONS, "maxQuarantined": q.max_nodes,
            "drainTimeoutSeconds": q.drain_timeout_minutes * 60,
            "protected": dict(sorted(protected.items()))}


def quarantine_facts(cluster: Cluster) -> dict[str, str]:
    """What the stack that inits the control plane publishes of the quarantine: the preview
    tells from their old and new values what enabling or changing it does (none: it is off)."""
    if not cluster.health.enabled:
        return {}
    return {"quarantineMaxNodes": str(cluster.health.quarantine.max_nodes),
            "quarantineDrains": ",".join(c for c, a in ACTIONS.items() if a == "drain"),
            "quarantineTaints": ",".join(c for c, a in ACTIONS.items() if a == "taint")}


def install_script(cluster: Cluster) -> str:
    """Bash (after CHANGE_TRACKING and the quarantine's kubeconfig): the program, its policy
    and its timer, each written only when it differs; with health checks off, their removal."""
    if not cluster.health.enabled:
        return template("quarantine/remove.sh", unit=UNIT, program=PROGRAM, files=" ".join(
            (PROGRAM, POLICY_FILE, QUARANTINE_KUBECONFIG, f"/etc/systemd/system/{UNIT}.service",
             f"/etc/systemd/system/{UNIT}.timer")))
    files = ((PROGRAM, SCRIPT, "0755"),
             (POLICY_FILE, json.dumps(policy(cluster), indent=2, sort_keys=True), "0644"),
             (f"/etc/systemd/system/{UNIT}.service", SERVICE, "0644"),
             (f"/etc/systemd/system/{UNIT}.timer", TIMER, "0644"))
    return template(
        "quarantine/install.sh", unit=UNIT,
        files="".join(template("host/unit-file.sh", path=path, mode=mode, program="quarantine",
                               text=text.rstrip() + "\n") for path, text, mode in files))
