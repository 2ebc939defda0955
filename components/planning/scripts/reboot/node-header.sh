#!/usr/bin/env bash
# shellcheck disable=SC2034
#: The top of the planned-reboot scripts; the including script reads these variables.
# @title@ of @node@ — rendered by gpu-cluster; do not edit.
set -euo pipefail
log() { printf '[%s] %s\n' "@node@" "$*"; }
STATE=/var/lib/gpu-cluster
KERNEL_ARGS="@kernel_args@"
