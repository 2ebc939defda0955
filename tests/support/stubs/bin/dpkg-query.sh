# shellcheck shell=bash
# shellcheck disable=SC2016  # dpkg-query's format fields, literally
fmt='${Package}\n'; pkg=
while [ $# -gt 0 ]; do
  case "$1" in
    -f|--showformat) fmt=$2; shift ;;
    -f=*|--showformat=*) fmt=${1#*=} ;;
    -*) ;;
    *) pkg=$1 ;;
  esac
  shift
done
if [ -z "$pkg" ] || [ ! -e "$S/pkgs/$pkg" ]; then
  echo "dpkg-query: no packages found matching $pkg" >&2; exit 1
fi
# shellcheck disable=SC2016  # dpkg-query's format fields, literally
out=${fmt//'${Version}'/$(cat "$S/pkgs/$pkg")}
# shellcheck disable=SC2016  # dpkg-query's format fields, literally
printf '%b' "${out//'${Package}'/$pkg}"
