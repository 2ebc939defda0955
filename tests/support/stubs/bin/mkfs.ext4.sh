# shellcheck shell=bash
dev=${*: -1}
[ -e "$dev" ] || { echo "mke2fs: No such file or directory: $dev" >&2; exit 1; }
make_fs ext4 "$dev"
