#!/bin/bash
# Stand-in: kubeadm of the simulated data centre, across hosts, over the sandbox's stub
# (kubeadm-sandbox, which does the host's part). `token create` prints a bootstrap token;
# `kubeconfig user` a kubeconfig for the API endpoint with the cluster's CA; `init`
# installs the run's own CA, so the CA hash the stack computes with the real openssl is a real
# one; a `join` registers its Node and its kubelet's version in the shared cluster.
set -euo pipefail
C=/stub/state/cluster
hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
case "${1-} ${2-}" in
  "token create") echo "$(hex 3).$(hex 8)"; exit 0 ;;
  "kubeconfig user")
    [ -s /etc/kubernetes/pki/ca.crt ] || { echo "kubeadm: no CA" >&2; exit 1; }
    client='' prev=''
    for a in "$@"; do
      case "$a" in --client-name=*) client=${a#*=} ;; esac
      [ "$prev" = --client-name ] && client=$a; prev=$a
    done
    printf 'apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n'
    printf '    server: %s\n    certificate-authority-data: %s\n' __SERVER__ \
      "$(base64 -w0 /etc/kubernetes/pki/ca.crt)"
    printf 'contexts:\n- name: ctx\n  context: {cluster: kubernetes, user: "%s"}\n' "$client"
    printf 'current-context: ctx\nusers:\n- name: "%s"\n  user: {token: %s}\n' "$client" \
      __TOKEN__
    exit 0 ;;
esac
/stub/bin/kubeadm-sandbox "$@"
cfg='' prev=''
for a in "$@"; do [ "$prev" = --config ] && cfg=$a; prev=$a; done
case "${1-}" in
  init)
    if [ "${2-}" != phase ]; then
      cp /stub/state/e2e-ca.crt /etc/kubernetes/pki/ca.crt
      sed -n 's/^kubernetesVersion: v//p' "$cfg" > "$C/version"
      : > "$C/nodes/$(hostname)"
      echo "v$(cut -d- -f1 /stub/state/pkgs/kubelet)" > "$C/kubelet/$(hostname)"
    fi ;;
  join)
    : > "$C/nodes/$(hostname)"
    echo "v$(cut -d- -f1 /stub/state/pkgs/kubelet)" > "$C/kubelet/$(hostname)" ;;
esac
