"""Kubernetes upgrades the kubeadm way, as scripts `pulumi up` runs in order
(kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/):

1. the first control plane: kubeadm's package, `kubeadm upgrade plan` and `upgrade apply`;
   then drained, kubelet and kubectl, uncordoned;
2. every other control plane, one at a time: `kubeadm upgrade node`, then the same;
3. the GPU nodes in batches (`kubernetes.upgradeBatch`) within each scalable unit, the SUs side
   by side: drained from the control plane (the eviction API honours PodDisruptionBudgets; a
   batch never splits a running gang job: it waits for the job to end), `kubeadm upgrade node`
   and the kubelet on the node, uncordoned.

Each SU is a lane of its own, so the longest chain of commands is an SU's (at most 32 nodes),
never the cluster's: `pulumi up` orders the lane in its graph (no lock to wait on, so no
command holds one of the engine's parallel slots waiting for another), and the SDK's cycle
check on every `depends_on` walks a chain no longer than an SU's.

Every script is a no-op where the packages already are at the target, so a first bring-up and
a re-run change nothing. The version skew policy is checked on the host: one minor at a time,
never back, never a kubelet newer than the API server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from components.model.cluster import Cluster
from components.planning.host_scripts import kube_pkg_version
from components.planning.script_files import body, template

SU = TypeVar("SU", int, str)
DRAIN_TIMEOUT = "30m"
# Node annotation: whether the node was cordoned before the upgrade drained it.
CORDONED = "gpucluster.io/cordoned-before-upgrade"
APISERVER_MANIFEST = "/etc/kubernetes/manifests/kube-apiserver.yaml"
# The values of cordon.sh: drain and uncordon, remembering a cordon someone else set (their
# maintenance stays).
_CORDON: dict[str, object] = {
    "cordoned": CORDONED, "cordoned_jsonpath": CORDONED.replace(".", "\\."),
    "timeout": DRAIN_TIMEOUT}


def _script(name: str, title: str, node: str, cluster: Cluster, *, admin: bool = False,
            target: bool = False, pkg: bool = False, cordon: bool = False,
            **values: object) -> str:
    """scripts/upgrade/<name>.sh under the common top; `admin`: kubectl as the cluster admin
    (a control-plane host), `target` the Kubernetes release and `pkg` its Debian package
    version where the script uses them; `cordon`: the script includes cordon.sh."""
    version = cluster.kubernetes.version
    settings = (("export KUBECONFIG=/etc/kubernetes/admin.conf\n" if admin else "")
                + (f"TARGET={version}\n" if target else "")
                + (f'PKG="{kube_pkg_version(version)}"\n' if pkg else ""))
    if cordon:
        values |= _CORDON
    return template(f"upgrade/{name}.sh", title=title, node=node, settings=settings, **values)


def control_plane_script(cluster: Cluster, host: str, first: bool) -> str:
    """On a control-plane host: its control plane (`upgrade apply` on the first, `upgrade node`
    on the others), then its kubelet, drained."""
    title = (f"Kubernetes upgrade of {host}, the first control plane" if first
             else f"Kubernetes upgrade of {host}, a further control plane")
    return _script("control-plane", title, host, cluster, admin=True, target=True, pkg=True,
                   cordon=True, manifest=APISERVER_MANIFEST,
                   control_plane=body("upgrade/apply-first.sh" if first
                                      else "upgrade/apply-further.sh"))


def drain_script(cluster: Cluster, node: str, batch: tuple[str, ...]) -> str:
    """On the control plane, before a GPU node's upgrade: nothing when its kubelet already
    runs the target; otherwise wait until no running gang job spans this batch and other
    nodes (evicting one worker would restart the whole job), then drain."""
    return _script("drain", f"Drain of {node} for the Kubernetes upgrade", node, cluster,
                   admin=True, target=True, cordon=True, batch=" ".join(batch),
                   gang_wait_s=cluster.kubernetes.gang_wait_minutes * 60)


def node_script(cluster: Cluster, node: str) -> str:
    """On a drained GPU node: kubeadm's package, `kubeadm upgrade node` (the kubelet
    configuration of the new version), then the kubelet and kubectl."""
    return _script("node", f"Kubernetes upgrade of {node}", node, cluster, pkg=True)


def uncordon_script(cluster: Cluster, node: str) -> str:
    """On the control plane after a GPU node's upgrade: the kubelet reports the target, then
    the node is uncordoned (unless it was cordoned before)."""
    return _script("uncordon", f"Uncordon of {node} after the Kubernetes upgrade", node, cluster,
                   admin=True, target=True, cordon=True)


def batches(su_of: Mapping[str, SU], size: int) -> dict[SU, list[tuple[str, ...]]]:
    """Per SU (its lane), its GPU nodes in upgrade order (by hostname), `size` at a time (the
    preview groups the nodes by their SU label, the stack by the SU's number)."""
    lanes: dict[SU, list[str]] = {}
    for host in sorted(su_of):
        lanes.setdefault(su_of[host], []).append(host)
    return {su: [tuple(hosts[i:i + size]) for i in range(0, len(hosts), size)]
            for su, hosts in sorted(lanes.items())}
