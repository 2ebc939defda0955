# shellcheck shell=bash
# `openssl rand -hex N`: N random bytes as hex, like the real one; anything else: nothing.
if [ "${1-}" = rand ] && [ "${2-}" = -hex ]; then
  od -An -N"$3" -tx1 /dev/urandom | tr -d ' \n'; echo
fi
