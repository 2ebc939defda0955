# shellcheck shell=bash
sub=${1-}; shift || true
phase=''
if [ "$sub" = init ] && [ "${1-}" = phase ]; then
  phase=${2-}; shift 2 || true
  case "${1-}" in ''|-*) ;; *) phase="$phase $1"; shift ;; esac
fi
cfg='' skip_token=0 skip_key=0 upload=0
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --config) cfg=$2; shift ;;
    --config=*) cfg=${1#*=} ;;
    --skip-token-print) skip_token=1 ;;
    --skip-certificate-key-print) skip_key=1 ;;
    --upload-certs) upload=1 ;;
  esac
  shift
done
K=/etc/kubernetes
case "$sub" in
  init)
    if [ "$phase" = upload-certs ]; then
      # Re-uploads the control-plane certificates, encrypted under a fresh key it prints last.
      [ "$upload" = 1 ] || { echo "kubeadm: upload-certs needs --upload-certs" >&2; exit 1; }
      [ -e "$K/admin.conf" ] || { echo "kubeadm: $K/admin.conf: no such file" >&2; exit 1; }
      echo '[upload-certs] Storing the certificates in Secret "kubeadm-certs" in the' \
        '"kube-system" Namespace'
      # One Secret (kube-system/kubeadm-certs): each upload replaces it under its new key.
      mkdir -p "$S/cluster"
      od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$S/cluster/kubeadm-certs-key"
      echo "[upload-certs] Using certificate key:"
      cat "$S/cluster/kubeadm-certs-key"; echo
      exit 0
    fi
    { [ -n "$cfg" ] && [ -f "$cfg" ]; } \
      || { echo "kubeadm: config file $cfg not found" >&2; exit 1; }
    if [ -n "$phase" ]; then
      [ "$phase" = "upload-config kubelet" ] \
        || { echo "kubeadm stub: phase '$phase' not modelled" >&2; exit 1; }
      [ -e "$K/admin.conf" ] || { echo "kubeadm: $K/admin.conf: no such file" >&2; exit 1; }
      grep -q '^kind: KubeletConfiguration' "$cfg" \
        || { echo "kubeadm: no KubeletConfiguration in $cfg" >&2; exit 1; }
      cp "$cfg" "$S/kubelet-config-configmap"  # what the cluster's ConfigMap now holds
      echo "[upload-config] Uploading the kubelet component config to a ConfigMap"
      exit 0
    fi
    grep -q '^kind: InitConfiguration' "$cfg" \
      || { echo "kubeadm: no InitConfiguration in $cfg" >&2; exit 1; }
    if [ -e "$K/manifests/kube-apiserver.yaml" ] || [ -e "$K/admin.conf" ]; then
      echo "[ERROR FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml]: already exists" >&2
      exit 1
    fi
    mkdir -p "$K/manifests" "$K/pki"
    for f in pki/ca.crt admin.conf super-admin.conf kubelet.conf; do
      echo "# stub" > "$K/$f"
    done
    version=$(sed -n 's/^kubernetesVersion: v//p' "$cfg")
    echo "    image: registry.k8s.io/kube-apiserver:v$version" > "$K/manifests/kube-apiserver.yaml"
    echo "Your Kubernetes control-plane has initialized successfully!"
    if [ "$upload" = 1 ] && [ "$skip_key" = 0 ]; then
      echo "[upload-certs] Using certificate key:"; echo "__CERT_KEY__"
    fi
    if [ "$skip_token" = 0 ]; then
      echo "kubeadm join 10.0.0.1:6443 --token __INIT_TOKEN__ --discovery-token-ca-cert-hash x"
    fi ;;
  join)
    { [ -n "$cfg" ] && [ -f "$cfg" ]; } \
      || { echo "kubeadm: config file $cfg not found" >&2; exit 1; }
    stat -c %a "$cfg" > "$S/join-config-mode"
    grep -Eq '^    token: [a-z0-9]{6}\.[a-z0-9]{16}$' "$cfg" \
      || { echo "kubeadm: invalid bootstrap token in $cfg" >&2; exit 1; }
    grep -Eq '^    - sha256:[0-9a-f]{64}$' "$cfg" \
      || { echo "kubeadm: invalid CA certificate hash in $cfg" >&2; exit 1; }
    if [ -e "$K/kubelet.conf" ]; then
      echo "[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: $K/kubelet.conf already exists" >&2
      exit 1
    fi
    mkdir -p "$K/pki"; echo "# stub" > "$K/kubelet.conf"; echo "# stub" > "$K/pki/ca.crt"
    if grep -q '^controlPlane:' "$cfg"; then
      grep -Eq '^  certificateKey: [0-9a-f]{64}$' "$cfg" \
        || { echo "kubeadm: invalid certificate key in $cfg" >&2; exit 1; }
      # The certificates decrypt only under the key of the latest upload.
      if [ -s "$S/cluster/kubeadm-certs-key" ] \
          && ! grep -qx "  certificateKey: $(cat "$S/cluster/kubeadm-certs-key")" "$cfg"; then
        echo "error execution phase control-plane-prepare/download-certs: error downloading" \
          "certs: error decoding secret data with provided key: cipher: message" \
          "authentication failed" >&2
        exit 1
      fi
      mkdir -p "$K/manifests"
      echo "# stub" > "$K/admin.conf"
      # The cluster's release (its kubeadm-config), else the installed kubeadm's.
      release=$(cat "$S/cluster/version" 2>/dev/null || cut -d- -f1 "$S/pkgs/kubeadm")
      echo "    image: registry.k8s.io/kube-apiserver:v$release" \
        > "$K/manifests/kube-apiserver.yaml"
    fi
    echo "This node has joined the cluster." ;;
  kubeconfig)
    # `kubeconfig user`: a kubeconfig for --client-name, signed by the CA in $K/pki.
    [ "${args[0]-}" = user ] || { echo "kubeadm stub: kubeconfig ${args[0]-}" >&2; exit 1; }
    { [ -n "$cfg" ] && [ -f "$cfg" ]; } \
      || { echo "kubeadm: config file $cfg not found" >&2; exit 1; }
    [ -e "$K/pki/ca.crt" ] || { echo "kubeadm: $K/pki/ca.crt: no such file" >&2; exit 1; }
    client=''; prev=''
    for a in "${args[@]}"; do
      case "$a" in --client-name=*) client=${a#*=} ;; esac
      [ "$prev" = --client-name ] && client=$a; prev=$a
    done
    printf 'apiVersion: v1\nkind: Config\nusers:\n- name: %s\n  user: {client-key-data: stub}\n' \
      "$client" ;;
  reset)
    rm -rf "$K/admin.conf" "$K/kubelet.conf" "$K/manifests" "$K/pki"
    echo "[reset] Deleted contents of the etcd data directory" ;;
  upgrade)
    set -- "${args[@]}"
    # The kubeadm binary is the installed package's; it upgrades to its own version at most.
    mine=$(cut -d- -f1 "$S/pkgs/kubeadm" 2>/dev/null)
    case "${1-}" in
      plan|apply)
        want=''; for a in "$@"; do case "$a" in v[0-9]*) want=${a#v} ;; esac; done
        if [ "$want" != "$mine" ]; then
          echo "[upgrade/version] FATAL: the specified version to upgrade to \"v$want\" is" \
            "higher than the kubeadm version \"v$mine\"" >&2
          exit 1
        fi
        if [ "$1" = apply ]; then
          echo "    image: registry.k8s.io/kube-apiserver:v$want" \
            > "$K/manifests/kube-apiserver.yaml"
          echo "$want" > "$S/cluster/version"
          echo "[upgrade/successful] SUCCESS! Your cluster was upgraded to \"v$want\"."
        fi ;;
      node)
        if [ -e "$K/manifests/kube-apiserver.yaml" ]; then
          echo "    image: registry.k8s.io/kube-apiserver:v$mine" \
            > "$K/manifests/kube-apiserver.yaml"
        fi
        echo "[upgrade] The configuration for this node was successfully upgraded!" ;;
    esac ;;
esac
exit 0
