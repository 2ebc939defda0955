#!/usr/bin/env bash
# DCGM's background health watches (PCIe, memory, InfoROM, thermal and power, NVLink, driver,
# NVSwitch, ConnectX), asked of the host engine:  dcgm-health.sh HOST:PORT
# The watches are set once (`dcgmi health --set a`) and stay in the host engine; each run reads
# the verdict (`dcgmi health --check`): "Overall Health" Healthy, Warning or Failure, then each
# entity ("-> <id>") and system ("-> <system> system") with its own (dcgmi Health output).
# A Failure is a problem; a Warning is reported in the message only.
set -u
# include: common.sh
# include: host-tools.sh

host="${1:-}"
[ -n "$host" ] || unknown "usage: dcgm-health.sh HOST:PORT"
watches="$(on_host dcgmi health --host "$host" --fetch 2>&1)" ||
  unknown "DCGM host engine at $host: $(head -n 1 <<<"$watches")"
if ! grep -qE '\|[[:space:]]+On[[:space:]]' <<<"$watches"; then
  out="$(on_host dcgmi health --host "$host" --set a 2>&1)" ||
    unknown "cannot set DCGM health watches at $host: $(head -n 1 <<<"$out")"
fi
report="$(on_host dcgmi health --host "$host" --check 2>&1)" ||
  unknown "dcgmi health --check at $host failed: $(head -n 1 <<<"$report")"
read -r overall found < <(awk -F'|' '
  function cell(i) { v = $i; gsub(/^[ \t]+|[ \t]+$/, "", v); return v }
  cell(2) == "Overall Health" { overall = cell(3); next }
  cell(2) ~ /^-> [0-9]+$/ { entity = cell(2); sub(/^-> /, "", entity); next }
  cell(2) ~ /^-> .* system$/ && cell(3) ~ /^(Failure|Warning)$/ {
    watch = cell(2); sub(/^-> /, "", watch)
    out = out (out ? ", " : "") "GPU " entity " " watch " " cell(3)
  }
  END { print (overall == "" ? "Unknown" : overall), out }' <<<"$report")
case "$overall" in
  Healthy) ok "DCGM health: Healthy" ;;
  Warning) ok "DCGM health: Warning: ${found:-see dcgmi health --check}" ;;
  Failure) problem "DCGM health: Failure: ${found:-see dcgmi health --check}" ;;
  *) unknown "DCGM health at $host: no verdict in dcgmi health --check" ;;
esac
