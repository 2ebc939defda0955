#!/bin/bash
# Test stub: records its argv, then simulates just enough state.
set -u
S=/stub/state
me=${0##*/}
{ printf '%s' "$me"; for a in "$@"; do printf '\t%s' "$a"; done; printf '\n'; } >> "$S/calls.log"
if [ -e "$S/fail/$me" ] || [ -e "$S/fail/$me ${1-}" ]; then
  rm -f "$S/fail/$me" "$S/fail/$me ${1-}"
  echo "$me: simulated failure" >&2; exit 1
fi
# shellcheck disable=SC2317  # unused in the stubs that keep no per-device state
esc() { printf '%s' "${1//\//_}"; }
# shellcheck disable=SC2317  # unused in the stubs that keep no per-device state
key() { esc "$(readlink -f "$1")"; }  # state is kept per device, whatever path names it
# shellcheck disable=SC2317  # unused in the stubs that keep no per-device state
make_fs() {  # type dev: a filesystem with a UUID that follows from the device
  local uuid
  uuid=$(printf '%s' "$(readlink -f "$2")" | md5sum | cut -c1-32 \
    | sed 's/\(.\{8\}\)\(.\{4\}\)\(.\{4\}\)\(.\{4\}\)/\1-\2-\3-\4-/')
  printf '%s %s %s\n' "$1" "$uuid" "$(readlink -f "$2")" > "$S/fs/$(key "$2")"
}
