# shellcheck shell=bash
#: What every API server reads besides kubeadm's own files: the audit policy and the
#: admission and authentication configurations (init.sh, control-plane-join.sh).
cat > /etc/kubernetes/audit-policy.yaml <<'AUDIT'
# @audit@
AUDIT
cat > @admission_path@ <<'ADMISSION'
# @admission@
ADMISSION
cat > @authentication_path@ <<'AUTHENTICATION'
# @authentication@
AUTHENTICATION
