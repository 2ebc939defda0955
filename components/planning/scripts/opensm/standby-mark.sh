# shellcheck shell=bash disable=SC2154
#: A changed SM_Key leaves the rejoin-pending mark that standby-stop.sh and rejoin.sh read.
if [ "$sm_key_changed" = 1 ]; then touch @rejoin_pending@; fi
