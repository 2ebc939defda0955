# shellcheck shell=sh disable=SC2086
#: $pin, $4 and $peer_hcas are word lists: split on purpose.
#: Runs in each worker (kubectl exec ... sh -c): every rail in turn, an ib_write_bw server for
#: the previous worker and a client to the next, pinned to the HCA's local CPUs where the pod's
#: cpuset allows. Arguments: seconds, this node, next node, next pod's IP, this node's HCAs in
#: rail order, the next node's. Prints one '# rail-check:' block per rail for nccl.py: the
#: client's result lines, or all it said when it failed (the launcher log stays small, so
#: kubelet log rotation cannot drop the rail check before the gate reads it).
#: Sent single-quoted (it holds no single quote) and run with sh.
secs=$1 me=$2 peer=$3 peer_ip=$4 my_hcas=$5 peer_hcas=$6
if ! command -v ib_write_bw >/dev/null 2>&1; then
  echo "# rail-check: error on $me: ib_write_bw (perftest) is not in the image"
  exit 0
fi
if [ -z "$peer_ip" ]; then
  echo "# rail-check: error on $me: no pod IP for the next worker ($peer)"
  exit 0
fi
tmp=$(mktemp -d)
bw() {
  cpus=$(cat "/sys/class/infiniband/$1/device/local_cpulist" 2>/dev/null)
  pin=
  if [ -n "$cpus" ] && taskset -c "$cpus" true 2>/dev/null; then pin="taskset -c $cpus"; fi
  timeout "$3" $pin ib_write_bw -d "$1" -p "$2" -D "$secs" -s 65536 -q 4 -F --report_gbits $4
}
r=0
set -- $peer_hcas
for hca in $my_hcas; do
  peer_hca=${1:-unknown}
  if [ $# -gt 0 ]; then shift; fi
  #: 18515: perftest's default port; rail r uses 18515 + r.
  port=$((18515 + r))
  bw "$hca" "$port" $((secs + 60)) >"$tmp/server" 2>&1 &
  server=$!
  sleep "${RAIL_CHECK_SETTLE_S:-2}"
  echo "# rail-check: rail $r client $me $hca server $peer $peer_hca"
  tries=15
  while :; do
    bw "$hca" "$port" $((secs + 60)) "$peer_ip" >"$tmp/client" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] || [ "$tries" -le 1 ]; then break; fi
    tries=$((tries - 1))
    sleep "${RAIL_CHECK_SETTLE_S:-2}"
  done
  if [ "$rc" -eq 0 ] && grep -q "BW average" "$tmp/client"; then
    grep -A 1 "BW average" "$tmp/client"
  else
    cat "$tmp/client"
  fi
  echo "# rail-check: end rail $r client $me exit $rc"
  wait "$server"
  src=$?
  if [ "$src" -ne 0 ]; then
    said=$(tail -n 1 "$tmp/server")
    echo "# rail-check: error on $me: ib_write_bw server on rail $r ($hca) exited $src: $said"
  fi
  r=$((r + 1))
done
rm -rf "$tmp"
