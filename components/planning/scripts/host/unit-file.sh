# shellcheck shell=bash
#: One file of a program the control planes run on a timer (the kubelet-serving approver, the
#: quarantine), written only when it differs; a change marks the program's timer for
#: (re)enabling.
CONTENT="$(cat <<'CONTENT'
# @text@
CONTENT
)"
if write_if_changed @path@ "$CONTENT"; then
  chmod @mode@ @path@; mark @program@
fi
