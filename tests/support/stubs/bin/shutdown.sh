# shellcheck shell=bash
# shutdown -r +N: scheduled, and /run/nologin written at once (systemd does within 5 min).
echo "$*" > "$S/shutdown-scheduled"
echo "System is going down." > /run/nologin
