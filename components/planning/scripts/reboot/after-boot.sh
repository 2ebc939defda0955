# shellcheck shell=bash
# include: node-header.sh
RAIL_NETDEVS="@netdevs@"

if [ -e "$STATE/reboot.boot-id" ]; then
  if [ "$(cat /proc/sys/kernel/random/boot_id)" = "$(cat "$STATE/reboot.boot-id")" ]; then
    echo "the planned reboot has not happened (same boot ID; was it cancelled with" \
      "shutdown -c?)" >&2
    echo "  fix: reboot the node (drained) and run pulumi up again" >&2
    exit 1
  fi
  # The boot applied what was staged: netplan, sysctls and lnet.service's import too.
  rm -f "$STATE/reboot.boot-id" "$STATE/reboot.pending" "$STATE/rename.pending" \
    "$STATE/lnet-addresses.pending" "$STATE/lnet-sysctl.pending" "$STATE/lnet.pending"
  log "booted again"
fi
problems=""
for arg in $KERNEL_ARGS; do
  case " $(cat /proc/cmdline) " in
    *" $arg "*) ;;
    *) problems="$problems; kernel argument $arg is not in /proc/cmdline" ;;
  esac
done
for dev in $RAIL_NETDEVS; do
  [ -e "/sys/class/net/$dev" ] || problems="$problems; no rail interface $dev"
done
if [ -n "$GPU_DRIVER_VERSION" ]; then
  if [ "$(loaded_gpu_driver)" != "$GPU_DRIVER_VERSION" ]; then
    problems="$problems; GPU driver $(loaded_gpu_driver) is loaded, not $GPU_DRIVER_VERSION"
  fi
  # The NVSwitch fabric is brought up by the fabric manager; without it CUDA reports
  # "system not yet initialized" on every GPU.
  systemctl is-active --quiet nvidia-fabricmanager \
    || problems="$problems; nvidia-fabricmanager is not running"
fi
if [ -n "$problems" ]; then
  echo "after the reboot:${problems#;}" >&2
  echo "  fix: compare /etc/default/grub.d/90-gpu-cluster.cfg with /proc/cmdline," \
    "\`ibdev2netdev\` with gpuNodes netdevs, \`dkms status\` and" \
    "\`journalctl -u nvidia-fabricmanager\` with the pinned driver, then run pulumi up again" >&2
  exit 1
fi
log "kernel arguments, rail interfaces${GPU_DRIVER_VERSION:+ and GPU driver $GPU_DRIVER_VERSION}" \
  "as configured"
