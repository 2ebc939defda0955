# shellcheck shell=bash
# sysctl -n KEY: the last value the sysctl.d files (in name order), then /etc/sysctl.conf,
# give it, as `sysctl --system` leaves it; else the kernel's default.
[ "${1-}" = -n ] || exit 0
key=$2 value=''
for f in /etc/sysctl.d/*.conf /etc/sysctl.conf; do  # the glob is in name order
  [ -f "$f" ] || continue
  v=$(sed -n "s/^[[:space:]]*${key//./\\.}[[:space:]]*=[[:space:]]*//p" "$f" | tail -1)
  [ -z "$v" ] || value=$v
done
if [ -z "$value" ]; then
  case "$key" in
    kernel.keys.root_maxkeys) value=200 ;;
    kernel.keys.root_maxbytes) value=20000 ;;
    *) value=0 ;;
  esac
fi
printf '%s\n' "$value"
