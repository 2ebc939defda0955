# shellcheck shell=bash
# include: node-header.sh
# include: reboot-why.sh

if [ -z "$reboot_why" ]; then
  log "no reboot required"
  exit 0
fi
case "$reboot_why" in
  *" gpu-driver:"*)
    # The node is drained: the host's driver, its fabric manager and NSCQ (NVSwitch systems
    # need both, at the driver's exact release) move to the pinned release together, from
    # DGX OS's repositories; the boot below loads the new modules (docs/hosts.md, "The GPU
    # driver").
    branch="${GPU_DRIVER_VERSION%%.*}"
    pkgs=("nvidia-driver-$branch-server-open" "nvidia-fabricmanager-$branch"
      "libnvidia-nscq-$branch")
    mapfile -t held < <(apt-mark showhold | grep -E '^(nvidia-|libnvidia-nscq-)' || true)
    if [ "${#held[@]}" -gt 0 ]; then apt-mark unhold "${held[@]}"; fi
    apt-get install -y --allow-downgrades "${pkgs[@]/%/=$GPU_DRIVER_VERSION-*}"
    apt-mark hold "${pkgs[@]}"
    systemctl enable nvidia-fabricmanager
    log "GPU driver $GPU_DRIVER_VERSION installed; the boot loads it"
    ;;
esac
mkdir -p "$STATE"
cat /proc/sys/kernel/random/boot_id > "$STATE/reboot.boot-id"
# `shutdown -r +1` writes /run/nologin now: new (non-root) logins are refused until the
# host is down, so the check after the boot cannot run on this boot.
shutdown -r +1 "gpu-cluster: planned reboot:$reboot_why"
log "rebooting in one minute:$reboot_why"
