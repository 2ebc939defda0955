# shellcheck shell=bash disable=SC2154
#: A staged GUID file: one 0x-prefixed GUID per line, since opensm skips a malformed line
#: silently.
if grep -Evq '^(0x[0-9a-f]{16})?$' "$stage/@i@"; then
  echo "malformed GUID file @path@; nothing installed" >&2; exit 1
fi
