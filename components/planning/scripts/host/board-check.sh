# shellcheck shell=bash
#: A step of the host preparation script; its upper-case variables come from the generated
#: header (components/planning/host_scripts.py).

if [ -n "$MANAGEMENT_MAC" ] \
    && ! cat /sys/class/net/*/address 2>/dev/null | grep -qix "$MANAGEMENT_MAC"; then
  echo "no interface of this host has the inventory's managementMac $MANAGEMENT_MAC" >&2
  echo "  fix: a replaced board has new MACs: set managementMac in the inventory to its" \
    "management interface's (cat /sys/class/net/<interface>/address) and update its DHCP" \
    "reservation (build/<stack>/network/dhcp-hosts)" >&2
  exit 1
fi
