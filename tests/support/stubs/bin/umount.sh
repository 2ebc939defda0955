# shellcheck shell=bash
rm -f "$S/mounts/$(esc "${*: -1}")"
