# shellcheck shell=bash
#: A standby whose SM_Key changes stays stopped until rejoin.sh starts it after the master's
#: apply (why: components/planning/subnet_manager.py, sm_apply_script).
if [ -e @rejoin_pending@ ]; then
  echo "the SM_Key changes: opensm stays stopped until the master runs with the new key (rejoin-opensm.sh then starts it)"
  systemctl daemon-reload
  systemctl stop opensm
  rm -f @pending@
fi
