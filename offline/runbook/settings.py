"""Kubernetes settings kubeadm applies once, read from the diff: the KubeletConfiguration
`kubelet-config` uploads (rolled to running nodes by hand), the control-plane settings of
`<host>-kubeadm-init`, and the API endpoint, which never moves."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..conventions import cluster_change, names, resource_name, subject
from ..conventions import span as _span
from ..diff import Change

# The kubelet policies the kubeadm cluster publishes (components/planning/facts.py
# kubernetes_facts) whose change needs the kubelet's checkpoint removed before it restarts.
_CHECKPOINTED = {"facts.kubeletCpuManagerPolicy": "cpu_manager_state",
                 "facts.kubeletMemoryManagerPolicy": "memory_manager_state"}


def kubelet_roll(changes: Iterable[Change], joining: list[str],
                 new_inputs: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """A changed KubeletConfiguration: uploaded by `pulumi up`, rolled by hand node by node."""
    # Control-plane hosts run a kubelet with the same settings: every host that inits or joins.
    resources = [resource_name(urn) for urn in new_inputs or {}]
    members = sorted({h for name in resources
                      for role in (names().KUBEADM_INIT, names().KUBEADM_JOIN)
                      if (h := subject(name, role)) is not None})
    existing = [h for h in members if h not in joining]
    cluster = cluster_change(changes)
    changed = cluster.values if cluster is not None else {}
    states = [f"/var/lib/kubelet/{f}" for key, f in _CHECKPOINTED.items() if key in changed]
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


# Settings the kubelet's upload carries too, but that no running cluster takes by a re-upload,
# as the kubeadm cluster publishes them.
_CLUSTER_WIDE = ("facts.kubernetesVersion", "facts.podSubnet", "facts.serviceSubnet",
                 "facts.dnsDomain")


def control_plane_settings(changes: Iterable[Change], kubelet: Change | None) -> list[str]:
    """Init hosts whose script changed in more than the kubelet settings `kubelet-config`
    carries (those reach joining nodes; everything else in the init needs a hand)."""
    changes = list(changes)
    carried = set(kubelet.text_diffs.get("stdin", [])) if kubelet is not None else set()
    cluster = cluster_change(changes)
    cluster_wide = cluster is not None and any(k in cluster.values for k in _CLUSTER_WIDE)
    hosts = []
    for c in changes:
        host = subject(c.name, names().KUBEADM_INIT)
        if host is None or c.action not in ("update", "replace"):
            continue
        if set(c.text_diffs.get("stdin", [])) - carried or cluster_wide:
            hosts.append(host)
    return sorted(hosts)


# The API endpoint the kubeadm cluster publishes where the stack inits the control plane
# (components/planning/facts.py kubernetes_facts).
ENDPOINT = "facts.controlPlaneEndpoint"


def endpoint_move(changes: Iterable[Change]) -> tuple[str, str] | None:
    """(old, new) when the API endpoint `kubeadm init` is given changes: refused, since
    kubeadm cannot move a running cluster (components/planning/refusals.endpoint_moved). A
    state from before the cluster published it tells nothing."""
    cluster = cluster_change(changes)
    old, new = cluster.values.get(ENDPOINT, (None, None)) if cluster else (None, None)
    return (str(old), str(new)) if old and new and old != new else None


def endpoint_refusal(old: str, new: str) -> str:
    return (f"REFUSED control-plane endpoint {old} -> {new}: kubeadm init wrote {old} into the "
            "API server's certificate and every kubeconfig, and kubeadm cannot move a running "
            "cluster to another endpoint (nor turn one control plane into several); keep "
            "kubernetes.controlPlaneEndpoint, or build the new cluster as a new stack "
            "(docs/day2.md, \"Control planes\")")
