# shellcheck shell=bash
dev=${*: -1}; force=0
for a in "$@"; do [ "$a" = -f ] && force=1; done
[ -e "$dev" ] || { echo "mkfs.xfs: cannot open $dev: No such file or directory" >&2; exit 1; }
if [ -e "$S/fs/$(key "$dev")" ] && [ "$force" = 0 ]; then
  echo "mkfs.xfs: $dev appears to contain an existing filesystem." >&2
  exit 1
fi
make_fs xfs "$dev"
