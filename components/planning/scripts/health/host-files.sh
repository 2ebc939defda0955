# shellcheck shell=bash disable=SC2034
# The host's files: HEALTH_ROOT prefixes /sys and /proc (the host's / where the check runs in
# a pod, a fixture tree in the tests).
ROOT="${HEALTH_ROOT:-}"

# attr FILE: a sysfs attribute's first line, or nothing when it is absent.
attr() {
  local value=""
  [ -r "$1" ] && read -r value <"$1"
  printf '%s' "$value"
}

# joined SEPARATOR ITEM...: the items with SEPARATOR between them.
joined() {
  local sep=$1 out="" item
  shift
  for item in "$@"; do out="${out:+$out$sep}$item"; done
  printf '%s' "$out"
}
