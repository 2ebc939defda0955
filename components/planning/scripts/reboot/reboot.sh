# shellcheck shell=bash
# include: node-header.sh
# include: reboot-why.sh

if [ -z "$reboot_why" ]; then
  log "no reboot required"
  exit 0
fi
mkdir -p "$STATE"
cat /proc/sys/kernel/random/boot_id > "$STATE/reboot.boot-id"
# `shutdown -r +1` writes /run/nologin now: new (non-root) logins are refused until the
# host is down, so the check after the boot cannot run on this boot.
shutdown -r +1 "gpu-cluster: planned reboot:$reboot_why"
log "rebooting in one minute:$reboot_why"
