#!/usr/bin/env bash
# The NVSwitch fabric ready: nvidia-fabricmanager running and every GPU registered with the
# fabric. NVIDIA's Fabric Manager user guide: without the service no CUDA job starts on an
# NVSwitch system; `nvidia-smi -q` shows each GPU's fabric registration under "Fabric" as
# "State : Completed" and "Status : Success" once done (NVML nvmlGpuFabricInfo_t: the status
# means something only once the state is complete).
set -u
# include: common.sh
# include: host-tools.sh

service="$(on_host systemctl is-active nvidia-fabricmanager 2>/dev/null)"
# is-active prints a state for any unit, even one not installed ("inactive"): nothing printed
# means systemd could not be asked (the host unreachable), which says nothing of the fabric.
[ -n "$service" ] || unknown "systemctl is-active nvidia-fabricmanager printed no state"
[ "$service" = active ] || problem "nvidia-fabricmanager is $service, not active"
query="$(on_host nvidia-smi -q 2>&1)" || unknown "nvidia-smi -q failed: $(head -n 1 <<<"$query")"
found="$(awk '
  /^GPU [0-9A-Fa-f]+:/ { gpu = $2; fabric = 0; next }
  /^[ \t]+[A-Za-z]/ && fabric && !/^[ \t]+(State|Status)[ \t]*:/ { fabric = 0 }
  /^[ \t]+Fabric[ \t]*$/ { fabric = 1; gpus++; next }
  fabric && /^[ \t]+State[ \t]*:/ { v = $0; sub(/^[^:]*:[ \t]*/, "", v)
    if (v != "Completed") out = out (out ? "; " : "") "GPU " gpu " fabric state " v }
  fabric && /^[ \t]+Status[ \t]*:/ { v = $0; sub(/^[^:]*:[ \t]*/, "", v)
    if (v != "Success" && v != "N/A") out = out (out ? "; " : "") "GPU " gpu " fabric status " v }
  END { if (gpus == 0) print "no fabric"; else printf "%s", out }' <<<"$query")"
[ "$found" != "no fabric" ] || unknown "nvidia-smi -q shows no GPU's fabric state"
[ -z "$found" ] || problem "$found"
ok "nvidia-fabricmanager active; every GPU's fabric registration completed"
