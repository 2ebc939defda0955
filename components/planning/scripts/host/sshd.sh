# shellcheck shell=bash
#: A step of the host preparation script; its upper-case variables come from the generated
#: header (components/planning/host_scripts.py).

# --- SSH daemon: key logins only, never root -------------------------------------------------
sshd_dropin=/etc/ssh/sshd_config.d/10-gpu-cluster.conf
if [ ! -f "$sshd_dropin" ] || [ "$(cat "$sshd_dropin")" != "$SSHD_CONFIG" ]; then
  # Staged, tested, then installed: sshd never reads an invalid file of ours.
  if ! sshd -t; then
    echo "sshd: its configuration is invalid before any change (sshd -t above);" \
      "fix it by hand, then rerun" >&2
    exit 1
  fi
  mkdir -p /etc/ssh/sshd_config.d
  sshd_staged="$(mktemp /etc/ssh/sshd_config.d/.10-gpu-cluster.XXXXXX)"  # not *.conf: not read
  printf '%s\n' "$SSHD_CONFIG" > "$sshd_staged"
  chmod 0644 "$sshd_staged"
  if ! sshd -t -f "$sshd_staged"; then
    rm -f "$sshd_staged"
    echo "sshd: sshd -t rejects the rendered $sshd_dropin; nothing was changed" >&2
    exit 1
  fi
  sshd_previous=""
  if [ -f "$sshd_dropin" ]; then
    sshd_previous="$(mktemp /etc/ssh/.10-gpu-cluster.previous.XXXXXX)"
    cp -p "$sshd_dropin" "$sshd_previous"
  fi
  mv -f "$sshd_staged" "$sshd_dropin"
  if ! sshd -t; then  # valid alone, not with the rest: put the previous state back
    if [ -n "$sshd_previous" ]; then mv -f "$sshd_previous" "$sshd_dropin"
    else rm -f "$sshd_dropin"; fi
    echo "sshd: sshd -t rejects the configuration with the rendered $sshd_dropin;" \
      "the previous state is back" >&2
    exit 1
  fi
  rm -f "$sshd_previous"
  mark sshd
fi
sshd_reload() {  # an inactive ssh.service (socket activation) reads the files when it starts
  if systemctl is-active --quiet ssh; then systemctl reload ssh; fi
}
settle sshd sshd_reload
# What sshd really uses: a value read before ours (a file sorting before 10-, or sshd_config
# setting it above its Include) would win.
sshd_effective="$(sshd -T)"
while read -r key want; do
  case "$key" in ''|'#'*) continue ;; esac
  have="$(awk -v k="${key,,}" '$1 == k { print $2; exit }' <<<"$sshd_effective")"
  if [ "$have" != "${want,,}" ]; then
    echo "sshd: $key is ${have:-unset} in effect, not $want: a setting read before" \
      "$sshd_dropin wins (sshd uses the first value it reads)" >&2
    echo "  fix: remove it (grep -ri '^ *$key' /etc/ssh/sshd_config /etc/ssh/sshd_config.d)," \
      "or make sshd_config include sshd_config.d/*.conf before it" >&2
    exit 1
  fi
done <<<"$SSHD_CONFIG"
