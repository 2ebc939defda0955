# shellcheck shell=bash
#: kube-vip's static Pod (the control-plane VIP): at init, and on a further control plane once
#: it serves the API.
install -d -m 0755 /etc/kubernetes/manifests
cat > /etc/kubernetes/manifests/kube-vip.yaml <<'KUBEVIP'
# @manifest@
KUBEVIP
