# shellcheck shell=bash
verb='' unit='' now=0 quiet=0
for a in "$@"; do
  case "$a" in
    --now) now=1 ;;
    --quiet|-q) quiet=1 ;;
    -*) ;;
    *) if [ -z "$verb" ]; then verb=$a; elif [ -z "$unit" ]; then unit=${a%.service}; fi ;;
  esac
done
case "$unit" in
  containerd) pkgs="containerd containerd.io" ;;
  lnet) pkgs=lustre-client-utils ;;
  ssh) pkgs=openssh-server ;;
  nvidia-fabricmanager) pkgs=$(cd "$S/pkgs" && echo nvidia-fabricmanager-*) ;;
  *) pkgs=$unit ;;
esac
exists=0
for p in $pkgs; do [ -e "$S/pkgs/$p" ] && exists=1; done
[ -e "/etc/systemd/system/$unit.service" ] && exists=1
case "$unit" in *.timer) [ -e "/etc/systemd/system/$unit" ] && exists=1 ;; esac
case "$verb" in
  daemon-reload) exit 0 ;;
  is-enabled|is-active)
    flag=enabled; [ "$verb" = is-active ] && flag=active
    if [ -e "$S/units/$unit.$flag" ]; then [ "$quiet" = 1 ] || echo "$flag"; exit 0; fi
    [ "$quiet" = 1 ] || echo "not-$flag"; exit 1 ;;
esac
if [ "$exists" = 0 ]; then
  echo "Failed to $verb $unit.service: Unit $unit.service not found." >&2; exit 5
fi
case "$verb" in
  enable) touch "$S/units/$unit.enabled"; [ "$now" = 1 ] && touch "$S/units/$unit.active" ;;
  disable) rm -f "$S/units/$unit.enabled"; [ "$now" = 1 ] && rm -f "$S/units/$unit.active" ;;
  start|restart|reload) touch "$S/units/$unit.active" ;;
  stop) rm -f "$S/units/$unit.active" ;;
esac
exit 0
