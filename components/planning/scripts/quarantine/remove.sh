# shellcheck shell=bash
#: The quarantine turned off (health.enabled false), after host/change-tracking.sh: its timer
#: stopped and its files gone. Nodes it tainted keep their taints until a person releases them.
if [ -e /etc/systemd/system/@unit@.timer ] || [ -e @program@ ]; then
  systemctl disable --now @unit@.timer 2>/dev/null || true
  systemctl stop @unit@.service 2>/dev/null || true
  rm -f @files@
  systemctl daemon-reload
  echo "quarantine: removed"
fi
