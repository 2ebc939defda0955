# shellcheck shell=bash
# Arrays live in the fake /sys/block (slaves, holders, md/level, md/uuid), their device nodes
# in /stub/state/dev (bound over /dev on every run); superblocks in $S/disks/<member>.
start_array() {  # node level uuid member...: what the kernel shows once an array runs
  local node=$1 level=$2 uuid=$3 n=127 md d c name total=0; shift 3
  while [ -e "/sys/block/md$n" ]; do n=$((n - 1)); done
  md=md$n
  mkdir -p "/sys/block/$md/slaves" "/sys/block/$md/holders" "/sys/block/$md/md"
  echo "$level" > "/sys/block/$md/md/level"; echo "$uuid" > "/sys/block/$md/md/uuid"
  for d in "$@"; do
    c=$(readlink -f "$d"); name=${c##*/}
    ln -s "../../$name" "/sys/block/$md/slaves/$name"
    mkdir -p "/sys/block/$name/holders"; ln -s "../../$md" "/sys/block/$name/holders/$md"
    echo "$uuid $level" > "$S/disks/$(esc "$c")"
    total=$((total + $(cat "/sys/block/$name/size")))
  done
  echo "$total" > "/sys/block/$md/size"
  : > "$S/dev/$md"; : > "/dev/$md"
  mkdir -p "${node%/*}"; ln -sfn "../$md" "$node"
  echo "mdadm: array $node started." >&2
}
mode=${1-}; shift || true
case "$mode" in
  --examine|-E)
    rc=0
    for d in "$@"; do
      sleep 0.02  # reading a superblock is disk I/O; output arrives device by device
      if [ -e "$S/disks/$(key "$d")" ]; then
        read -r uuid level < "$S/disks/$(key "$d")"
        printf '%s:\n          Magic : a92b4efc\n     Array UUID : %s\n     Raid Level : %s\n' \
          "$d" "$uuid" "$level"
      else
        echo "mdadm: No md superblock detected on $d." >&2; rc=1
      fi
    done
    exit "$rc" ;;
  --create|-C)
    md=$1; shift; devs=() level=raid0
    for a in "$@"; do
      case "$a" in --level=*) level=raid${a#--level=} ;; -*) ;; *) devs+=("$a") ;; esac
    done
    for d in "${devs[@]}"; do
      [ -e "$d" ] || { echo "mdadm: cannot open $d: No such file or directory" >&2; exit 1; }
    done
    start_array "$md" "$level" "$(printf '%s' "${devs[*]}" | md5sum | cut -c1-32 \
      | sed 's/.\{8\}/&:/g; s/:$//')" "${devs[@]}" ;;
  --assemble|-A)
    md=$1; shift; uuid='' level=''
    for d in "$@"; do
      [ -e "$S/disks/$(key "$d")" ] || { echo "mdadm: no RAID superblock on $d" >&2; exit 1; }
      read -r u l < "$S/disks/$(key "$d")"
      [ -z "$uuid" ] || [ "$u" = "$uuid" ] || { echo "mdadm: $d is not in $uuid" >&2; exit 1; }
      uuid=$u level=$l
    done
    start_array "$md" "$level" "$uuid" "$@" ;;
  --detail|-D)
    if [ "${1-}" = --scan ]; then
      for m in /sys/block/md*/md; do
        [ -e "$m" ] || continue; m=${m%/md}
        printf 'ARRAY /dev/%s metadata=1.2 UUID=%s\n' "${m##*/}" "$(cat "$m/md/uuid")"
      done
      exit 0
    fi
    m=/sys/block/$(basename "$(readlink -f "$1")")
    [ -d "$m/md" ] || { echo "mdadm: cannot open $1: No such file or directory" >&2; exit 1; }
    printf '%s:\n     Raid Level : %s\n           UUID : %s\n' "$1" "$(cat "$m/md/level")" \
      "$(cat "$m/md/uuid")"
    for s in "$m"/slaves/*; do printf '       active sync   /dev/%s\n' "${s##*/}"; done ;;
esac
exit 0
