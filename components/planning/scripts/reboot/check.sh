# shellcheck shell=bash
# include: node-header.sh
# include: reboot-why.sh

if [ -n "$reboot_why" ]; then
  echo "@reboot_required@$reboot_why"
else
  log "no reboot required"
fi
