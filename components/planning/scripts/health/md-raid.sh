#!/usr/bin/env bash
# The node's md arrays whole:  md-raid.sh SCRATCH_MEMBERS
# /proc/mdstat lists each array ("mdN : active raid1 nvme1n1[1] nvme0n1[0](F)") and, for the
# redundant levels, its members up ("[2/1] [U_]"). A RAID0, like the NVMe scratch array, shows
# no such line: the kernel marks it "broken" in /sys/block/mdN/md/array_state when a member is
# gone (drivers/md/md.c). SCRATCH_MEMBERS > 0: a RAID0 of that many drives must be there.
set -u
# include: common.sh
# include: host-files.sh

members="${1:-0}"
case "$members" in
  *[!0-9]*) unknown "usage: md-raid.sh SCRATCH_MEMBERS" ;;
esac
[ -r "$ROOT/proc/mdstat" ] || unknown "no $ROOT/proc/mdstat"
found=()
scratch=0
while read -r name _ state level rest; do
  case "$name" in md[0-9]*) ;; *) continue ;; esac
  # "active (auto-read-only) raid1 ...": the level follows the state's note.
  if [[ "$level" == "("* ]]; then read -r level rest <<<"$rest"; fi
  md="$ROOT/sys/block/$name/md"
  array_state="$(attr "$md/array_state")"
  disks="$(attr "$md/raid_disks")"
  [ "$state" = active ] || found+=("$name is $state")
  [ "$array_state" != broken ] || found+=("$name ($level) is broken: a member is gone")
  [[ "$rest" != *"(F)"* ]] || found+=("$name ($level) has a failed member")
  if [ "$level" = raid0 ] && [ "${disks:-0}" = "$members" ]; then scratch=$((scratch + 1)); fi
done < <(grep -E '^md[0-9]+ :' "$ROOT/proc/mdstat")
while read -r name status; do
  found+=("$name is degraded $status")
done < <(awk '/^md[0-9]+ :/ { name = $1 } /\[[0-9]+\/[0-9]+\] \[[U_]*_[U_]*\]/ {
  print name, $(NF); name = "" }' "$ROOT/proc/mdstat")
if [ "$members" -gt 0 ] && [ "$scratch" -eq 0 ]; then
  found+=("no RAID0 of $members drives (the NVMe scratch array) is assembled")
fi
[ "${#found[@]}" -eq 0 ] || problem "$(joined '; ' "${found[@]}")"
ok "every md array is whole"
