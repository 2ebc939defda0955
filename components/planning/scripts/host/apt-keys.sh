# shellcheck shell=bash
#: Functions only (no change): apt repositories whose signing key is pinned by fingerprint. A
#: downloaded key is installed only when it holds exactly that one primary key; an installed
#: keyring is fetched again when it does not hold the pinned key alone, or when that key has
#: expired (a project may extend the expiry of the same key).

apt_sources_changed=0
apt_key_of() {  # key file -> "<fingerprint> <expiry, 0: none>" of its only primary key, else nothing
  gpg --show-keys --with-colons "$1" 2>/dev/null | awk -F: '
    $1 == "pub" { n++; expiry = $7; want = 1; next }
    $1 == "fpr" && want { fpr = $10; want = 0 }
    END { if (n == 1) print fpr, (expiry == "" ? 0 : expiry) }' || true
}
apt_key_current() {  # key file, fingerprint -> 0 when it holds that key alone, unexpired
  local fpr="" expiry=""
  read -r fpr expiry <<<"$(apt_key_of "$1")" || true
  [ "$fpr" = "$2" ] && { [ "${expiry:-0}" = 0 ] || [ "$expiry" -gt "$(date +%s)" ]; }
}
install_pinned_key() {  # label, key URL, fingerprint, keyring: fetched, checked, installed
  local label=$1 url=$2 fpr=$3 keyring=$4 tmp got=""
  if [ -f "$keyring" ] && apt_key_current "$keyring" "$fpr"; then return 0; fi
  tmp="$(mktemp -d)"
  curl -fsSL -o "$tmp/Release.key" "$url"
  read -r got _ <<<"$(apt_key_of "$tmp/Release.key")" || true
  if [ "$got" != "$fpr" ]; then
    rm -rf "$tmp"
    echo "$url is not the pinned $label signing key: its fingerprint is" \
      "${got:-none (no key, or more than one)}, the pinned one $fpr; nothing was installed" >&2
    exit 1
  fi
  gpg --batch --yes --dearmor -o "$tmp/keyring.gpg" "$tmp/Release.key"
  if ! cmp -s "$tmp/keyring.gpg" "$keyring"; then
    install -d -m 0755 /etc/apt/keyrings
    install -m 0644 "$tmp/keyring.gpg" "$keyring"
    apt_sources_changed=1
  fi
  rm -rf "$tmp"
}
apt_source() {  # list name, its one `deb` line
  if [ "$(cat "/etc/apt/sources.list.d/$1.list" 2>/dev/null)" != "$2" ]; then
    install -d -m 0755 /etc/apt/sources.list.d
    printf '%s\n' "$2" > "/etc/apt/sources.list.d/$1.list"
    apt_sources_changed=1
  fi
}
apt_update_if_changed() {
  if [ "$apt_sources_changed" = 1 ]; then apt-get update; apt_sources_changed=0; fi
}
