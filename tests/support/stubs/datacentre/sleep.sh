#!/bin/bash
# Stand-in: sleep of a simulated host, over the sandbox's stub (sleep-sandbox, which records
# it): real, 30 times faster and at most a second. The scripts' waits poll seconds to minutes
# apart; real time keeps a member that waits for another's reboot lock waiting (the sandbox's
# instant sleep would run out its 6 h at once), the speed-up keeps a gate that waits its 35 min
# for GPUs short.
/stub/bin/sleep-sandbox "$@"
s=${1-0}; s=${s%s}
case "$s" in ''|*[!0-9.]*) s=30 ;; esac
exec /usr/bin/sleep "$(awk -v s="$s" 'BEGIN { s /= 30; print (s > 1 ? 1 : s) }')"
