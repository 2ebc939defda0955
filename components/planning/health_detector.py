"""node-problem-detector on the GPU nodes as Kubernetes objects (pure): its identity, the files
health.py plans (monitors, checks, each node's rails) as ConfigMaps, and the DaemonSet that runs
it on every GPU node with its exporter reporting to the API server (docs/health.md, "How it
runs").

The container sees the node the way the checks expect (health.Layout, scripts/health/): the
host's / read-only at HEALTH_ROOT (its /sys and /proc), /dev/kmsg for the kernel monitor, a
host directory at HEALTH_STATE for the error counters between runs, and the host's own
nvidia-smi, dcgmi and systemctl through HOST_EXEC. It shares the host's network, so the DCGM
check's `localhost:5555` is the node's own host engine.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping

from components.model.cluster import Cluster
from components.planning import health
from components.planning.labels import GPU_NODE_TERM, LABEL_PREFIX, su_value
from components.planning.release_placement import EVERYWHERE, NODE_CRITICAL

NAMESPACE = "kube-system"
NAME = "node-problem-detector"
# Upstream's image of the release tools/npd/build.sh builds and the tests run. Its Makefile tags
# the image with the release (Makefile:38 `TAG?=$(VERSION)`, :278
# `registry.k8s.io/node-problem-detector/node-problem-detector:$(TAG)`); its Dockerfile puts the
# binary at /node-problem-detector (Dockerfile:30) on debian-base with bash and util-linux's
# nsenter added (Dockerfile:23,25), which the checks and HOST_EXEC need. awk (mawk), grep and
# coreutils are debian-base's own: it purges only bash, e2fsprogs, ncurses and tzdata from
# Debian's base (kubernetes/release images/build/debian-base/bookworm/Dockerfile.build).
IMAGE = "registry.k8s.io/node-problem-detector/node-problem-detector:v1.36.0"
BINARY = "/node-problem-detector"
# The API server's own role for it (nodes get, nodes/status patch, events create), which
# upstream's deployment/rbac.yaml binds and tests/test_node_health_cluster.py proves enough.
ROLE = "system:node-problem-detector"
BINDING = "gpu-cluster:node-problem-detector"

# Where the container finds its files: the checks and rails where the monitors name them.
LAYOUT = health.Layout()
MONITORS = "/config/health/monitors"
HOST_ROOT = "/host"  # HEALTH_ROOT: the host's / (read-only)
STATE = "/var/lib/gpu-cluster/health"  # HEALTH_STATE, the same path on the host and in the pod
KMSG = "/dev/kmsg"
# A command in the host's mount namespace: PID 1 is the host's init (hostPID); entering it
# takes privilege. The host's binaries, libraries and systemd, the container's environment.
HOST_EXEC = "nsenter --target=1 --mount --"
# A ConfigMap's data may hold 1 MiB (the API server's validation of ConfigMap data size).
CONFIG_MAP_LIMIT = 1024 * 1024
# The pod template carries a digest of the monitors and checks: NPD reads its monitors once, at
# start, so a changed threshold or check restarts the pods. The rails are read on every run and
# stay out of it: a node added does not restart the detector on every other node.
CONFIG_DIGEST = f"{LABEL_PREFIX}/node-health-config-digest"  # sha256, 16 hex digits
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "node-health",
          "app.kubernetes.io/part-of": "gpu-cluster"}
RBAC = "rbac.authorization.k8s.io"


def monitors_name() -> str:
    return f"{NAME}-monitors"


def checks_name() -> str:
    return f"{NAME}-checks"


def rails_name(su: int) -> str:
    """The rails of one SU's nodes. A ConfigMap per SU stays far under the limit at any size
    (a site's rails grow with its nodes: 0.8 MiB at 2,047) and a node added or recabled
    rewrites its own SU's, named by the SU, never by a position in a list."""
    return f"{NAME}-rails-{su_value(su)}"


def objects(cluster: Cluster) -> list[dict]:
    """Everything the detector runs with, its DaemonSet last; nothing with health checks off."""
    if not cluster.health.enabled:
        return []
    files = health.files(cluster, LAYOUT, health.Kmsg())
    monitors = _config_map(monitors_name(), _under(files, "monitors/"))
    checks = _config_map(checks_name(), _under(files, "plugins/"))
    rails = _under(files, "rails/")
    su_of = {n.hostname: n.su for n in cluster.nodes}
    by_su: dict[int, dict[str, str]] = {}
    for host, text in rails.items():
        by_su.setdefault(su_of[host], {})[host] = text
    rails_maps = [_config_map(rails_name(su), by_su[su]) for su in sorted(by_su)]
    return [service_account(), binding(), monitors, checks, *rails_maps,
            daemonset(cluster, monitors, checks, rails_maps)]


def _under(files: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {path.removeprefix(prefix): text for path, text in sorted(files.items())
            if path.startswith(prefix)}


def _config_map(name: str, data: Mapping[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(LABELS)},
            "data": dict(data)}


def service_account() -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)}}


def binding() -> dict:
    return {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": BINDING, "labels": dict(LABELS)},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]}


def command(cluster: Cluster) -> list[str]:
    """The detector's command line: the monitors health.py plans, the Kubernetes exporter on
    (in-cluster, as its service account), no HTTP endpoint of its own on the host's network
    (tests/support/node_health.py's `exporting_detector` runs it so)."""
    custom = [f"{MONITORS}/{source}.json" for source in health.checks(cluster, LAYOUT)]
    return [BINARY, f"--config.system-log-monitor={MONITORS}/{health.KERNEL_SOURCE}.json",
            "--config.custom-plugin-monitor=" + ",".join(custom),
            "--enable-k8s-exporter=true", "--port=0", "--prometheus-port=0"]


def _digest(*maps: dict) -> str:
    data = [m["data"] for m in maps]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def volumes(monitors: dict, checks: dict, rails: list[dict]) -> list[tuple[dict, dict]]:
    """(volume, its mount in the container) for what the detector reads and keeps."""
    def cm(name: str, config_map: dict, mode: int) -> dict:
        return {"name": name, "configMap": {"name": config_map["metadata"]["name"],
                                            "defaultMode": mode}}

    return [
        ({"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}},
         {"name": "host-root", "mountPath": HOST_ROOT, "readOnly": True}),
        ({"name": "kmsg", "hostPath": {"path": KMSG, "type": "CharDevice"}},
         {"name": "kmsg", "mountPath": KMSG, "readOnly": True}),
        ({"name": "state", "hostPath": {"path": STATE, "type": "DirectoryOrCreate"}},
         {"name": "state", "mountPath": STATE}),
        (cm("monitors", monitors, 0o444),
         {"name": "monitors", "mountPath": MONITORS, "readOnly": True}),
        # The checks run as programs.
        (cm("checks", checks, 0o555),
         {"name": "checks", "mountPath": LAYOUT.plugins, "readOnly": True}),
        # Every SU's rails in one directory: each pod reads the file of its own node.
        ({"name": "rails", "projected": {"defaultMode": 0o444, "sources": [
            {"configMap": {"name": m["metadata"]["name"]}} for m in rails]}},
         {"name": "rails", "mountPath": LAYOUT.rails, "readOnly": True}),
    ]


def container(cluster: Cluster, mounts: list[dict]) -> dict:
    env = [
        {"name": "NODE_NAME",  # the node it reports for, and whose rails file the checks read
         "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}},
        {"name": "HEALTH_ROOT", "value": HOST_ROOT},
        {"name": "HEALTH_STATE", "value": STATE},
        {"name": "HOST_EXEC", "value": HOST_EXEC},
    ]
    return {
        "name": NAME, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
        "command": command(cluster), "env": env,
        # Privileged: nsenter into the host's mount namespace, the GPUs' device nodes for
        # nvidia-smi, reading /dev/kmsg.
        "securityContext": {"privileged": True},
        # The checks (nvidia-smi -q among them) run in the container's cgroup: room for them,
        # and no CPU limit that would stretch a check past its timeout.
        "resources": {"requests": {"cpu": "50m", "memory": "100Mi"},
                      "limits": {"memory": "300Mi"}},
        "volumeMounts": mounts,
    }


def daemonset(cluster: Cluster, monitors: dict, checks: dict, rails: list[dict]) -> dict:
    """On every GPU node (the stack's role label), whatever taints it carries: the GPU taint,
    the quarantine's (a quarantined node must keep reporting, or its conditions never clear)
    and any other; before workloads when a node is short (system-node-critical)."""
    pairs = volumes(monitors, checks, rails)
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            # A detector restarting only stops reporting for a moment (the conditions stay on
            # the Node object): a tenth of the nodes at a time, not one by one over a site.
            "updateStrategy": {"type": "RollingUpdate",
                               "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {"labels": dict(LABELS),
                             "annotations": {CONFIG_DIGEST: _digest(monitors, checks)}},
                "spec": {
                    "serviceAccountName": NAME,
                    "priorityClassName": NODE_CRITICAL,
                    "affinity": {"nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [copy.deepcopy(GPU_NODE_TERM)]}}},
                    "tolerations": list(EVERYWHERE),
                    # The host's network: the DCGM host engine at localhost:5555 is the node's.
                    # The host's PIDs: PID 1 is the host's init, for HOST_EXEC.
                    "hostNetwork": True,
                    "hostPID": True,
                    "containers": [container(cluster, [m for _, m in pairs])],
                    "volumes": [v for v, _ in pairs],
                },
            },
        },
    }
