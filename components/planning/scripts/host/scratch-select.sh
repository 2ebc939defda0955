# shellcheck shell=bash
#: A step of the host preparation script; its upper-case variables come from the generated
#: header (components/planning/host_scripts.py).

# --- local NVMe scratch, 1 of 2 (reads only): the data drives and what is on them ----------
scratch_stop() {  # the reason and the fix, one line each; nothing has been changed yet
  printf 'scratch: %s\n' "$@" >&2
  echo "scratch: stopped before changing anything on this host" >&2
  exit 1
}
scratch_disk() {  # kernel name -> its whole disk (a partition's parent, else itself)
  local part
  for part in /sys/block/*/"$1"; do
    if [ -d "$part" ]; then basename "$(dirname "$part")"; return 0; fi
  done
  printf '%s\n' "$1"
}
scratch_disks_under() {  # kernel name -> every whole disk under it (md, dm, partitions)
  local disk slave found=0
  disk="$(scratch_disk "$1")"
  for slave in /sys/block/"$disk"/slaves/*; do
    if [ -e "$slave" ]; then found=1; scratch_disks_under "$(basename "$slave")"; fi
  done
  if [ "$found" = 0 ]; then printf '%s\n' "$disk"; fi
}
scratch_model_ok() {  # model -> 0 when it contains one of DATA_DRIVE_MODELS (or none is set)
  local want models
  [ -n "$DATA_DRIVE_MODELS" ] || return 0
  IFS='|' read -r -a models <<<"$DATA_DRIVE_MODELS"
  for want in "${models[@]}"; do
    if [[ $1 == *"$want"* ]]; then return 0; fi
  done
  return 1
}
scratch_fstab_spec() {  # what /etc/fstab mounts at the scratch mount point, if anything
  awk -v mp="$SCRATCH_MOUNT" '$1 !~ /^#/ && $2 == mp { print $1; exit }' /etc/fstab
}
scratch_fstab_ok() {  # device -> 0 when fstab mounts nothing, or that device, there
  local spec
  spec="$(scratch_fstab_spec)"
  case "$spec" in
    ''|/dev/md/scratch) return 0 ;;  # no line yet, or the line this script once wrote
    UUID=*) [ -e "$1" ] && [ "${spec#UUID=}" = "$(blkid -p -s UUID -o value "$1" || true)" ] ;;
    *) [ -e "$1" ] && [ "$(readlink -f "$spec")" = "$(readlink -f "$1")" ] ;;
  esac
}

# The OS drives: every whole disk under /, /boot, /boot/efi, /usr, /var or a swap device, through
# partitions and md/dm arrays (DGX OS: the M.2 RAID1). Never taken, whatever size or model.
scratch_mounts="$(findmnt -rn -o SOURCE,TARGET)"
scratch_swaps="$(swapon --show=NAME --noheadings)"
scratch_mounted=()  # "<kernel name> <mount point>" of every mounted block device
scratch_os=" "
while read -r src target; do
  case "$src" in /dev/*) ;; *) continue ;; esac
  src="$(basename "$(readlink -f "${src%%\[*}")")"  # /dev/sda2[/@]: a btrfs subvolume
  scratch_mounted+=("$src $target")
  case "$target" in
    /|/boot|/boot/efi|/usr|/var) scratch_os+="$(scratch_disks_under "$src" | tr '\n' ' ')" ;;
  esac
done <<<"$scratch_mounts"
while read -r src; do
  case "$src" in /dev/*) ;; *) continue ;; esac
  scratch_os+="$(scratch_disks_under "$(basename "$(readlink -f "$src")")" | tr '\n' ' ')"
done <<<"$scratch_swaps"

# Every NVMe namespace once, named by its shortest <model>_<serial> link (a wwid link only
# when there is no other); partitions are skipped.
declare -A scratch_link=()
for link in /dev/disk/by-id/nvme-*; do
  case "$link" in *-part[0-9]*) continue ;; esac
  [ -L "$link" ] || continue
  name="$(basename "$(readlink -f "$link")")"
  [ -e "/sys/block/$name/size" ] || continue
  best="${scratch_link[$name]-}"
  case "${link#/dev/disk/by-id/nvme-}" in
    eui.*|nvme.*|uuid.*) if [ -z "$best" ]; then scratch_link[$name]=$link; fi ;;
    *) case "${best#/dev/disk/by-id/nvme-}" in
         ''|eui.*|nvme.*|uuid.*) scratch_link[$name]=$link ;;
         *) if [ "${#link}" -lt "${#best}" ]; then scratch_link[$name]=$link; fi ;;
       esac ;;
  esac
done
scratch_found="$(for name in "${!scratch_link[@]}"; do
  printf '%s %s\n' "${scratch_link[$name]}" "$name"; done | sort)"

# The data drives: not an OS drive, the configured size (and model), in by-id order.
scratch_names=() scratch_ids=() scratch_report=()
while read -r link name; do
  [ -n "$name" ] || continue
  bytes=$(( $(cat "/sys/block/$name/size") * 512 ))
  model=""
  read -r model < "/sys/block/$name/device/model" || true
  why=""
  if [[ $scratch_os == *" $name "* ]]; then
    why="OS drive (holds /, /boot or swap): never taken"
  elif (( bytes < DATA_DRIVE_MIN_BYTES || bytes > DATA_DRIVE_MAX_BYTES )); then
    why="not $DATA_DRIVE_SIZE"
  elif ! scratch_model_ok "$model"; then
    why="model is not $DATA_DRIVE_MODELS"
  fi
  scratch_report+=("$(printf '  %s (%s, %d GB, %s): %s' "$link" "$name" \
    $((bytes / 1000000000)) "${model:-model unknown}" "${why:-data drive}")")
  if [ -z "$why" ]; then scratch_names+=("$name"); scratch_ids+=("$link"); fi
done <<<"$scratch_found"
if [ "${#scratch_names[@]}" -ne "$DATA_DRIVE_COUNT" ]; then
  scratch_stop "found ${#scratch_names[@]} data drives of $DATA_DRIVE_SIZE, expected \
$DATA_DRIVE_COUNT; the NVMe drives in /dev/disk/by-id:" "${scratch_report[@]}" \
    "fix: replace or reseat the missing drive, or make gpuNodes.template.dataDrives \
describe what this host has"
fi

# What holds them: nothing, or exactly one md array made of exactly these drives.
scratch_held=" "
for name in "${scratch_names[@]}"; do
  for holder in /sys/block/"$name"/holders/* /sys/block/"$name"/"$name"*/holders/*; do
    [ -e "$holder" ] || continue
    holder="$(basename "$holder")"
    if [[ $scratch_held != *" $holder "* ]]; then scratch_held+="$holder "; fi
  done
  for entry in "${scratch_mounted[@]}"; do
    if [ "$(scratch_disk "${entry%% *}")" = "$name" ]; then
      scratch_stop "data drive ${scratch_link[$name]} is mounted directly at ${entry#* }" \
        "fix: unmount it and remove its /etc/fstab line if it is free, or leave it out of \
gpuNodes.template.dataDrives"
    fi
  done
done
read -r -a scratch_holders <<<"$scratch_held"
scratch_want="$(printf '%s\n' "${scratch_names[@]}" | sort | tr '\n' ' ')"
scratch_md=""
if [ "${#scratch_holders[@]}" -gt 0 ]; then
  scratch_md="${scratch_holders[0]}"
  members="$(scratch_disks_under "$scratch_md" | sort -u | tr '\n' ' ')"
  if [ "${#scratch_holders[@]}" -gt 1 ] || [ ! -d "/sys/block/$scratch_md/md" ] \
      || [ "$members" != "$scratch_want" ]; then
    scratch_stop "the data drives are held by${scratch_held}(/dev/$scratch_md spans: $members)" \
      "an array is adopted only when it is made of exactly the data drives: $scratch_want" \
      "fix: free the drives by hand, or make gpuNodes.template.dataDrives match that array"
  fi
fi

if [ -n "$scratch_md" ]; then
  # Already running on exactly these drives (DGX OS's RAID0 at /raid, or ours): adopted as it
  # is. It is never re-created, and formatted only if this script created it and its own
  # mkfs was interrupted.
  scratch_action=adopt scratch_dev="/dev/$scratch_md"
  if [ "$(readlink -f /dev/md/scratch)" = "$scratch_dev" ]; then scratch_dev=/dev/md/scratch; fi
  if ! blkid -p "$scratch_dev" >/dev/null 2>&1 \
      && [ ! -e /var/lib/gpu-cluster/scratch-mkfs.pending ]; then
    scratch_stop "$scratch_dev on the data drives has no filesystem and was not created by \
this script, which formats only an array it has just created" \
      "fix: make a filesystem on it by hand if it is free"
  fi
  for entry in "${scratch_mounted[@]}"; do
    if [ "${entry%% *}" = "$scratch_md" ] && [ "${entry#* }" != "$SCRATCH_MOUNT" ]; then
      scratch_stop "$scratch_dev (the array on the data drives) is mounted at ${entry#* }, \
not at $SCRATCH_MOUNT" \
        "fix: set storage.scratch.mountPoint: ${entry#* } to use it where it is (DGX OS \
mounts its data array at /raid), or unmount it and remove its fstab line to move it"
    fi
  done
else
  # Not running. Every drive carries the same array's superblock (a reboot before it was
  # assembled, an OS reinstall): assembled, never re-created. No drive carries anything:
  # created. Anything else stops here; the script never writes over a drive that holds data.
  scratch_dev=/dev/md/scratch
  examined="$(mdadm --examine "${scratch_ids[@]}" 2>/dev/null || true)"
  superblocks="$(grep -c 'Array UUID' <<<"$examined" || true)"
  arrays="$(sed -n 's/^ *Array UUID : //p' <<<"$examined" | sort -u | grep -c . || true)"
  if [ "$superblocks" = "$DATA_DRIVE_COUNT" ] && [ "$arrays" = 1 ]; then
    scratch_action=assemble
  elif [ "$superblocks" = 0 ]; then
    scratch_action=create
    scratch_busy=()
    for i in "${!scratch_ids[@]}"; do
      found="$(blkid -p "${scratch_ids[$i]}" 2>/dev/null || true)"
      for part in /sys/block/"${scratch_names[$i]}"/"${scratch_names[$i]}"*; do
        if [ -e "$part" ]; then found+=" partition $(basename "$part")"; fi
      done
      if [ -n "$found" ]; then scratch_busy+=("  ${scratch_ids[$i]}: $found"); fi
    done
    if [ "${#scratch_busy[@]}" -gt 0 ]; then
      scratch_stop "data drives that are not blank:" "${scratch_busy[@]}" \
        "fix: if what they hold is disposable, clear them deliberately (wipefs -a <drive>)"
    fi
  else
    scratch_stop "$superblocks of $DATA_DRIVE_COUNT data drives carry md superblocks, of \
$arrays array(s): not one complete array to assemble" \
      "fix: inspect them with mdadm --examine; clear stale superblocks deliberately \
(mdadm --zero-superblock <drive>) once their data is known to be disposable"
  fi
fi
for entry in "${scratch_mounted[@]}"; do
  if [ "${entry#* }" = "$SCRATCH_MOUNT" ] && [ "${entry%% *}" != "$scratch_md" ]; then
    scratch_stop "$SCRATCH_MOUNT already mounts /dev/${entry%% *}, not the data drives' array" \
      "fix: choose another storage.scratch.mountPoint, or unmount it"
  fi
done
if [ "$scratch_action" != assemble ] && ! scratch_fstab_ok "$scratch_dev"; then
  scratch_stop "/etc/fstab mounts $(scratch_fstab_spec) at $SCRATCH_MOUNT, not $scratch_dev" \
    "fix: remove that line, or choose another storage.scratch.mountPoint"
fi
log "scratch: $scratch_action $scratch_dev on ${scratch_ids[*]}"
