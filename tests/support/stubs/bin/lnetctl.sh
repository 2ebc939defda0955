# shellcheck shell=bash
# LNet as lnetctl keeps it: $S/lnet/configured after `lnet configure`, one file per net
# (what `import` read for it) in $S/lnet/nets; `export` prints them. Importing a net that
# exists fails, as adding an NI that exists does.
mkdir -p "$S/lnet/nets"
case "${1-} ${2-}" in
  "lnet configure") touch "$S/lnet/configured"; exit 0 ;;
  "lnet unconfigure") rm -rf "$S/lnet/configured" "$S/lnet/nets"; exit 0 ;;
  "net del")
    { [ "${3-}" = --net ] && [ -e "$S/lnet/nets/${4-}" ]; } \
      || { echo "del: no such net ${4-}" >&2; exit 1; }
    rm -f "$S/lnet/nets/$4"; exit 0 ;;
esac
case "${1-}" in
  import)
    [ -e "$S/lnet/configured" ] || { echo "import: LNet is not configured" >&2; exit 1; }
    [ -f "${2-}" ] || { echo "import: cannot open ${2-}" >&2; exit 1; }
    nets=$(sed -n 's/^- net type: //p' "$2")
    [ -n "$nets" ] || { echo "import: no net in $2" >&2; exit 1; }
    for n in $nets; do
      [ ! -e "$S/lnet/nets/$n" ] || { echo "add: $n: File exists" >&2; exit 1; }
    done
    for n in $nets; do cp "$2" "$S/lnet/nets/$n"; done ;;
  export)
    for f in "$S"/lnet/nets/*; do [ -e "$f" ] && cat "$f"; done ;;
esac
exit 0
