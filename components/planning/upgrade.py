"""Kubernetes upgrades the kubeadm way, as scripts `pulumi up` runs in order
(kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/):

1. the first control plane: kubeadm's package, `kubeadm upgrade plan` and `upgrade apply`;
   then drained, kubelet and kubectl, uncordoned;
2. every other control plane, one at a time: `kubeadm upgrade node`, then the same;
3. the GPU nodes in batches (`kubernetes.upgradeBatch`): drained from the control plane (the
   eviction API honours PodDisruptionBudgets; a batch never splits a running gang job: it waits
   for the job to end), `kubeadm upgrade node` and the kubelet on the node, uncordoned.

Every script is a no-op where the packages already are at the target, so a first bring-up and
a re-run change nothing. The version skew policy is checked on the host: one minor at a time,
never back, never a kubelet newer than the API server."""

from __future__ import annotations

from textwrap import dedent

from components.config import Cluster
from components.planning.host_scripts import kube_pkg_version

DRAIN_TIMEOUT = "30m"
GANG_WAIT_S = 6 * 3600  # a batch waits this long for a gang job that spans other nodes
# Node annotation: whether the node was cordoned before the upgrade drained it.
CORDONED = "gpucluster.io/cordoned-before-upgrade"
APISERVER_MANIFEST = "/etc/kubernetes/manifests/kube-apiserver.yaml"

_HEADER = """\
#!/usr/bin/env bash
# {title} — rendered by gpu-cluster; do not edit.
set -euo pipefail
NODE={node}
log() {{ printf '[%s] %s\\n' "$NODE" "$*"; }}
"""

# On a host: the installed package version, and an upgrade of held packages.
_PACKAGES = r"""
installed() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
upgrade_packages() {  # name...: each to $PKG, held again afterwards
  local args=() p
  for p in "$@"; do args+=("$p=$PKG"); done
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-change-held-packages "${args[@]}"
  apt-mark hold "$@" >/dev/null
}
# The kubelet and kubectl after kubeadm, with the node drained (kubeadm's order).
upgrade_kubelet() {
  upgrade_packages kubelet kubectl
  systemctl daemon-reload
  systemctl restart kubelet
  log "kubelet and kubectl at $PKG"
}
"""

# The version skew policy (kubernetes.io/releases/version-skew-policy/), for a cluster at $1.
_SKEW = r"""
skew_check() {
  local from=$1 f t
  IFS=. read -r -a f <<<"$from"; IFS=. read -r -a t <<<"$TARGET"
  if [ "${t[0]}" != "${f[0]}" ] || [ "${t[1]}" -lt "${f[1]}" ] \
      || { [ "${t[1]}" = "${f[1]}" ] && [ "${t[2]}" -lt "${f[2]}" ]; }; then
    echo "refusing Kubernetes $from -> $TARGET: kubeadm never downgrades" >&2
    echo "  fix: set kubernetes.version back to $from or later" >&2
    exit 1
  fi
  if [ "${t[1]}" -gt $((f[1] + 1)) ]; then
    echo "refusing Kubernetes $from -> $TARGET: kubeadm upgrades one minor version at a time" >&2
    echo "  fix: set kubernetes.version to a 1.$((f[1] + 1)) release, apply, then the next" >&2
    exit 1
  fi
}
apiserver_version() { sed -n 's|.*kube-apiserver:v\([0-9][0-9.]*\).*|\1|p' __MANIFEST__ | head -1; }
""".replace("__MANIFEST__", APISERVER_MANIFEST)

# Drain and uncordon, remembering a cordon someone else set (their maintenance stays).
_CORDON = r"""
drain_node() {
  local before
  before="$(kubectl get node "$NODE" -o 'jsonpath={.spec.unschedulable}')"
  kubectl annotate node "$NODE" --overwrite "__CORDONED__=${before:-false}" >/dev/null
  kubectl drain "$NODE" --ignore-daemonsets --delete-emptydir-data --timeout=__TIMEOUT__
}
uncordon_node() {
  local before
  before="$(kubectl get node "$NODE" -o 'jsonpath={.metadata.annotations.__CORDONED_JSONPATH__}')"
  [ -n "$before" ] || { log "not drained for the upgrade; nothing to uncordon"; return 0; }
  if [ "$before" = true ]; then
    log "cordoned before the upgrade: it stays cordoned"
  else
    kubectl uncordon "$NODE"
  fi
  kubectl annotate node "$NODE" "__CORDONED__-" >/dev/null
}
""".replace("__CORDONED__", CORDONED).replace(
    "__CORDONED_JSONPATH__", CORDONED.replace(".", "\\.")).replace(
    "__TIMEOUT__", DRAIN_TIMEOUT)


def _header(title: str, node: str, cluster: Cluster, *, admin: bool = False,
            target: bool = False, pkg: bool = False) -> str:
    """The common top; `admin`: kubectl as the cluster admin (a control-plane host), `target`
    the Kubernetes release and `pkg` its Debian package version where the script uses them."""
    version = cluster.kubernetes.version
    return (_HEADER.format(title=title, node=node)
            + ("export KUBECONFIG=/etc/kubernetes/admin.conf\n" if admin else "")
            + (f"TARGET={version}\n" if target else "")
            + (f'PKG="{kube_pkg_version(version)}"\n' if pkg else ""))


def control_plane_script(cluster: Cluster, host: str, first: bool) -> str:
    """On a control-plane host: its control plane (`upgrade apply` on the first, `upgrade node`
    on the others), then its kubelet, drained."""
    if first:
        title = f"Kubernetes upgrade of {host}, the first control plane"
        control_plane = dedent(r"""
            if [ "$current" != "$TARGET" ]; then
              skew_check "$current"
              upgrade_packages kubeadm
              kubeadm upgrade plan "v$TARGET"
              kubeadm upgrade apply -y "v$TARGET"
              log "control plane at v$TARGET"
            fi
            """)
    else:
        title = f"Kubernetes upgrade of {host}, a further control plane"
        control_plane = dedent(r"""
            if [ "$current" != "$TARGET" ]; then
              skew_check "$current"
              upgrade_packages kubeadm
              kubeadm upgrade node
              log "control plane at v$TARGET"
            fi
            """)
    return (_header(title, host, cluster, admin=True, target=True, pkg=True)
            + _PACKAGES + _SKEW + _CORDON + dedent(r"""
        current="$(apiserver_version)"
        if [ -z "$current" ]; then
          echo "no control plane on $NODE ($(basename __MANIFEST__) not found)" >&2
          exit 1
        fi
        """).replace("__MANIFEST__", APISERVER_MANIFEST) + control_plane + dedent(r"""
        if [ "$(installed kubelet)" != "$PKG" ]; then
          drain_node
          upgrade_kubelet
          uncordon_node
        fi
        """))


def drain_script(cluster: Cluster, node: str, batch: tuple[str, ...]) -> str:
    """On the control plane, before a GPU node's upgrade: nothing when its kubelet already
    runs the target; otherwise wait until no running gang job spans this batch and other
    nodes (evicting one worker would restart the whole job), then drain."""
    return (_header(f"Drain of {node} for the Kubernetes upgrade", node, cluster, admin=True,
                    target=True)
            + f'BATCH="{" ".join(batch)}"\n' + _CORDON + dedent(rf"""
        kubelet="$(kubectl get node "$NODE" -o 'jsonpath={{.status.nodeInfo.kubeletVersion}}')"
        if [ "$kubelet" = "v$TARGET" ]; then
          log "kubelet already at v$TARGET"
          exit 0
        fi
        api="$(kubectl get --raw /version | sed -n 's/.*"gitVersion": *"v\([^"]*\)".*/\1/p')"
        if [ "$api" != "$TARGET" ]; then
          echo "the API server runs v$api, not v$TARGET: a kubelet is never newer" >&2
          echo "  fix: the control plane upgrades first (pulumi up again)" >&2
          exit 1
        fi
        # Running gang jobs (Volcano's scheduling.k8s.io/group-name) on this batch that also
        # run on other nodes.
        GANG='{{.metadata.annotations.scheduling\.k8s\.io/group-name}}'
        ROW="{{.metadata.namespace}}{{\"\\t\"}}$GANG{{\"\\t\"}}{{.spec.nodeName}}{{\"\\n\"}}"
        split_gangs() {{
          kubectl get pods -A --field-selector=status.phase=Running \
            -o "jsonpath={{range .items[*]}}$ROW{{end}}" \
          | awk -F'\t' -v batch=" $BATCH " '
              $2 == "" {{ next }}
              {{ g = $1 "/" $2 }}
              index(batch, " " $3 " ") {{ inside[g] = 1; next }}
              {{ out[g] = out[g] " " $3 }}
              END {{ for (g in inside) if (g in out) print g " (also on" out[g] ")" }}' | sort
        }}
        waited=0
        while gangs="$(split_gangs)" && [ -n "$gangs" ]; do
          if [ "$waited" -ge {GANG_WAIT_S} ]; then
            echo "$NODE: draining batch ($BATCH) would split running gang jobs:" >&2
            echo "$gangs" >&2
            echo "  fix: let them finish, or suspend them (vcctl job suspend) from a checkpoint," \
              "then pulumi up again" >&2
            exit 1
          fi
          log "waiting for gang jobs on this batch and other nodes: $(paste -sd, <<<"$gangs")"
          sleep 60; waited=$((waited + 60))
        done
        drain_node
        """))


def node_script(cluster: Cluster, node: str) -> str:
    """On a drained GPU node: kubeadm's package, `kubeadm upgrade node` (the kubelet
    configuration of the new version), then the kubelet and kubectl."""
    return (_header(f"Kubernetes upgrade of {node}", node, cluster, pkg=True) + _PACKAGES
            + dedent(r"""
        if [ "$(installed kubelet)" = "$PKG" ]; then
          log "kubelet already at $PKG"
          exit 0
        fi
        if [ "$(installed kubeadm)" != "$PKG" ]; then
          upgrade_packages kubeadm
        fi
        kubeadm upgrade node
        upgrade_kubelet
        """))


def uncordon_script(cluster: Cluster, node: str) -> str:
    """On the control plane after a GPU node's upgrade: the kubelet reports the target, then
    the node is uncordoned (unless it was cordoned before)."""
    return (_header(f"Uncordon of {node} after the Kubernetes upgrade", node, cluster,
                    admin=True, target=True) + _CORDON + dedent(r"""
        kubectl wait --for=jsonpath='{.status.nodeInfo.kubeletVersion}'="v$TARGET" \
          "node/$NODE" --timeout=10m
        uncordon_node
        """))


def batches(nodes: list[str], size: int) -> list[tuple[str, ...]]:
    """GPU nodes in upgrade order (by hostname), `size` at a time."""
    ordered = sorted(nodes)
    return [tuple(ordered[i:i + size]) for i in range(0, len(ordered), size)]
