# shellcheck shell=bash
[ $# -eq 1 ] || { echo "mount: stub mounts only by fstab mount point" >&2; exit 1; }
mp=$1
line=$(awk -v mp="$mp" '$1 !~ /^#/ && $2 == mp' /etc/fstab)
[ -n "$line" ] || { echo "mount: $mp: can't find in /etc/fstab." >&2; exit 1; }
dev=${line%%[[:space:]]*}
if [ "${dev#UUID=}" != "$dev" ]; then
  for f in "$S"/fs/*; do
    [ -e "$f" ] || continue
    read -r _ uuid path < "$f"
    if [ "$uuid" = "${dev#UUID=}" ]; then dev=$path; fi
  done
  [ "${dev#UUID=}" = "$dev" ] || { echo "mount: $mp: can't find $dev." >&2; exit 1; }
fi
[ -e "$dev" ] || { echo "mount: $mp: special device $dev does not exist." >&2; exit 32; }
[ -e "$S/fs/$(key "$dev")" ] || { echo "mount: $mp: wrong fs type on $dev." >&2; exit 32; }
[ -d "$mp" ] || { echo "mount: $mp: mount point does not exist." >&2; exit 32; }
printf '%s %s\n' "$(readlink -f "$dev")" "$mp" > "$S/mounts/$(esc "$mp")"
