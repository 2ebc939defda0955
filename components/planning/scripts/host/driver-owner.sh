# shellcheck shell=bash
#: Read only, before any change: the GPU driver has one owner (docs/hosts.md, "The GPU driver").
# A host driver makes the GPU Operator label the node nvidia.com/gpu.deploy.driver=pre-installed
# and run no driver container: with `operator` the pinned driverVersion would never run. Checked
# before anything changes. (With `host`, the planned reboot installs the pinned release.)
if [ "$GPU_DRIVER" = operator ] && [ -e /sys/module/nvidia/version ]; then
  echo "GPU driver: this host runs NVIDIA driver $(cat /sys/module/nvidia/version) of its own" \
    "(DGX OS ships one), so the GPU Operator would run no driver container and" \
    "platform.gpuOperator.driverVersion would not be what runs" >&2
  echo "  fix: set platform.gpuOperator.driver: host (the stack then installs driverVersion" \
    "on the host), or purge the host's NVIDIA driver packages and reboot first" >&2
  exit 1
fi
