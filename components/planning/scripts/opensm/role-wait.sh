# shellcheck shell=bash
#: Poll the local SM's state (SMInfo over the directed route to this port) every 5 s until it
#: is in its role (a case pattern); fail when it is not by the deadline.
for _ in $(seq 1 @polls@); do
  state=$(sminfo -C @ca@ -P 1 -D 0 2>/dev/null | grep -o 'SMINFO_[A-Z]*' || true)
  case "$state" in @want@) break ;; esac
  sleep 5
done
case "$state" in @want@) ;; *)
  echo "opensm on @ca@ is ${state:-not answering} @seconds@ s after its restart, not @role@; the next run retries" >&2
  exit 1 ;;
esac
echo "opensm on @ca@ is back: $state"
