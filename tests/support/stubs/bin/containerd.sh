# shellcheck shell=bash
if [ "${1-}" = config ] && [ "${2-}" = default ]; then
  printf '%s\n' 'version = 2' \
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]' \
    '  SystemdCgroup = false'
fi
