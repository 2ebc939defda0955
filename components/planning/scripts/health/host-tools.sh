# shellcheck shell=bash
# The host's own tools (nvidia-smi, dcgmi, systemctl). In node-problem-detector's pod they are
# not in the image: HOST_EXEC is the prefix that runs a command in the host's mount namespace
# ("nsenter --target=1 --mount --" with hostPID and privileged: PID 1 is the host's init), so
# the host's binary runs with the host's driver libraries and its systemd. Unset or empty where
# the checks run on the host itself (the tests, with stand-ins on PATH).
read -r -a HOST_EXEC_ARGV <<<"${HOST_EXEC:-}"

# on_host COMMAND [ARG...]: COMMAND as the host runs it.
on_host() { "${HOST_EXEC_ARGV[@]}" "$@"; }
