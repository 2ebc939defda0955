# shellcheck shell=bash disable=SC2154
#: The staged opensm.conf: the management keys (apply.sh's OPENSM_KEYS, a secret) appended.
printf '%s\n' "$OPENSM_KEYS" >> "$stage/@i@"
