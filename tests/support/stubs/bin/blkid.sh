# shellcheck shell=bash
# blkid [-p] [-s TAG] [-o value] DEV: a filesystem, or an md member's superblock; exit 2: none.
tag='' value=0 dev=''
while [ $# -gt 0 ]; do
  case "$1" in
    -s) tag=$2; shift ;;
    -o) [ "$2" = value ] && value=1; shift ;;
    -*) ;;
    *) dev=$1 ;;
  esac
  shift
done
[ -n "$dev" ] && [ -e "$dev" ] || exit 2
if [ -e "$S/fs/$(key "$dev")" ]; then
  read -r TYPE UUID _ < "$S/fs/$(key "$dev")"
elif [ -e "$S/disks/$(key "$dev")" ]; then
  read -r UUID _ < "$S/disks/$(key "$dev")"; TYPE=linux_raid_member
else
  exit 2
fi
case "$tag" in
  TYPE|UUID)
    if [ "$value" = 1 ]; then printf '%s\n' "${!tag}"
    else printf '%s="%s"\n' "$tag" "${!tag}"; fi ;;
  *) printf '%s: UUID="%s" TYPE="%s"\n' "$dev" "$UUID" "$TYPE" ;;
esac
