# shellcheck shell=bash
#: One of the approver's files, written only when it differs; a change marks the approver's
#: timer for (re)enabling (install.sh).
CONTENT="$(cat <<'CONTENT'
# @text@
CONTENT
)"
if write_if_changed @path@ "$CONTENT"; then
  chmod @mode@ @path@; mark kubelet-serving
fi
