#!/usr/bin/env bash
# @title@ for @hostname@ (@address@) — rendered by gpu-cluster from @stack_key@; do not edit.
#: The top of every host preparation script; the generated header of values and the steps
#: (the other files here) follow.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
log() { printf '[%s] %s\n' "@hostname@" "$*"; }
