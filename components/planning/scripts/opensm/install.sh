# shellcheck shell=bash disable=SC2154
#: One staged file installed where it differs, leaving the restart-pending mark.
if ! cmp -s "$stage/@i@" @path@; then
  install -m 0600 "$stage/@i@" @path@; touch @pending@
fi
chmod 0600 @path@
