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
if [ -n "$problems" ]; then
  echo "after the reboot:${problems#;}" >&2
  echo "  fix: compare /etc/default/grub.d/90-gpu-cluster.cfg with /proc/cmdline and" \
    "\`ibdev2netdev\` with gpuNodes netdevs, then run pulumi up again" >&2
  exit 1
fi
log "kernel arguments and rail interfaces as configured"
