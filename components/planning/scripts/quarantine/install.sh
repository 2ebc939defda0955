# shellcheck shell=bash
#: After host/change-tracking.sh and the quarantine's kubeconfig (kubeadm/identities.sh): the
#: quarantine program, its policy and its units (host/unit-file.sh each), and its timer on.
# @files@
enable_quarantine() { systemctl daemon-reload; systemctl enable --now @unit@.timer; }
settle quarantine enable_quarantine
