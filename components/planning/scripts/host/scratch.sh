# shellcheck shell=bash disable=SC2154
#: scratch_ids, scratch_dev, scratch_action: set by scratch-select.sh, which runs first.

# --- local NVMe scratch, 2 of 2: the array, its filesystem, the mount -------------------------
case "$scratch_action" in
  assemble) mdadm --assemble /dev/md/scratch "${scratch_ids[@]}" ;;
  create)
    mdadm --create /dev/md/scratch --run --level=0 --raid-devices="$DATA_DRIVE_COUNT" \
      "${scratch_ids[@]}"
    mark scratch-mkfs ;;  # the only array this script formats: the one it has just created
esac
# A filesystem there (ours, or the array owner's) is never formatted again; a run that was
# interrupted between create and mkfs finishes the mkfs.
if blkid -p "$scratch_dev" >/dev/null 2>&1; then
  rm -f "$STATE/scratch-mkfs.pending"
else
  settle scratch-mkfs mkfs."$SCRATCH_FS" "$scratch_dev"
fi
if ! blkid -p "$scratch_dev" >/dev/null 2>&1; then
  echo "scratch: $scratch_dev has no filesystem and was not created by this script" >&2
  exit 1
fi
if ! mountpoint -q "$SCRATCH_MOUNT"; then
  if ! scratch_fstab_ok "$scratch_dev"; then
    echo "scratch: /etc/fstab mounts $(scratch_fstab_spec) at $SCRATCH_MOUNT, not \
$scratch_dev; remove that line or choose another storage.scratch.mountPoint" >&2
    exit 1
  fi
  if [ -z "$(scratch_fstab_spec)" ]; then
    printf 'UUID=%s %s %s defaults,noatime,nofail 0 0\n' \
      "$(blkid -p -s UUID -o value "$scratch_dev")" "$SCRATCH_MOUNT" \
      "$(blkid -p -s TYPE -o value "$scratch_dev")" >> /etc/fstab
  fi
  mkdir -p "$SCRATCH_MOUNT"
  mount "$SCRATCH_MOUNT"
fi
