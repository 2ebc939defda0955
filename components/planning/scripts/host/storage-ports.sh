# shellcheck shell=bash disable=SC2153
#: A step of the host preparation script; its upper-case variables (STORAGE_NETDEVS too) come
#: from the generated header (components/planning/host_scripts.py).

# --- storage ports (reads only): each storage HCA with the IPoIB name LNet is configured on -
read -r -a storage_netdevs <<<"$STORAGE_NETDEVS"
port=0
for hca in $STORAGE_HCAS; do
  want="${storage_netdevs[$port]}"
  if [ ! -e "/sys/class/infiniband/$hca/device" ]; then
    echo "storage port $port: HCA $hca not found under /sys/class/infiniband" >&2
    echo "  fix: set fabric.storageFabric.hcas[$port] to the storage ConnectX-7's device" >&2
    exit 1
  fi
  have=""
  for dev in /sys/class/infiniband/"$hca"/device/net/*; do
    [ -e "$dev" ] && have="$have ${dev##*/}"
  done
  if [ "${have# }" != "$want" ]; then
    echo "storage port $port: $hca's IPoIB interface is '${have# }', the stack config says" \
      "$want" >&2
    echo "  fix: set fabric.storageFabric.netdevs[$port] to what \`ibdev2netdev\` prints" \
      "for $hca" >&2
    exit 1
  fi
  port=$((port + 1))
done
