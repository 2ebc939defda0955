# shellcheck shell=bash
# findmnt -rn -o SOURCE,TARGET: what the mount stub (and the fake boot) mounted.
for f in "$S"/mounts/*; do [ -e "$f" ] && cat "$f"; done
exit 0
