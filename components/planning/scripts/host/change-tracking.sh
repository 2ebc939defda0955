# shellcheck shell=bash
#: Bash helpers for "change a file, then act on it" steps (host preparation, kubelet settings,
#: the control planes' identities).
write_if_changed() {  # path content: replace the file only when its content differs
  local path="$1" content="$2"
  if [ ! -f "$path" ] || [ "$(cat "$path")" != "$content" ]; then
    printf '%s\n' "$content" > "$path"; return 0
  fi
  return 1
}
# The action that follows a changed file (reload, rebuild, restart) is marked pending first and
# cleared only once it succeeded: a failed run retries it, although the file is now unchanged.
STATE=/var/lib/gpu-cluster
mark() { mkdir -p "$STATE"; touch "$STATE/$1.pending"; }
settle() {
  local name="$1"; shift
  [ -e "$STATE/$name.pending" ] || return 0
  "$@"
  rm -f "$STATE/$name.pending"
}
