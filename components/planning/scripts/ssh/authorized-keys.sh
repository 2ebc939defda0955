#!/usr/bin/env bash
# Authorised SSH keys of @user@ — rendered by gpu-cluster; do not edit.
set -euo pipefail
USER_NAME=@user@
STATE=@state@
WANTED="$(cat <<'KEYS'
# @keys@
KEYS
)"

if [ -z "$WANTED" ]; then
  echo "no SSH key to authorise: refusing to lock every key out" >&2
  exit 1
fi
home="$(getent passwd "$USER_NAME" | cut -d: -f6)"
if [ -z "$home" ]; then
  echo "no user $USER_NAME on this host (fix: cluster.sshUser)" >&2
  exit 1
fi
file="$home/.ssh/authorized_keys"
ids() { awk 'NF >= 2 && $1 !~ /^#/ { print $1 " " $2 }'; }
wanted_ids="$(ids <<<"$WANTED")"
managed_ids="$(cat "$STATE" 2>/dev/null || true)"
current="$(cat "$file" 2>/dev/null || true)"
# Keep every line that holds neither a key we manage now nor one we managed before (matched
# on the base64 blob, whatever options or comment the line has); then the wanted keys.
drop="$(printf '%s\n%s\n' "$wanted_ids" "$managed_ids" | awk 'NF >= 2 { print $2 }' \
  | sort -u)"
kept="$(DROP="$drop" awk '
  BEGIN { n = split(ENVIRON["DROP"], d, "\n"); for (i = 1; i <= n; i++) skip[d[i]] = 1 }
  { for (i = 1; i <= NF; i++) if ($i in skip) next; print }' <<<"$current")"
next_file="$(printf '%s\n%s\n' "$kept" "$WANTED" | sed '/^$/d')"
removed="$(comm -23 <(sort -u <<<"$managed_ids" | sed '/^$/d') <(sort -u <<<"$wanted_ids"))"
if [ "$next_file" = "$(sed '/^$/d' <<<"$current")" ]; then
  echo "authorized_keys of $USER_NAME unchanged"
else
  mkdir -p "$home/.ssh"
  chmod 700 "$home/.ssh"
  tmp="$(mktemp "$home/.ssh/.authorized_keys.XXXXXX")"
  printf '%s\n' "$next_file" > "$tmp"
  chmod 600 "$tmp"
  chown "$(stat -c %u:%g "$home")" "$tmp" "$home/.ssh"
  mv -f "$tmp" "$file"
  echo "authorized_keys of $USER_NAME: $(wc -l <<<"$wanted_ids") managed key(s)"
  if [ -n "$removed" ]; then
    echo "removed: $(awk '{ print $1 }' <<<"$removed" | paste -sd, -) key(s)" \
      "no longer listed"
  fi
fi
mkdir -p "$(dirname "$STATE")"
printf '%s\n' "$wanted_ids" > "$STATE"
