#!/usr/bin/env bash
# shellcheck disable=SC2034
#: The top of the upgrade scripts; the including script reads these variables.
# @title@ — rendered by gpu-cluster; do not edit.
set -euo pipefail
NODE=@node@
log() { printf '[%s] %s\n' "$NODE" "$*"; }
# @settings@
