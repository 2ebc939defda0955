# shellcheck shell=bash
# ip -o -4 addr show to ADDR: the interfaces in $S/addresses ("<name> <address>/<len>" lines,
# Sandbox.set_addresses) holding ADDR; without that file, eno1 holds whatever address is
# asked for (the host's management address). Anything else: nothing.
want=''
prev=''
for a in "$@"; do [ "$prev" = to ] && want=${a%/32}; prev=$a; done
[ -n "$want" ] || exit 0
if [ -e "$S/addresses" ]; then
  n=2
  while read -r name cidr; do
    [ "${cidr%/*}" = "$want" ] || continue
    printf '%d: %s    inet %s scope global %s\\       valid_lft forever\n' "$n" "$name" "$cidr" \
      "${name%@*}"
    n=$((n + 1))
  done < "$S/addresses"
else
  printf '2: eno1    inet %s/16 scope global eno1\\       valid_lft forever\n' "$want"
fi
