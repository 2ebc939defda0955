# shellcheck shell=bash
# kubeadm writes it at init for its own bootstrap only; a break-glass credential is
# made when needed from the CA (docs/security.md, "People").
if [ -e /etc/kubernetes/super-admin.conf ]; then
  shred -u /etc/kubernetes/super-admin.conf
  echo "removed super-admin.conf from @host@"
fi
