#!/usr/bin/env bash
# This node's InfiniBand rails against the fabric plan, one check per call:
#   ib-rails.sh state  RAILS_DIR                      port state ACTIVE, physical state LinkUp
#   ib-rails.sh rate   RAILS_DIR GBPS                 an active port's rate (speed x width)
#   ib-rails.sh errors RAILS_DIR GBPS BER LINK_DOWNED error counters since the last run
# RAILS_DIR/$NODE_NAME lists the node's rails as planned, one per line, tab-separated:
#   rail hca leaf leaf_port cable node_port
# so a message names the switch port and cable to look at, not only the HCA.
set -u
# include: common.sh
# include: host-files.sh

mode="${1:-}"
rails_file="${2:-}/${NODE_NAME:-$(hostname)}"
[ -r "$rails_file" ] || unknown "no planned rails at $rails_file"
ports="$ROOT/sys/class/infiniband"
# Where the counters are kept between runs (a hostPath on a node).
STATE_DIR="${HEALTH_STATE:-/var/lib/gpu-cluster/health}"

# state_of PORT_DIR: what is wrong with the port's state, or nothing.
state_of() {
  local state phys
  state="$(attr "$1/state")"
  phys="$(attr "$1/phys_state")"
  [ -n "$state" ] || { printf 'no such port'; return; }
  case "$state $phys" in
    *ACTIVE*LinkUp) ;;
    *) printf 'port %s, %s' "${state#*: }" "${phys#*: }" ;;
  esac
}

# rate_of PORT_DIR GBPS: what is wrong with an active port's rate, or nothing. The kernel
# writes the rate as "<Gb/s> Gb/sec (<width>X <speed>)" (drivers/infiniband/core/sysfs.c), so
# a lane lost (1X) or a slower speed both show as a lower number.
rate_of() {
  local rate
  [ -z "$(state_of "$1")" ] || return 0
  rate="$(attr "$1/rate")"
  awk -v r="${rate%% *}" -v want="$2" 'BEGIN { exit !(r + 0 < want + 0) }' &&
    printf '%s, planned %s Gb/sec' "$rate" "$2"
}

# errors_of PORT_DIR HCA GBPS BER LINK_DOWNED: counters that rose past their limit since the
# last run (kept in STATE_DIR/<hca>); nothing on the first run or after a counter reset.
errors_of() {
  local dir=$1/counters now sym ld lli ebo before
  now="${EPOCHREALTIME:-$(date +%s)}"
  sym="$(attr "$dir/symbol_error")"
  ld="$(attr "$dir/link_downed")"
  lli="$(attr "$dir/local_link_integrity_errors")"
  ebo="$(attr "$dir/excessive_buffer_overrun_errors")"
  before="$(attr "$STATE_DIR/$2")"
  printf '%s %s %s %s %s\n' "$now" "${sym:-0}" "${ld:-0}" "${lli:-0}" "${ebo:-0}" \
    >"$STATE_DIR/$2"
  [ -n "$before" ] || return 0
  # Symbol errors against the bit error rate at the planned rate over the time between runs;
  # link_downed against its allowance; the other two count threshold crossings the IBTA
  # defines (LocalPhyErrors, OverrunErrors), so any increase is one.
  awk -v b="$before" -v n="$now ${sym:-0} ${ld:-0} ${lli:-0} ${ebo:-0}" -v gbps="$3" \
    -v ber="$4" -v downs="$5" 'BEGIN {
      split(b, o, " "); split(n, c, " "); secs = c[1] - o[1]; if (secs < 1) secs = 1
      for (i = 2; i <= 5; i++) if (c[i] < o[i]) exit  # cleared or wrapped: a new baseline
      allowed = ber * gbps * 1e9 * secs; out = ""
      if (c[2] - o[2] > allowed)
        out = sprintf("symbol_error rose by %d in %ds (at most %.0f at BER %g)", c[2] - o[2], secs, allowed, ber)
      if (c[3] - o[3] > downs) out = out (out ? ", " : "") sprintf("link_downed rose by %d", c[3] - o[3])
      if (c[4] > o[4]) out = out (out ? ", " : "") sprintf("local_link_integrity_errors rose by %d", c[4] - o[4])
      if (c[5] > o[5]) out = out (out ? ", " : "") sprintf("excessive_buffer_overrun_errors rose by %d", c[5] - o[5])
      printf "%s", out }'
}

case "$mode" in
  state | rate | errors) ;;
  *) unknown "usage: ib-rails.sh state|rate|errors RAILS_DIR [GBPS [BER LINK_DOWNED]]" ;;
esac
[ "$mode" != errors ] || mkdir -p "$STATE_DIR" || unknown "cannot write $STATE_DIR"
found=()
rails=0
while IFS=$'\t' read -r rail hca leaf leaf_port cable node_port; do
  case "$rail" in "" | "#"*) continue ;; esac
  rails=$((rails + 1))
  port="$ports/$hca/ports/1"
  case "$mode" in
    state) what="$(state_of "$port")" ;;
    rate) what="$(rate_of "$port" "${3:-}")" ;;
    errors) what="$(errors_of "$port" "$hca" "${3:-}" "${4:-}" "${5:-0}")" ;;
  esac
  [ -z "$what" ] || found+=("rail $rail $hca: $what ($leaf port $leaf_port, cable $cable, node port $node_port)")
done <"$rails_file"
[ "$rails" -gt 0 ] || unknown "no rails planned in $rails_file"
[ "${#found[@]}" -eq 0 ] || problem "$(joined '; ' "${found[@]}")"
case "$mode" in
  state) ok "all $rails rails ACTIVE and LinkUp" ;;
  rate) ok "all $rails active rails at ${3:-} Gb/sec" ;;
  errors) ok "no rail's error counters rose past their limits" ;;
esac
