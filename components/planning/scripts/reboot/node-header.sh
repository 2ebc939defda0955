#!/usr/bin/env bash
# shellcheck disable=SC2034
#: The top of the planned-reboot scripts; the including script reads these variables.
# @title@ of @node@ — rendered by gpu-cluster; do not edit.
set -euo pipefail
log() { printf '[%s] %s\n' "@node@" "$*"; }
STATE=/var/lib/gpu-cluster
KERNEL_ARGS="@kernel_args@"
# The GPU driver release the host owns (platform.gpuOperator.driver: host); empty: the GPU
# Operator's driver container owns it.
GPU_DRIVER_VERSION="@gpu_driver@"
# The version of the NVIDIA kernel module this boot loaded; "none" when none is.
loaded_gpu_driver() { cat /sys/module/nvidia/version 2>/dev/null || echo none; }
