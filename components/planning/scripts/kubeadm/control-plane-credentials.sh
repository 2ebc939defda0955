# shellcheck shell=bash
#: What a further control plane's join reads from stdin, one a line, in this order
#: (kubeadm.CONTROL_PLANE_CREDENTIALS): a worker's, then the certificate key and the encryption
#: configuration (YAML, so base64). Nothing is changed before all are there.
IFS= read -r JOIN_TOKEN || true
IFS= read -r CA_CERT_HASH || true
IFS= read -r CERTIFICATE_KEY || true
IFS= read -r ENCRYPTION_CONFIG_B64 || true
if [ -z "$JOIN_TOKEN" ] || [ -z "$CA_CERT_HASH" ] || [ -z "$CERTIFICATE_KEY" ] || [ -z "$ENCRYPTION_CONFIG_B64" ]; then
  echo "expected JOIN_TOKEN, CA_CERT_HASH, CERTIFICATE_KEY, ENCRYPTION_CONFIG_B64 on stdin, one per line" >&2; exit 1
fi
