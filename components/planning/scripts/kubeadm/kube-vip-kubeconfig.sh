# shellcheck shell=bash
#: After the kube-vip identity: its static Pod manifest switched to that identity.
# Only the hostPath: the mount inside the container stays kube-vip's default path.
manifest=/etc/kubernetes/manifests/kube-vip.yaml
old='^( *)path: /etc/kubernetes/(super-)?admin\.conf$'
if grep -Eq "$old" "$manifest"; then
  sed -i -E "s|$old|\1path: @kubeconfig@|" "$manifest"
  echo "kube-vip on @host@ now uses @user@"
fi
