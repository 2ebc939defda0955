# shellcheck shell=bash
case "${1-}" in
  -s|--status)
    if [ -e "$S/pkgs/${2-}" ]; then
      printf 'Package: %s\nStatus: install ok installed\nVersion: %s\n' "$2" "$(cat "$S/pkgs/$2")"
      exit 0
    fi
    echo "dpkg-query: package '${2-}' is not installed and no information is available" >&2
    exit 1 ;;
esac
