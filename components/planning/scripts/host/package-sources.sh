# shellcheck shell=bash
#: Read only, before any change: the repositories this host still needs packages from serve
#: them, signed by the pinned keys (docs/hosts.md, "Package sources"). Needs apt-keys.sh.

source_serves() {  # config key, repository URL, key URL, fingerprint, package[=version]...
  local key=$1 url=$2 key_url=$3 fpr=$4 tmp got="" missing="" want name version
  shift 4
  tmp="$(mktemp -d)"
  if ! curl -fsSL -o "$tmp/key" "$key_url" 2>/dev/null \
      || ! curl -fsSL -o "$tmp/Packages" "${url}Packages" 2>/dev/null; then
    rm -rf "$tmp"
    echo "package source $key: $url or its key $key_url cannot be fetched from this host" \
      "(a site that forbids it, or a mirror that does not serve it); nothing was changed" >&2
    echo "  fix: let this host reach it, or set $key to a mirror this host reaches that" \
      "serves: $*" >&2
    exit 1
  fi
  read -r got _ <<<"$(apt_key_of "$tmp/key")" || true
  for want in "$@"; do
    name=${want%%=*}; version=${want#*=}; [ "$version" != "$want" ] || version=""
    # One stanza per package version in the index: Package and Version lines, exactly.
    awk -v n="$name" -v v="$version" '
      /^Package: / { p = substr($0, 10) }
      /^Version: / { if (p == n && (v == "" || substr($0, 10) == v)) f = 1 }
      END { exit !f }' "$tmp/Packages" || missing="$missing $want"
  done
  rm -rf "$tmp"
  if [ "$got" != "$fpr" ]; then
    echo "package source $key: $key_url is not the pinned signing key: its fingerprint is" \
      "${got:-none (no key, or more than one)}, the pinned one $fpr; nothing was changed" >&2
    exit 1
  fi
  if [ -n "$missing" ]; then
    echo "package source $key: $url does not serve$missing; nothing was changed" >&2
    echo "  fix: add them to that repository (or mirror), or pin versions it serves" >&2
    exit 1
  fi
}
if ! ofed_info -s >/dev/null 2>&1; then
  source_serves platform.networkOperator.docaSource "$DOCA_URL" "$DOCA_KEY_URL" \
    "$DOCA_KEY_FPR" doca-ofed  # one DOCA release per repository: its URL is the pin
fi
# Whether the Lustre client is installed at the pinned version (GPU steps read it too).
lustre_current() {
  local p
  for p in lustre-client-utils lustre-client-modules-dkms; do
    [ "$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)" = "$LUSTRE_CLIENT_VERSION" ] \
      || return 1
  done
}
if ! lustre_current; then
  source_serves storage.lustreClient.source "$LUSTRE_URL" "$LUSTRE_KEY_URL" "$LUSTRE_KEY_FPR" \
    "lustre-client-utils=$LUSTRE_CLIENT_VERSION" \
    "lustre-client-modules-dkms=$LUSTRE_CLIENT_VERSION"
fi
