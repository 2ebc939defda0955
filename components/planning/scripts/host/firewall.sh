# shellcheck shell=bash
#: A step of the host preparation script; its upper-case variables come from the generated
#: header (components/planning/host_scripts.py).

# --- host firewall: an allowlist on the management interface ---------------------------------
fw_rules=/etc/nftables.d/gpu-cluster.nft
fw_unit=/etc/systemd/system/gpu-cluster-firewall.service
if [ "$HOST_FIREWALL" = on ]; then
  dpkg -s nftables >/dev/null 2>&1 || apt-get install -y nftables
  # The management interface: whichever holds this host's management address (a bond or a VLAN
  # interface included), and the interface kube-vip announces the VIP on, when configured.
  fw_ifaces=" "
  for ifc in $(ip -o -4 addr show to "$MANAGEMENT_IP/32" | awk '{ print $2 }') \
      $FIREWALL_EXTRA_IFACES; do
    ifc="${ifc%%@*}"
    if [[ $fw_ifaces != *" $ifc "* ]]; then fw_ifaces+="$ifc "; fi
  done
  if [ -z "${fw_ifaces// /}" ]; then
    echo "firewall: no interface holds this host's management address $MANAGEMENT_IP" \
      "(ip -o -4 addr); nothing was changed" >&2
    echo "  fix: the inventory's managementIp must be the address the stack reaches it on" >&2
    exit 1
  fi
  # Never lock out the stack: SSH is allowed from the management network only, so when every
  # SSH client of this host comes from elsewhere, the next `pulumi up` could not log in.
  fw_ip4() {
    local IFS=. a b c d
    read -r a b c d <<<"$1"
    echo $(( (a << 24) | (b << 16) | (c << 8) | d ))
  }
  fw_in_net() {  # address cidr
    local bits=${2#*/} mask
    mask=$(( bits == 0 ? 0 : (0xffffffff << (32 - bits)) & 0xffffffff ))
    (( ($(fw_ip4 "$1") & mask) == ($(fw_ip4 "${2%/*}") & mask) ))
  }
  fw_peers="" fw_allowed=0
  if command -v ss >/dev/null 2>&1; then
    while read -r _ _ _ peer _; do
      peer="${peer%:*}"; peer="${peer#[}"; peer="${peer%]}"; peer="${peer#::ffff:}"
      [[ $peer =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || continue
      fw_peers+=" $peer"
      for net in $SSH_CIDRS; do
        if fw_in_net "$peer" "$net"; then fw_allowed=1; fi
      done
    done < <(ss -Htn state established '( sport = :22 )')
  fi
  if [ -n "$fw_peers" ] && [ "$fw_allowed" = 0 ]; then
    echo "firewall: this host's SSH clients ($fw_peers ) are outside network.managementCidr" \
      "and network.hostFirewall.adminCidrs ($SSH_CIDRS), the only sources the firewall lets" \
      "SSH in from; nothing was changed" >&2
    echo "  fix: run pulumi from the management network, or add its network to adminCidrs" >&2
    exit 1
  fi
  fw_list=""
  for ifc in $fw_ifaces; do fw_list="${fw_list:+$fw_list, }\"$ifc\""; done
  fw_ruleset="${FIREWALL_RULES//@MANAGEMENT_IFACES@/$fw_list}"
  if [ ! -f "$fw_rules" ] || [ "$(cat "$fw_rules")" != "$fw_ruleset" ]; then
    mkdir -p /etc/nftables.d
    fw_staged="$(mktemp /etc/nftables.d/.gpu-cluster.XXXXXX)"
    printf '%s\n' "$fw_ruleset" > "$fw_staged"
    if ! nft -c -f "$fw_staged"; then
      rm -f "$fw_staged"
      echo "firewall: nft -c rejects the rendered ruleset; nothing was changed" >&2
      exit 1
    fi
    chmod 0644 "$fw_staged"
    mv -f "$fw_staged" "$fw_rules"
    mark firewall
  fi
  mkdir -p /etc/systemd/system
  if write_if_changed "$fw_unit" "$FIREWALL_UNIT"; then mark firewall-unit; fi
  settle firewall-unit systemctl daemon-reload
  systemctl is-enabled --quiet gpu-cluster-firewall || systemctl enable gpu-cluster-firewall
  nft list table inet gpu_cluster >/dev/null 2>&1 || mark firewall  # flushed by hand: reload
  settle firewall nft -f "$fw_rules"
else
  # HOST_FIREWALL=off: the stack's table, unit and file go; no other table is touched.
  if systemctl is-enabled --quiet gpu-cluster-firewall; then
    systemctl disable gpu-cluster-firewall
  fi
  if nft list table inet gpu_cluster >/dev/null 2>&1; then nft delete table inet gpu_cluster; fi
  if [ -e "$fw_rules" ] || [ -e "$fw_unit" ]; then
    rm -f "$fw_rules" "$fw_unit"
    systemctl daemon-reload
  fi
fi
