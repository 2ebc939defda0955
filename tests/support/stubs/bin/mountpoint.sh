# shellcheck shell=bash
[ -e "$S/mounts/$(esc "${*: -1}")" ]
