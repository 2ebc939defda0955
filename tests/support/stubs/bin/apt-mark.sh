# shellcheck shell=bash
verb=${1-}; shift || true
case "$verb" in
  hold) for p in "$@"; do touch "$S/held/$p"; done ;;
  unhold) for p in "$@"; do rm -f "$S/held/$p"; done ;;
  showhold) for p in "$S"/held/*; do [ -e "$p" ] && echo "${p##*/}"; done ;;
esac
exit 0
