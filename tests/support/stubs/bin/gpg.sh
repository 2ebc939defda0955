# shellcheck shell=bash
# --dearmor drops the armor lines; --show-keys --with-colons lists each primary key as gpg
# does (pub with its expiry in field 7, fpr, uid, then a subkey with its own fpr).
out='' mode='' in=''
while [ $# -gt 0 ]; do
  case "$1" in
    -o|--output) out=$2; shift ;;
    --dearmor) mode=dearmor ;;
    --show-keys) mode=show ;;
    -*) ;;
    *) in=$1 ;;
  esac
  shift
done
src() { if [ -n "$in" ]; then cat "$in"; else cat; fi; }
case "$mode" in
  dearmor) src | grep -v -- '-----' > "${out:-/dev/stdout}" ;;
  show)
    keys=$(src | grep '^stub-key ' || true)
    [ -n "$keys" ] || { echo "gpg: no valid OpenPGP data found." >&2; exit 2; }
    while read -r _ fpr expiry; do
      printf 'pub:-:2048:1:%s:1661385600:%s::-:::scSC::::::23::0:\nfpr:::::::::%s:\n' \
        "${fpr: -16}" "${expiry-}" "$fpr"
      printf 'uid:-::::1661385600::0::isv:kubernetes OBS Project::::::::::0:\n'
      printf 'sub:-:2048:1:%s:1661385600::::::e::::::23:\nfpr:::::::::%s:\n' \
        "$(rev <<<"${fpr: -16}")" "$(rev <<<"$fpr")"
    done <<<"$keys" ;;
  *) src > "${out:-/dev/null}" ;;
esac
