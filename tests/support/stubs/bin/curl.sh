# shellcheck shell=bash
# What pkgs.k8s.io serves as Release.key: $S/release-key (Sandbox.serve_release_key), else
# the real signing key. The stub's key format: one "stub-key <fingerprint> [<expiry>]" line per
# primary key, between the armor lines.
out='' url=''
while [ $# -gt 0 ]; do
  case "$1" in -o|--output) out=$2; shift ;; -*) ;; *) url=$1 ;; esac
  shift
done
page="$S/web/$(printf '%s' "$url" | tr '/:' '__')"
served() {
  if [ -e "$page" ]; then cat "$page"
  elif [ "$url" = "${url#https://pkgs.k8s.io/}" ]; then
    echo "curl: (6) Could not resolve host: $(cut -d/ -f3 <<<"$url")" >&2; return 6
  elif [ -e "$S/release-key" ]; then cat "$S/release-key"; else
    printf -- '-----BEGIN PGP PUBLIC KEY BLOCK-----\nstub-key %s\n%s\n' __K8S_KEY_FPR__ \
      '-----END PGP PUBLIC KEY BLOCK-----'
  fi
}
if [ -n "$out" ]; then served > "$out"; else served; fi
