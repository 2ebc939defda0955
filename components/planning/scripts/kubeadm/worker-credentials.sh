# shellcheck shell=bash
#: What a worker's join reads from stdin, one a line, in this order (kubeadm.WORKER_CREDENTIALS
#: reads the names from here; the bootstrap layer's join_credentials writes them). Nothing is
#: changed before all are there.
IFS= read -r JOIN_TOKEN || true
IFS= read -r CA_CERT_HASH || true
if [ -z "$JOIN_TOKEN" ] || [ -z "$CA_CERT_HASH" ]; then
  echo "expected JOIN_TOKEN, CA_CERT_HASH on stdin, one per line" >&2; exit 1
fi
