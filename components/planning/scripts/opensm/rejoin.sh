#!/usr/bin/env bash
# Subnet-manager rejoin after a key change — rendered by gpu-cluster; do not edit.
set -euo pipefail
[ -e @rejoin_pending@ ] || exit 0
echo "starting opensm with the new SM_Key under the master"
systemctl restart opensm
# @role_wait@
rm -f @rejoin_pending@
