# shellcheck shell=bash disable=SC2034
#: A standby tracks whether its SM_Key changes (standby-key-check.sh, standby-mark.sh).
sm_key_changed=0
