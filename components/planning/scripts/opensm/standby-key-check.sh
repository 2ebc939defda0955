# shellcheck shell=bash disable=SC2034,SC2154
#: A standby's staged opensm.conf: the SM_Key compared with the installed one in place, never
#: on a command line.
if [ -e @path@ ] && [ "$(grep '^sm_key ' "$stage/@i@" || true)" != "$(grep '^sm_key ' @path@ || true)" ]; then sm_key_changed=1; fi
