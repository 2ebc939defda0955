# shellcheck shell=bash
# Sourced by tools/engine/build.sh and tools/k8s/build.sh: Go on PATH, one build at a time per
# cache directory, a scratch directory removed on exit, and a JSON field reader. The caller
# defines log().

# gobuild_go: find Go (also where the official tarball puts it) and set the build flags.
gobuild_go() {
  if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    PATH="/usr/local/go/bin:$PATH"
  fi
  command -v go >/dev/null 2>&1 || { log "go is not installed"; exit 1; }
  export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 GOWORK=off
}

# gobuild_reuse BIN: when BIN (a finished build's directory) is there, print it and exit: no Go,
# no network, no lock.
gobuild_reuse() {
  if [ -d "$1" ]; then
    log "reusing $1"
    echo "$1"
    exit 0
  fi
}

# gobuild_workdir CACHE: lock CACHE (a second caller waits, then reuses what the first built),
# clear what an interrupted run left (never a finished build: those are renamed into place),
# and cd into a fresh $WORK, removed on exit, outside any Go module.
gobuild_workdir() {
  mkdir -p "$1"
  exec 9>"$1/.lock"
  flock 9
  chmod -R u+w "$1"/.work.* 2>/dev/null || true
  rm -rf "$1"/.tmp.* "$1"/.work.*
  WORK="$(mktemp -d "$1/.work.XXXXXX")"
  trap 'chmod -R u+w "$WORK" 2>/dev/null || true; rm -rf "$WORK"' EXIT
  cd "$WORK" || exit 1
}

# json FIELD...: read one JSON object on stdin, print the (nested) field or nothing.
json() {
  python3 -c 'import json,sys
v = json.load(sys.stdin)
for k in sys.argv[1:]:
    v = v.get(k) if isinstance(v, dict) else None
print(v if v is not None else "")' "$@"
}
