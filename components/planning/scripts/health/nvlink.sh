#!/usr/bin/env bash
# Every GPU's NVLinks to the NVSwitches up:  nvlink.sh LINKS_PER_GPU
# `nvidia-smi nvlink --status` lists each GPU ("GPU <i>: <name> (UUID: ...)") and each of its
# links ("Link <n>: <speed>", or "<inactive>" for a link that is down).
set -u
# include: common.sh
# include: host-tools.sh

want="${1:-}"
case "$want" in
  '' | *[!0-9]*) unknown "usage: nvlink.sh LINKS_PER_GPU" ;;
esac
status="$(on_host nvidia-smi nvlink --status 2>&1)" ||
  unknown "nvidia-smi nvlink --status failed: $(head -n 1 <<<"$status")"
found="$(awk -v want="$want" '
  function close_gpu() {
    if (gpu == "") return
    if (active < want)
      out = out (out ? "; " : "") sprintf("GPU %s: %d of %d NVLinks active%s", gpu, active, want,
        down ? " (inactive: " down ")" : "")
  }
  /^GPU [0-9]+:/ { close_gpu(); gpu = $2; sub(":", "", gpu); active = 0; down = ""; gpus++; next }
  /^[ \t]*Link [0-9]+:/ {
    link = $2; sub(":", "", link)
    if ($0 ~ /inactive/) down = down (down ? ", " : "") link; else active++
  }
  END { close_gpu(); if (gpus == 0) print "no GPU listed"; else printf "%s", out }' <<<"$status")"
[ "$found" != "no GPU listed" ] || unknown "nvidia-smi nvlink --status listed no GPU"
[ -z "$found" ] || problem "$found"
ok "every GPU has its $want NVLinks active"
