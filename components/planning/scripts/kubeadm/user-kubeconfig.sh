# shellcheck shell=bash
#: A kubeconfig of one of the cluster's own identities, signed by the cluster CA through
#: identity-config.sh's configuration; kept when present.
if [ ! -s @path@ ]; then
  (umask 077; kubeadm kubeconfig user --config @identity_config@ --client-name @user@ --validity-period @validity@ > @path@.new)
  mv @path@.new @path@
fi
