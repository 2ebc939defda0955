# shellcheck shell=bash
#: After host/change-tracking.sh and the approver's kubeconfig (kubeadm/identities.sh): the
#: approver of kubelet serving certificates and its units (host/unit-file.sh each), the
#: kubelets it vouches for, and its timer on.
dpkg -s @package@ >/dev/null 2>&1 || apt-get install -y @package@
# @files@
CONTENT="$(cat <<'CONTENT'
# @kubelets@
CONTENT
)"
write_if_changed @kubelets_file@ "$CONTENT" || true
enable_approver() { systemctl daemon-reload; systemctl enable --now @unit@.timer; }
settle kubelet-serving enable_approver
