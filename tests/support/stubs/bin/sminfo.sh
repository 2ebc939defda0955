# shellcheck shell=bash
# The local SM's state (sminfo -D 0): $S/sm-state, else what a lone opensm reports.
state=$(cat "$S/sm-state" 2>/dev/null || echo SMINFO_MASTER)
echo "sminfo: sm lid 1 sm guid 0xb83fd20300f10002, activity count 42 priority 15 state 3 $state"
