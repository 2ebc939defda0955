#!/usr/bin/env bash
# Approves the kubelet serving certificates the inventory vouches for — installed by gpu-cluster;
# do not edit. Run by gpu-cluster-kubelet-serving.timer on every control-plane host.
#
# kube-controller-manager signs kubernetes.io/kubelet-serving CSRs but never approves them.
# Approved here only when all of these hold (the signer's rules, kubernetes.io/docs/reference/
# access-authn-authz/certificate-signing-requests/#kubernetes-signers, plus the inventory):
#   - a node asked (spec.username system:node:<name>) and the inventory lists <name>;
#   - the subject is exactly O=system:nodes, CN=system:node:<name>;
#   - every subjectAltName is DNS:<name> or one of <name>'s inventory addresses, at least one;
#   - the usages are digital signature and server auth, key encipherment optional;
#   - the request is signed by its own key.
# Anything else from a listed node, or from a requester that is no node, is denied: a node's
# credentials cannot buy a certificate for another node's address. A node the inventory does
# not list yet is left pending: an update that adds it lists it first, and the kubelet waits.
#
# Usage: approve-kubelet-serving [KUBECONFIG [KUBELETS]]; KUBELETS lines are `name address...`.
set -euo pipefail
kubeconfig="${1:-/etc/kubernetes/kubelet-serving-approver.conf}"
kubelets="${2:-/etc/kubernetes/gpu-cluster-kubelets}"
k() { kubectl --kubeconfig "$kubeconfig" "$@"; }

if [ ! -r "$kubelets" ]; then
  echo "no $kubelets yet: nothing approved" >&2
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# name, requester, conditions (empty while pending): one CSR a line.
k get csr --field-selector spec.signerName=kubernetes.io/kubelet-serving -o jsonpath='{range .items[*]}{.metadata.name}{"\t"}{.spec.username}{"\t"}{.status.conditions[*].type}{"\n"}{end}' \
  >"$work/csrs"

# Why the CSR in $work/req.pem may not have a serving certificate for node $1; empty: approve.
objection() {
  local node="$1" csr="$2" addresses="$3" subject sans san usages
  if ! openssl req -in "$work/req.pem" -noout -verify >/dev/null 2>&1; then
    echo "its request is not signed by its own key"; return
  fi
  subject="$(openssl req -in "$work/req.pem" -noout -subject -nameopt RFC2253)"
  if [ "$subject" != "subject=CN=system:node:$node,O=system:nodes" ]; then
    echo "its ${subject/=/ is } (want CN=system:node:$node,O=system:nodes)"; return
  fi
  sans="$(openssl req -in "$work/req.pem" -noout -text |
    awk '/X509v3 Subject Alternative Name/ {getline; gsub(/^ +| +$/, ""); print}')"
  if [ -z "$sans" ]; then
    echo "it names no DNS name or address"; return
  fi
  while IFS= read -r san; do
    case "$san" in
      "DNS:$node") ;;
      "IP Address:"*)
        if ! grep -qxF "${san#IP Address:}" <<<"${addresses// /$'\n'}"; then
          echo "it names $san, not an address of $node in the inventory ($addresses)"; return
        fi ;;
      *) echo "it names $san (only DNS:$node and $node's addresses)"; return ;;
    esac
  done <<<"${sans//, /$'\n'}"
  usages="$(k get csr "$csr" -o jsonpath='{range .spec.usages[*]}{@}{"\n"}{end}' | sort | paste -sd,)"
  case "$usages" in
    "digital signature,key encipherment,server auth" | "digital signature,server auth") ;;
    *) echo "its usages are $usages (want digital signature, server auth" \
      "and optionally key encipherment)" ;;
  esac
}

while IFS=$'\t' read -r csr requester conditions; do
  if [ -z "$csr" ] || [ -n "$conditions" ]; then continue; fi # decided already
  node="${requester#system:node:}"
  if [ "$node" = "$requester" ]; then
    echo "$csr: denied: requested by $requester, not by a node" >&2
    k certificate deny "$csr" >/dev/null
    continue
  fi
  addresses="$(awk -v n="$node" '$1 == n { $1 = ""; sub(/^ /, ""); print }' "$kubelets")"
  if [ -z "$addresses" ]; then
    echo "$csr: left pending: $node is not in $kubelets" >&2
    continue
  fi
  k get csr "$csr" -o jsonpath='{.spec.request}' | base64 -d >"$work/req.pem"
  why="$(objection "$node" "$csr" "$addresses")"
  if [ -n "$why" ]; then
    echo "$csr: denied for $node: $why" >&2
    k certificate deny "$csr" >/dev/null
  else
    echo "$csr: approved for $node ($addresses)"
    k certificate approve "$csr" >/dev/null
  fi
done <"$work/csrs"
