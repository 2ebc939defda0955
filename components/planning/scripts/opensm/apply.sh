#!/usr/bin/env bash
# Subnet-manager configuration — rendered by gpu-cluster; do not edit.
#: Every file is staged and checked (stage*.sh) before the first is installed (install.sh);
#: opensm restarts only when one changed, and is waited for in its role (role-wait.sh). The
#: standby-*.sh pieces go in on a standby only.
set -euo pipefail
# shellcheck disable=SC2034  # read by stage-keys.sh
OPENSM_KEYS="${OPENSM_KEYS:?the subnet-manager keys come with this script from pulumi up (secrets fabricMKey, fabricSmKey, fabricSaKey)}"
install -d -m 0700 @conf_dir@
install -d -m 0755 @state_dir@ @dropin_dir@
stage=$(mktemp -d)
# @standby_init@
trap 'rm -rf "$stage"' EXIT
# @stage@
# @install@
# @standby_mark@
chmod 0700 @conf_dir@
if [ -d @cache_dir@ ]; then chmod 0700 @cache_dir@; fi
if [ -e @log_file@ ]; then chmod 0600 @log_file@; fi
# @standby_stop@
if [ -e @pending@ ]; then
  echo "subnet-manager files changed; restarting opensm"
  systemctl daemon-reload
  systemctl restart opensm
# @role_wait@
  rm -f @pending@
fi
systemctl is-enabled --quiet opensm || systemctl enable --now opensm
