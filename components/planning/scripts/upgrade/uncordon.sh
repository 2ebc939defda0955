# shellcheck shell=bash
# include: header.sh
# include: cordon.sh

kubectl wait --for=jsonpath='{.status.nodeInfo.kubeletVersion}'="v$TARGET" \
  "node/$NODE" --timeout=10m
uncordon_node
