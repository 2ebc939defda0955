#!/usr/bin/env bash
# Adds the secrets Pulumi.yaml declares to a stack's config, encrypted by the stack's secrets
# provider, from environment variables (a CI job's secrets). Each value travels on stdin, never
# on a command line. Usage: tools/set-stack-secrets.sh <stack>
set -euo pipefail
stack=${1:?usage: tools/set-stack-secrets.sh <stack>}
set_secret() {  # <config key> <environment variable>
  local key=$1 var=$2
  if [ -z "${!var:-}" ]; then
    echo "$var is empty: the stack needs its $key secret (see Pulumi.yaml)" >&2
    exit 2
  fi
  printf '%s' "${!var}" | pulumi config set --secret --stack "$stack" "$key"
}
set_secret sshPrivateKey GPU_CLUSTER_SSH_PRIVATE_KEY
set_secret bmcPassword GPU_CLUSTER_BMC_PASSWORD
set_secret switchPassword GPU_CLUSTER_SWITCH_PASSWORD
set_secret fabricMKey GPU_CLUSTER_FABRIC_M_KEY
set_secret fabricSmKey GPU_CLUSTER_FABRIC_SM_KEY
set_secret fabricSaKey GPU_CLUSTER_FABRIC_SA_KEY
