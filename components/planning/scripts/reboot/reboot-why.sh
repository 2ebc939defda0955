# shellcheck shell=bash
#: Sets reboot_why to what only a boot applies: a kernel argument missing from this boot, a
#: host-owned GPU driver other than the pinned release, or a change host preparation staged
#: (it marks reboot.pending).

reboot_why=""
for arg in $KERNEL_ARGS; do
  case " $(cat /proc/cmdline) " in
    *" $arg "*) ;;
    *) reboot_why="$reboot_why kernel-argument:$arg" ;;
  esac
done
if [ -e "$STATE/reboot.pending" ]; then reboot_why="$reboot_why staged-boot-changes"; fi
if [ -n "$GPU_DRIVER_VERSION" ] && [ "$(loaded_gpu_driver)" != "$GPU_DRIVER_VERSION" ]; then
  reboot_why="$reboot_why gpu-driver:$(loaded_gpu_driver)->$GPU_DRIVER_VERSION"
fi
