# shellcheck shell=bash
# include: header.sh
# include: packages.sh
# include: skew.sh
# include: cordon.sh

current="$(apiserver_version)"
if [ -z "$current" ]; then
  echo "no control plane on $NODE ($(basename @manifest@) not found)" >&2
  exit 1
fi
# @control_plane@

if [ "$(installed kubelet)" != "$PKG" ]; then
  drain_node
  upgrade_kubelet
  uncordon_node
fi
