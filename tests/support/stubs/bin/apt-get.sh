# shellcheck shell=bash
[ "${1-}" = install ] || exit 0
shift
allow_held=0
for a in "$@"; do [ "$a" = --allow-change-held-packages ] && allow_held=1; done
for a in "$@"; do
  case "$a" in -*) continue ;; esac
  name=${a%%=*}; version=${a#*=}; [ "$version" = "$a" ] && version=1.0-stub
  if [ -e "$S/held/$name" ] && [ "$allow_held" = 0 ]; then
    echo "E: Held packages were changed and -y was used without --allow-change-held-packages." >&2
    exit 100
  fi
  case "$name" in  # one driver branch at a time: the packages conflict
    nvidia-driver-*-server-open) rm -f "$S"/pkgs/nvidia-driver-*-server-open ;;
    nvidia-fabricmanager-*) rm -f "$S"/pkgs/nvidia-fabricmanager-* ;;
    libnvidia-nscq-*) rm -f "$S"/pkgs/libnvidia-nscq-* ;;
  esac
  printf '%s\n' "$version" > "$S/pkgs/$name"
  case "$name" in kubelet) mkdir -p /etc/kubernetes/manifests ;; esac
done
