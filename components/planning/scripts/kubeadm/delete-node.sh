# shellcheck shell=bash
#: The end of drain.sh when the worker leaves for good (not for a decommission).
kubectl delete node @node@
