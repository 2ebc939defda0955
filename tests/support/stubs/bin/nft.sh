# shellcheck shell=bash
# nft: -c -f FILE checks (the table is named and the braces balance); -f FILE loads it
# ($S/nft-loaded); list table inet gpu_cluster prints what is loaded; delete table drops it.
check() {
  [ -f "$1" ] || { echo "Error: No such file or directory: $1" >&2; exit 1; }
  grep -q '^table inet gpu_cluster {' "$1" \
    || { echo "Error: syntax error in $1" >&2; exit 1; }
  [ "$(tr -cd '{' < "$1" | wc -c)" = "$(tr -cd '}' < "$1" | wc -c)" ] \
    || { echo "$1: Error: syntax error, unexpected end of file" >&2; exit 1; }
}
case "${1-}" in
  -c|--check) check "$3" ;;
  -f|--file) check "$2"; cp "$2" "$S/nft-loaded" ;;
  list)
    [ -e "$S/nft-loaded" ] || { echo "Error: No such file or directory" >&2; exit 1; }
    cat "$S/nft-loaded" ;;
  delete) [ -e "$S/nft-loaded" ] && rm -f "$S/nft-loaded" ;;
esac
exit 0
