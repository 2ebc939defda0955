"""Run rendered host scripts for real, in a throw-away root, against recording stub binaries.

Isolation (bubblewrap): the sandbox's `/` is a temporary directory; only /usr is bound from this
machine, read-only. /proc/cmdline is a fake file, /sys is a fake tree (InfiniBand devices with
`device` links to fake PCI functions; NVMe namespaces and md arrays under /sys/block with
size, model, holders and slaves), /dev is bubblewrap's minimal devtmpfs with /dev/md and
/dev/disk (the by-id links) bound from the sandbox root and the block devices bound from the
stubs' state, so drives and arrays "survive" between runs (`dgx_h100` builds a DGX H100's ten
NVMe drives). The host kernel may lack md, so /proc/mdstat cannot be faked; scripts read the
same facts from sysfs. Every namespace is unshared (no
network) and every capability is dropped, so even a real binary reached by absolute path can
neither mount, load a module nor touch this machine's /etc.

Stubs: every command with side effects (kubeadm, systemctl, mdadm, mkfs.xfs, apt-get, ...) is a
small generated bash script in /stub/bin, first on PATH. Each appends its argv to a call log
and keeps just enough state in /stub/state (or in the sandbox's own /etc) for a second run to
see what the first run did: `kubeadm init` writes admin.conf, `apt-get install` makes `dpkg -s`
succeed, `mdadm --create` leaves superblocks that `mdadm --examine` reports, and so on.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import uuid as uuid_lib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.project import REPO

STUB_BIN = "/stub/bin"
STUB_STATE = "/stub/state"
SANDBOX_PATH = f"{STUB_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Credentials the kubeadm stub prints when a script lets it (the real one prints them too).
STUB_CERT_KEY = "9f3c1a7e5b2d4c6a8e0f1b3d5c7a9e2f4b6d8c0a1e3f5b7d9c2a4e6f8b0d1c3e"
STUB_INIT_TOKEN = "stubin.itt0kenprinted0"
FSTAB = "UUID=0f1e2d3c / ext4 errors=remount-ro 0 1\n/swap.img none swap sw 0 0\n"
CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-amd64 root=UUID=0f1e2d3c ro quiet\n"
# The fingerprint of the key that signs pkgs.k8s.io, as `gpg --show-keys` prints it for
# core:/stable:/v1.XX/deb/Release.key (kubernetes/kubernetes#128609): what the curl stub serves.
K8S_KEY_FPR = "DE15B14486CD377B9E876E1A234654DA9A296436"
# Ubuntu 22.04's /etc/ssh/sshd_config as shipped (comments left out): the drop-ins come first.
SSHD_CONFIG = """Include /etc/ssh/sshd_config.d/*.conf
KbdInteractiveAuthentication no
UsePAM yes
X11Forwarding yes
PrintMotd no
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
"""

PRELUDE = r"""#!/bin/bash
# Test stub: records its argv, then simulates just enough state.
set -u
S=/stub/state
me=${0##*/}
{ printf '%s' "$me"; for a in "$@"; do printf '\t%s' "$a"; done; printf '\n'; } >> "$S/calls.log"
if [ -e "$S/fail/$me" ] || [ -e "$S/fail/$me ${1-}" ]; then
  rm -f "$S/fail/$me" "$S/fail/$me ${1-}"
  echo "$me: simulated failure" >&2; exit 1
fi
esc() { printf '%s' "${1//\//_}"; }
key() { esc "$(readlink -f "$1")"; }  # state is kept per device, whatever path names it
make_fs() {  # type dev: a filesystem with a UUID that follows from the device
  local uuid
  uuid=$(printf '%s' "$(readlink -f "$2")" | md5sum | cut -c1-32 \
    | sed 's/\(.\{8\}\)\(.\{4\}\)\(.\{4\}\)\(.\{4\}\)/\1-\2-\3-\4-/')
  printf '%s %s %s\n' "$1" "$uuid" "$(readlink -f "$2")" > "$S/fs/$(key "$2")"
}
"""

STUBS: dict[str, str] = {
    # What pkgs.k8s.io serves as Release.key: $S/release-key (Sandbox.serve_release_key), else
    # the real signing key. The stub's key format: one "stub-key <fingerprint> [<expiry>]" line per
    # primary key, between the armor lines.
    "curl": r"""
out='' url=''
while [ $# -gt 0 ]; do
  case "$1" in -o|--output) out=$2; shift ;; -*) ;; *) url=$1 ;; esac
  shift
done
page="$S/web/$(printf '%s' "$url" | tr '/:' '__')"
served() {
  if [ -e "$page" ]; then cat "$page"
  elif [ "$url" = "${url#https://pkgs.k8s.io/}" ]; then
    echo "curl: (6) Could not resolve host: $(cut -d/ -f3 <<<"$url")" >&2; return 6
  elif [ -e "$S/release-key" ]; then cat "$S/release-key"; else
    printf -- '-----BEGIN PGP PUBLIC KEY BLOCK-----\nstub-key %s\n%s\n' __K8S_KEY_FPR__ \
      '-----END PGP PUBLIC KEY BLOCK-----'
  fi
}
if [ -n "$out" ]; then served > "$out"; else served; fi
""",
    # --dearmor drops the armor lines; --show-keys --with-colons lists each primary key as gpg
    # does (pub with its expiry in field 7, fpr, uid, then a subkey with its own fpr).
    "gpg": r"""
out='' mode='' in=''
while [ $# -gt 0 ]; do
  case "$1" in
    -o|--output) out=$2; shift ;;
    --dearmor) mode=dearmor ;;
    --show-keys) mode=show ;;
    -*) ;;
    *) in=$1 ;;
  esac
  shift
done
src() { if [ -n "$in" ]; then cat "$in"; else cat; fi; }
case "$mode" in
  dearmor) src | grep -v -- '-----' > "${out:-/dev/stdout}" ;;
  show)
    keys=$(src | grep '^stub-key ' || true)
    [ -n "$keys" ] || { echo "gpg: no valid OpenPGP data found." >&2; exit 2; }
    while read -r _ fpr expiry; do
      printf 'pub:-:2048:1:%s:1661385600:%s::-:::scSC::::::23::0:\nfpr:::::::::%s:\n' \
        "${fpr: -16}" "${expiry-}" "$fpr"
      printf 'uid:-::::1661385600::0::isv:kubernetes OBS Project::::::::::0:\n'
      printf 'sub:-:2048:1:%s:1661385600::::::e::::::23:\nfpr:::::::::%s:\n' \
        "$(rev <<<"${fpr: -16}")" "$(rev <<<"$fpr")"
    done <<<"$keys" ;;
  *) src > "${out:-/dev/null}" ;;
esac
""",
    "apt-get": r"""
[ "${1-}" = install ] || exit 0
shift
allow_held=0
for a in "$@"; do [ "$a" = --allow-change-held-packages ] && allow_held=1; done
for a in "$@"; do
  case "$a" in -*) continue ;; esac
  name=${a%%=*}; version=${a#*=}; [ "$version" = "$a" ] && version=1.0-stub
  if [ -e "$S/held/$name" ] && [ "$allow_held" = 0 ]; then
    echo "E: Held packages were changed and -y was used without --allow-change-held-packages." >&2
    exit 100
  fi
  case "$name" in  # one driver branch at a time: the packages conflict
    nvidia-driver-*-server-open) rm -f "$S"/pkgs/nvidia-driver-*-server-open ;;
    nvidia-fabricmanager-*) rm -f "$S"/pkgs/nvidia-fabricmanager-* ;;
    libnvidia-nscq-*) rm -f "$S"/pkgs/libnvidia-nscq-* ;;
  esac
  printf '%s\n' "$version" > "$S/pkgs/$name"
  case "$name" in kubelet) mkdir -p /etc/kubernetes/manifests ;; esac
done
""",
    "apt-mark": r"""
verb=${1-}; shift || true
case "$verb" in
  hold) for p in "$@"; do touch "$S/held/$p"; done ;;
  unhold) for p in "$@"; do rm -f "$S/held/$p"; done ;;
  showhold) for p in "$S"/held/*; do [ -e "$p" ] && echo "${p##*/}"; done ;;
esac
exit 0
""",
    "dpkg": r"""
case "${1-}" in
  -s|--status)
    if [ -e "$S/pkgs/${2-}" ]; then
      printf 'Package: %s\nStatus: install ok installed\nVersion: %s\n' "$2" "$(cat "$S/pkgs/$2")"
      exit 0
    fi
    echo "dpkg-query: package '${2-}' is not installed and no information is available" >&2
    exit 1 ;;
esac
""",
    "dpkg-query": r"""
fmt='${Package}\n'; pkg=
while [ $# -gt 0 ]; do
  case "$1" in
    -f|--showformat) fmt=$2; shift ;;
    -f=*|--showformat=*) fmt=${1#*=} ;;
    -*) ;;
    *) pkg=$1 ;;
  esac
  shift
done
if [ -z "$pkg" ] || [ ! -e "$S/pkgs/$pkg" ]; then
  echo "dpkg-query: no packages found matching $pkg" >&2; exit 1
fi
out=${fmt//'${Version}'/$(cat "$S/pkgs/$pkg")}
printf '%b' "${out//'${Package}'/$pkg}"
""",
    "systemctl": r"""
verb='' unit='' now=0 quiet=0
for a in "$@"; do
  case "$a" in
    --now) now=1 ;;
    --quiet|-q) quiet=1 ;;
    -*) ;;
    *) if [ -z "$verb" ]; then verb=$a; elif [ -z "$unit" ]; then unit=${a%.service}; fi ;;
  esac
done
case "$unit" in
  containerd) pkgs="containerd containerd.io" ;;
  lnet) pkgs=lustre-client-utils ;;
  ssh) pkgs=openssh-server ;;
  nvidia-fabricmanager) pkgs=$(cd "$S/pkgs" && echo nvidia-fabricmanager-*) ;;
  *) pkgs=$unit ;;
esac
exists=0
for p in $pkgs; do [ -e "$S/pkgs/$p" ] && exists=1; done
[ -e "/etc/systemd/system/$unit.service" ] && exists=1
case "$unit" in *.timer) [ -e "/etc/systemd/system/$unit" ] && exists=1 ;; esac
case "$verb" in
  daemon-reload) exit 0 ;;
  is-enabled|is-active)
    flag=enabled; [ "$verb" = is-active ] && flag=active
    if [ -e "$S/units/$unit.$flag" ]; then [ "$quiet" = 1 ] || echo "$flag"; exit 0; fi
    [ "$quiet" = 1 ] || echo "not-$flag"; exit 1 ;;
esac
if [ "$exists" = 0 ]; then
  echo "Failed to $verb $unit.service: Unit $unit.service not found." >&2; exit 5
fi
case "$verb" in
  enable) touch "$S/units/$unit.enabled"; [ "$now" = 1 ] && touch "$S/units/$unit.active" ;;
  disable) rm -f "$S/units/$unit.enabled" ;;
  start|restart|reload) touch "$S/units/$unit.active" ;;
  stop) rm -f "$S/units/$unit.active" ;;
esac
exit 0
""",
    "modprobe": r"""
for m in "$@"; do case "$m" in -*) ;; *) touch "$S/modules/${m//-/_}" ;; esac; done
""",
    "lsmod": r"""
echo "Module                  Size  Used by"
for m in "$S"/modules/*; do [ -e "$m" ] && printf '%-24s %7d  0\n' "${m##*/}" 16384; done
exit 0
""",
    # sysctl -n KEY: the last value the sysctl.d files (in name order), then /etc/sysctl.conf,
    # give it, as `sysctl --system` leaves it; else the kernel's default.
    "sysctl": r"""
[ "${1-}" = -n ] || exit 0
key=$2 value=''
for f in /etc/sysctl.d/*.conf /etc/sysctl.conf; do  # the glob is in name order
  [ -f "$f" ] || continue
  v=$(sed -n "s/^[[:space:]]*${key//./\\.}[[:space:]]*=[[:space:]]*//p" "$f" | tail -1)
  [ -z "$v" ] || value=$v
done
if [ -z "$value" ]; then
  case "$key" in
    kernel.keys.root_maxkeys) value=200 ;;
    kernel.keys.root_maxbytes) value=20000 ;;
    *) value=0 ;;
  esac
fi
printf '%s\n' "$value"
""",
    "swapon": r"""
case "${1-}" in
  --show*|-s) [ -e "$S/swap" ] && echo /swap.img; exit 0 ;;
esac
touch "$S/swap"
""",
    "swapoff": r"""
rm -f "$S/swap"
""",
    "containerd": r"""
if [ "${1-}" = config ] && [ "${2-}" = default ]; then
  printf '%s\n' 'version = 2' \
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]' \
    '  SystemdCgroup = false'
fi
""",
    "mdadm": r"""
# Arrays live in the fake /sys/block (slaves, holders, md/level, md/uuid), their device nodes
# in /stub/state/dev (bound over /dev on every run); superblocks in $S/disks/<member>.
start_array() {  # node level uuid member...: what the kernel shows once an array runs
  local node=$1 level=$2 uuid=$3 n=127 md d c name total=0; shift 3
  while [ -e "/sys/block/md$n" ]; do n=$((n - 1)); done
  md=md$n
  mkdir -p "/sys/block/$md/slaves" "/sys/block/$md/holders" "/sys/block/$md/md"
  echo "$level" > "/sys/block/$md/md/level"; echo "$uuid" > "/sys/block/$md/md/uuid"
  for d in "$@"; do
    c=$(readlink -f "$d"); name=${c##*/}
    ln -s "../../$name" "/sys/block/$md/slaves/$name"
    mkdir -p "/sys/block/$name/holders"; ln -s "../../$md" "/sys/block/$name/holders/$md"
    echo "$uuid $level" > "$S/disks/$(esc "$c")"
    total=$((total + $(cat "/sys/block/$name/size")))
  done
  echo "$total" > "/sys/block/$md/size"
  : > "$S/dev/$md"; : > "/dev/$md"
  mkdir -p "${node%/*}"; ln -sfn "../$md" "$node"
  echo "mdadm: array $node started." >&2
}
mode=${1-}; shift || true
case "$mode" in
  --examine|-E)
    rc=0
    for d in "$@"; do
      sleep 0.02  # reading a superblock is disk I/O; output arrives device by device
      if [ -e "$S/disks/$(key "$d")" ]; then
        read -r uuid level < "$S/disks/$(key "$d")"
        printf '%s:\n          Magic : a92b4efc\n     Array UUID : %s\n     Raid Level : %s\n' \
          "$d" "$uuid" "$level"
      else
        echo "mdadm: No md superblock detected on $d." >&2; rc=1
      fi
    done
    exit "$rc" ;;
  --create|-C)
    md=$1; shift; devs=() level=raid0
    for a in "$@"; do
      case "$a" in --level=*) level=raid${a#--level=} ;; -*) ;; *) devs+=("$a") ;; esac
    done
    for d in "${devs[@]}"; do
      [ -e "$d" ] || { echo "mdadm: cannot open $d: No such file or directory" >&2; exit 1; }
    done
    start_array "$md" "$level" "$(printf '%s' "${devs[*]}" | md5sum | cut -c1-32 \
      | sed 's/.\{8\}/&:/g; s/:$//')" "${devs[@]}" ;;
  --assemble|-A)
    md=$1; shift; uuid='' level=''
    for d in "$@"; do
      [ -e "$S/disks/$(key "$d")" ] || { echo "mdadm: no RAID superblock on $d" >&2; exit 1; }
      read -r u l < "$S/disks/$(key "$d")"
      [ -z "$uuid" ] || [ "$u" = "$uuid" ] || { echo "mdadm: $d is not in $uuid" >&2; exit 1; }
      uuid=$u level=$l
    done
    start_array "$md" "$level" "$uuid" "$@" ;;
  --detail|-D)
    if [ "${1-}" = --scan ]; then
      for m in /sys/block/md*/md; do
        [ -e "$m" ] || continue; m=${m%/md}
        printf 'ARRAY /dev/%s metadata=1.2 UUID=%s\n' "${m##*/}" "$(cat "$m/md/uuid")"
      done
      exit 0
    fi
    m=/sys/block/$(basename "$(readlink -f "$1")")
    [ -d "$m/md" ] || { echo "mdadm: cannot open $1: No such file or directory" >&2; exit 1; }
    printf '%s:\n     Raid Level : %s\n           UUID : %s\n' "$1" "$(cat "$m/md/level")" \
      "$(cat "$m/md/uuid")"
    for s in "$m"/slaves/*; do printf '       active sync   /dev/%s\n' "${s##*/}"; done ;;
esac
exit 0
""",
    "mkfs.xfs": r"""
dev=${*: -1}; force=0
for a in "$@"; do [ "$a" = -f ] && force=1; done
[ -e "$dev" ] || { echo "mkfs.xfs: cannot open $dev: No such file or directory" >&2; exit 1; }
if [ -e "$S/fs/$(key "$dev")" ] && [ "$force" = 0 ]; then
  echo "mkfs.xfs: $dev appears to contain an existing filesystem." >&2
  exit 1
fi
make_fs xfs "$dev"
""",
    "mkfs.ext4": r"""
dev=${*: -1}
[ -e "$dev" ] || { echo "mke2fs: No such file or directory: $dev" >&2; exit 1; }
make_fs ext4 "$dev"
""",
    "blkid": r"""
# blkid [-p] [-s TAG] [-o value] DEV: a filesystem, or an md member's superblock; exit 2: none.
tag='' value=0 dev=''
while [ $# -gt 0 ]; do
  case "$1" in
    -s) tag=$2; shift ;;
    -o) [ "$2" = value ] && value=1; shift ;;
    -*) ;;
    *) dev=$1 ;;
  esac
  shift
done
[ -n "$dev" ] && [ -e "$dev" ] || exit 2
if [ -e "$S/fs/$(key "$dev")" ]; then
  read -r TYPE UUID _ < "$S/fs/$(key "$dev")"
elif [ -e "$S/disks/$(key "$dev")" ]; then
  read -r UUID _ < "$S/disks/$(key "$dev")"; TYPE=linux_raid_member
else
  exit 2
fi
case "$tag" in
  TYPE|UUID)
    if [ "$value" = 1 ]; then printf '%s\n' "${!tag}"
    else printf '%s="%s"\n' "$tag" "${!tag}"; fi ;;
  *) printf '%s: UUID="%s" TYPE="%s"\n' "$dev" "$UUID" "$TYPE" ;;
esac
""",
    "mount": r"""
[ $# -eq 1 ] || { echo "mount: stub mounts only by fstab mount point" >&2; exit 1; }
mp=$1
line=$(awk -v mp="$mp" '$1 !~ /^#/ && $2 == mp' /etc/fstab)
[ -n "$line" ] || { echo "mount: $mp: can't find in /etc/fstab." >&2; exit 1; }
dev=${line%%[[:space:]]*}
if [ "${dev#UUID=}" != "$dev" ]; then
  for f in "$S"/fs/*; do
    [ -e "$f" ] || continue
    read -r _ uuid path < "$f"
    if [ "$uuid" = "${dev#UUID=}" ]; then dev=$path; fi
  done
  [ "${dev#UUID=}" = "$dev" ] || { echo "mount: $mp: can't find $dev." >&2; exit 1; }
fi
[ -e "$dev" ] || { echo "mount: $mp: special device $dev does not exist." >&2; exit 32; }
[ -e "$S/fs/$(key "$dev")" ] || { echo "mount: $mp: wrong fs type on $dev." >&2; exit 32; }
[ -d "$mp" ] || { echo "mount: $mp: mount point does not exist." >&2; exit 32; }
printf '%s %s\n' "$(readlink -f "$dev")" "$mp" > "$S/mounts/$(esc "$mp")"
""",
    "findmnt": r"""
# findmnt -rn -o SOURCE,TARGET: what the mount stub (and the fake boot) mounted.
for f in "$S"/mounts/*; do [ -e "$f" ] && cat "$f"; done
exit 0
""",
    "umount": r"""
rm -f "$S/mounts/$(esc "${*: -1}")"
""",
    "mountpoint": r"""
[ -e "$S/mounts/$(esc "${*: -1}")" ]
""",
    "kubeadm": r"""
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
    [ -n "$cfg" ] && [ -f "$cfg" ] || { echo "kubeadm: config file $cfg not found" >&2; exit 1; }
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
    [ -n "$cfg" ] && [ -f "$cfg" ] || { echo "kubeadm: config file $cfg not found" >&2; exit 1; }
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
    [ -n "$cfg" ] && [ -f "$cfg" ] || { echo "kubeadm: config file $cfg not found" >&2; exit 1; }
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
""",
    "kubectl": r"""
kc=${KUBECONFIG:-}; args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kubeconfig) kc=$2; shift ;;
    --kubeconfig=*) kc=${1#*=} ;;
    *) args+=("$1") ;;
  esac
  shift
done
if [ -z "$kc" ] || [ ! -f "$kc" ] || [ -e "$S/api-down" ]; then
  echo "The connection to the server 10.10.0.10:6443 was refused" >&2
  exit 1
fi
set -- "${args[@]}"
N=$S/cluster/nodes
# ConfigMaps (kube-system only): $S/cluster/configmaps/<name>/<key>; `create` is atomic.
CM=$S/cluster/configmaps
ns=''; rest=()
while [ $# -gt 0 ]; do
  case "$1" in -n|--namespace) ns=$2; shift ;; *) rest+=("$1") ;; esac
  shift
done
set -- "${rest[@]}"
jsonpath=''
for a in "$@"; do case "$a" in jsonpath=*) jsonpath=${a#jsonpath=} ;; esac; done
verb=$1; shift
if [ "${1-}" = configmap ]; then
  [ "$ns" = kube-system ] || { echo "stub: configmaps in kube-system only" >&2; exit 1; }
  name=$2; mkdir -p "$CM"
  case "$verb" in
    create)
      mkdir "$CM/$name" 2>/dev/null \
        || { echo "error: configmaps \"$name\" already exists" >&2; exit 1; }
      for a in "$@"; do
        case "$a" in
          --from-literal=*)
            kv=${a#--from-literal=}; printf '%s' "${kv#*=}" > "$CM/$name/${kv%%=*}" ;;
        esac
      done
      echo "configmap/$name created" ;;
    get)
      if [ ! -d "$CM/$name" ]; then
        for a in "$@"; do [ "$a" = --ignore-not-found ] && exit 0; done
        echo "Error from server (NotFound): configmaps \"$name\" not found" >&2; exit 1
      fi
      key=${jsonpath#\{.data.}; key=${key%\}}
      cat "$CM/$name/$key" 2>/dev/null || true ;;
    delete)
      [ -d "$CM/$name" ] \
        || { echo "Error from server (NotFound): configmaps \"$name\" not found" >&2; exit 1; }
      rm -rf "${CM:?}/$name"; echo "configmap \"$name\" deleted" ;;
  esac
  exit 0
fi
# The API server's version; kubelet versions ($S/cluster/kubelet/<node>); node annotations
# ($S/cluster/annotations/<node>/<key>); running pods ($S/cluster/pods: namespace, gang (Volcano's
# group-name annotation), node and the Training Operator owning it (its operator-name label),
# tab-separated).
A=$S/cluster/annotations
case "$verb ${1-}" in
  "get --raw")
    printf '{\n  "major": "1",\n  "gitVersion": "v%s",\n  "platform": "linux/amd64"\n}\n' \
      "$(cat "$S/cluster/version")"
    exit 0 ;;
  "get pods")
    cat "$S/cluster/pods" 2>/dev/null; exit 0 ;;
  "get secret")  # $S/cluster/secrets/<namespace>/<name>/<key>
    [ -d "$S/cluster/secrets/$ns/$2" ] \
      || { echo "Error from server (NotFound): secrets \"$2\" not found" >&2; exit 1; }
    echo "$2   Opaque   1   1s"; exit 0 ;;
  "create secret")
    [ "$2" = generic ] || { echo "stub: generic secrets only" >&2; exit 1; }
    d="$S/cluster/secrets/$ns/$3"
    mkdir -p "$(dirname "$d")"
    mkdir "$d" 2>/dev/null || { echo "error: secrets \"$3\" already exists" >&2; exit 1; }
    for a in "${@:4}"; do
      case "$a" in
        --from-file=*=*) kv=${a#--from-file=}; cat "${kv#*=}" > "$d/${kv%%=*}" ;;
        --from-literal=*=*) kv=${a#--from-literal=}; printf '%s' "${kv#*=}" > "$d/${kv%%=*}" ;;
      esac
    done
    echo "secret/$3 created"; exit 0 ;;
  "annotate node")
    [ -e "$N/$2" ] || { echo "Error from server (NotFound): nodes \"$2\" not found" >&2; exit 1; }
    mkdir -p "$A/$2"
    for a in "${@:3}"; do
      case "$a" in
        -*) ;;
        *=*) k=${a%%=*}; printf '%s' "${a#*=}" > "$A/$2/${k//\//_}" ;;
        *-) k=${a%-}; rm -f "$A/$2/${k//\//_}" ;;
      esac
    done
    echo "node/$2 annotated"; exit 0 ;;
  "wait --for=jsonpath="*)
    want=${1##*=}; node=${2#node/}
    [ "$(cat "$S/cluster/kubelet/$node" 2>/dev/null)" = "$want" ] \
      || { echo "error: timed out waiting for the condition on nodes/$node" >&2; exit 1; }
    echo "node/$node condition met"; exit 0 ;;
esac
case "$jsonpath" in
  '{.status.nodeInfo.kubeletVersion}')
    cat "$S/cluster/kubelet/$2" 2>/dev/null; exit 0 ;;
  '{.metadata.annotations.'*)
    k=${jsonpath#\{.metadata.annotations.}; k=${k%\}}; k=${k//\\./.}
    cat "$A/$2/${k//\//_}" 2>/dev/null; exit 0 ;;
esac
case "$verb" in
  apply)
    # `apply -f <file|->`: the documents are kept, in order, as the cluster's applied objects.
    src=-; prev=''
    for a in "$@"; do [ "$prev" = -f ] && src=$a; prev=$a; done
    mkdir -p "$S/cluster"
    if [ "$src" = - ]; then cat >> "$S/cluster/applied"; else cat "$src" >> "$S/cluster/applied"; fi
    echo "applied"; exit 0 ;;
  get)
    [ "$1" = node ] || [ "$1" = nodes ] || exit 0
    if [ "$jsonpath" = '{.spec.unschedulable}' ]; then
      [ -e "$N/$2" ] || { echo "Error from server (NotFound): nodes \"$2\" not found" >&2; exit 1; }
      last=$(grep -E '^(cordon|uncordon|drain)$' "$N/$2" | tail -1)
      case "$last" in cordon|drain) printf true ;; esac
      exit 0
    fi
    name=$2 ignore=0 out=''
    for a in "$@"; do
      case "$a" in
        --ignore-not-found|--ignore-not-found=true) ignore=1 ;;
        -oname|--output=name) out=name ;;
      esac
    done
    prev=
    for a in "$@"; do [ "$prev" = -o ] && [ "$a" = name ] && out=name; prev=$a; done
    if [ -e "$N/$name" ]; then
      if [ "$out" = name ]; then echo "node/$name"; else echo "$name Ready"; fi
      exit 0
    fi
    [ "$ignore" = 1 ] && exit 0
    echo "Error from server (NotFound): nodes \"$name\" not found" >&2; exit 1 ;;
  cordon|uncordon|drain)
    [ -e "$N/$1" ] || { echo "Error from server (NotFound): nodes \"$1\" not found" >&2; exit 1; }
    echo "$verb" >> "$N/$1"; echo "node/$1 ${verb}ed" ;;
  delete)
    [ -e "$N/$2" ] || { echo "Error from server (NotFound): nodes \"$2\" not found" >&2; exit 1; }
    rm -f "$N/$2"; echo "node \"$2\" deleted" ;;
esac
exit 0
""",
    "update-grub": r"""
touch "$S/grub-updated"
""",
    # The local SM's state (sminfo -D 0): $S/sm-state, else what a lone opensm reports.
    # Polling loops run at once (the state they wait for is set by the test).
    "sleep": "",
    "sminfo": r"""
state=$(cat "$S/sm-state" 2>/dev/null || echo SMINFO_MASTER)
echo "sminfo: sm lid 1 sm guid 0xb83fd20300f10002, activity count 42 priority 15 state 3 $state"
""",
    # Record-only: present so nothing reaches a real binary.
    "update-initramfs": "",
    "opensm": "",
    # `openssl rand -hex N`: N random bytes as hex, like the real one; anything else: nothing.
    "openssl": r"""
if [ "${1-}" = rand ] && [ "${2-}" = -hex ]; then
  od -An -N"$3" -tx1 /dev/urandom | tr -d ' \n'; echo
fi
""",
    # ip -o -4 addr show to ADDR: the interfaces in $S/addresses ("<name> <address>/<len>" lines,
    # Sandbox.set_addresses) holding ADDR; without that file, eno1 holds whatever address is
    # asked for (the host's management address). Anything else: nothing.
    "ip": r"""
want=''
prev=''
for a in "$@"; do [ "$prev" = to ] && want=${a%/32}; prev=$a; done
[ -n "$want" ] || exit 0
if [ -e "$S/addresses" ]; then
  n=2
  while read -r name cidr; do
    [ "${cidr%/*}" = "$want" ] || continue
    printf '%d: %s    inet %s scope global %s\\       valid_lft forever\n' "$n" "$name" "$cidr" \
      "${name%@*}"
    n=$((n + 1))
  done < "$S/addresses"
else
  printf '2: eno1    inet %s/16 scope global eno1\\       valid_lft forever\n' "$want"
fi
""",
    # nft: -c -f FILE checks (the table is named and the braces balance); -f FILE loads it
    # ($S/nft-loaded); list table inet gpu_cluster prints what is loaded; delete table drops it.
    "nft": r"""
check() {
  [ -f "$1" ] || { echo "Error: No such file or directory: $1" >&2; exit 1; }
  grep -q '^table inet gpu_cluster {' "$1" \
    || { echo "Error: syntax error in $1" >&2; exit 1; }
  [ "$(tr -cd '{' < "$1" | wc -c)" = "$(tr -cd '}' < "$1" | wc -c)" ] \
    || { echo "$1: Error: syntax error, unexpected end of file" >&2; exit 1; }
}
case "${1-}" in
  -c|--check) check "$3" ;;
  -f|--file) check "$2"; cp "$2" "$S/nft-loaded" ;;
  list)
    [ -e "$S/nft-loaded" ] || { echo "Error: No such file or directory" >&2; exit 1; }
    cat "$S/nft-loaded" ;;
  delete) [ -e "$S/nft-loaded" ] && rm -f "$S/nft-loaded" ;;
esac
exit 0
""",
    # sshd -t [-f FILE]: the configuration's syntax (known keywords, yes/no values, one
    # definition per Subsystem), Include globs followed; sshd -T: the values in effect, the first
    # one read winning, as sshd does.
    "sshd": r"""
mode='' file=/etc/ssh/sshd_config
while [ $# -gt 0 ]; do
  case "$1" in -t) mode=test ;; -T) mode=dump ;; -f) file=$2; shift ;; esac
  shift
done
declare -A first=() subsystems=()
bad=0
walk() {
  local f=$1 n=0 line key value inc
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    line=${line#"${line%%[![:space:]]*}"}
    case "$line" in ''|'#'*) continue ;; esac
    key=${line%%[[:space:]]*}; value=${line#"$key"}; value=${value#"${value%%[![:space:]]*}"}
    key=${key,,}
    case "$key" in
      include)
        inc=$value; [ "${inc#/}" != "$inc" ] || inc=/etc/ssh/$inc
        for inc in $inc; do  # a glob, in name order
          if [ -f "$inc" ]; then walk "$inc"; fi
        done
        continue ;;
      passwordauthentication|kbdinteractiveauthentication|pubkeyauthentication|usepam|\
      x11forwarding|printmotd|challengeresponseauthentication)
        case "${value,,}" in yes|no) ;; *)
          echo "$f line $n: unsupported option \"$value\"." >&2; bad=$((bad + 1)); continue ;;
        esac ;;
      permitrootlogin)
        case "${value,,}" in yes|no|prohibit-password|without-password|forced-commands-only) ;; *)
          echo "$f line $n: unsupported option \"$value\"." >&2; bad=$((bad + 1)); continue ;;
        esac ;;
      subsystem)
        if [ -n "${subsystems[${value%% *}]-}" ]; then
          echo "$f line $n: Subsystem '${value%% *}' already defined." >&2; bad=$((bad + 1))
        fi
        subsystems[${value%% *}]=1 ;;
      port|listenaddress|hostkey|acceptenv|authorizedkeysfile|authenticationmethods|\
      allowusers|allowgroups|maxauthtries|logingracetime) ;;
      *) echo "$f: line $n: Bad configuration option: ${line%%[[:space:]]*}" >&2
         bad=$((bad + 1)); continue ;;
    esac
    [ -n "${first[$key]-}" ] || first[$key]=${value,,}
  done < "$f"
}
[ -f "$file" ] || { echo "sshd: $file: No such file or directory" >&2; exit 255; }
walk "$file"
if [ "$bad" -gt 0 ]; then
  echo "$file: terminating, $bad bad configuration options" >&2; exit 255
fi
if [ "$mode" = dump ]; then
  for key in passwordauthentication kbdinteractiveauthentication pubkeyauthentication \
      permitrootlogin usepam; do
    case "$key" in
      permitrootlogin) def=without-password ;; usepam) def=no ;; *) def=yes ;;
    esac
    printf '%s %s\n' "$key" "${first[$key]-$def}"
  done
fi
exit 0
""",
    # ss -Htn state established '( sport = :22 )': the SSH clients in $S/ssh-clients (addresses,
    # one a line; Sandbox.ssh_clients), as ss prints them.
    "ss": r"""
[ -e "$S/ssh-clients" ] || exit 0
while read -r peer; do
  printf '0      0      10.10.0.1:22      %s:50022\n' "$peer"
done < "$S/ssh-clients"
""",
    "hostnamectl": "",
    "udevadm": "",
    "reboot": "",
    # shutdown -r +N: scheduled, and /run/nologin written at once (systemd does within 5 min).
    "shutdown": r"""
echo "$*" > "$S/shutdown-scheduled"
echo "System is going down." > /run/nologin
""",
    "wipefs": "",
    # LNet as lnetctl keeps it: $S/lnet/configured after `lnet configure`, one file per net
    # (what `import` read for it) in $S/lnet/nets; `export` prints them. Importing a net that
    # exists fails, as adding an NI that exists does.
    "lnetctl": r"""
mkdir -p "$S/lnet/nets"
case "${1-} ${2-}" in
  "lnet configure") touch "$S/lnet/configured"; exit 0 ;;
  "lnet unconfigure") rm -rf "$S/lnet/configured" "$S/lnet/nets"; exit 0 ;;
  "net del")
    [ "${3-}" = --net ] && [ -e "$S/lnet/nets/${4-}" ] \
      || { echo "del: no such net ${4-}" >&2; exit 1; }
    rm -f "$S/lnet/nets/$4"; exit 0 ;;
esac
case "${1-}" in
  import)
    [ -e "$S/lnet/configured" ] || { echo "import: LNet is not configured" >&2; exit 1; }
    [ -f "${2-}" ] || { echo "import: cannot open ${2-}" >&2; exit 1; }
    nets=$(sed -n 's/^- net type: //p' "$2")
    [ -n "$nets" ] || { echo "import: no net in $2" >&2; exit 1; }
    for n in $nets; do
      [ ! -e "$S/lnet/nets/$n" ] || { echo "add: $n: File exists" >&2; exit 1; }
    done
    for n in $nets; do cp "$2" "$S/lnet/nets/$n"; done ;;
  export)
    for f in "$S"/lnet/nets/*; do [ -e "$f" ] && cat "$f"; done ;;
esac
exit 0
""",
    # DOCA-OFED on the host, as `ofed_info -s` reports it.
    # DOCA-OFED's: only once doca-ofed is installed (DGX OS runs the kernel's own RDMA stack).
    "ofed_info": r"""
[ -e "$S/pkgs/doca-ofed" ] || { echo "ofed_info: command not found" >&2; exit 127; }
echo "OFED-internal-24.10-2.1.8:"
""",
    # `dkms status -m M -k K`: a module is built for the running kernel once its -dkms package
    # is installed (mlnx-ofed-kernel comes with doca-ofed), unless the test failed its build.
    "dkms": r"""
m='' k=''
while [ $# -gt 0 ]; do case "$1" in -m) m=$2; shift ;; -k) k=$2; shift ;; esac; shift; done
case "$m" in mlnx-ofed-kernel) pkg=doca-ofed ;; *) pkg=$m-dkms ;; esac
if [ -e "$S/pkgs/$pkg" ] && [ ! -e "$S/dkms-failed-$m" ]; then
  echo "$m/$(cut -d- -f1 "$S/pkgs/$pkg"), ${k:-$(uname -r)}, x86_64: installed"
fi
""",
    "netplan": "",
    "wget": "",
}

# Calls that only read state; every other stubbed call changes the host.
# curl only downloads, into a temporary directory the script removes again (a repository's key
# and index, checked before anything is installed).
READ_ONLY = {"curl", "dkms", "dpkg-query", "lsmod", "mountpoint", "blkid", "openssl", "findmnt",
             "sminfo", "sleep", "ofed_info", "ss"}
READ_ONLY_VERBS = {
    "systemctl": {"is-enabled", "is-active", "status", "show", "cat"},
    "dpkg": {"-s", "--status", "-l", "-L"},
    "mdadm": {"--examine", "-E", "--detail", "-D"},
    "kubectl": {"get", "wait", "version"},
    "kubeadm": {"version"},
    "containerd": {"config"},
    "swapon": {"--show", "-s"},
    "lnetctl": {"export", "show"},
    "gpg": {"--show-keys"},
    "nft": {"-c", "--check", "list"},
    "sshd": {"-t", "-T"},
    "sysctl": {"-n"},
    "ip": {"show", "list", "get"},
}

Call = tuple[str, ...]


def _verb(call: Call) -> str:
    args = list(call[1:])
    if call[0] == "ip":  # ip [options] OBJECT [COMMAND]: the command, `show` when none
        args = [a for a in args if not a.startswith("-")]
        return args[1] if len(args) > 1 else "show"
    while args and args[0].startswith("-") and call[0] in ("systemctl", "kubectl"):
        opt = args.pop(0)
        if opt in ("--kubeconfig", "-n", "--namespace") and args:
            args.pop(0)
    return args[0].split("=")[0] if args else ""


def changes_state(call: Call) -> bool:
    if call[0] in READ_ONLY:
        return False
    return _verb(call) not in READ_ONLY_VERBS.get(call[0], set())


@dataclass
class Run:
    """One script run: exit status, output and the stub calls it made, in order."""

    returncode: int
    stdout: str
    stderr: str
    calls: list[Call]

    def count(self, *prefix: str) -> int:
        """Calls whose argv starts with `prefix` (`count("kubeadm", "init")`)."""
        return sum(1 for c in self.calls if c[: len(prefix)] == prefix)

    def find(self, *prefix: str) -> list[Call]:
        return [c for c in self.calls if c[: len(prefix)] == prefix]

    @property
    def changes(self) -> list[Call]:
        """Every state-changing call of this run."""
        return [c for c in self.calls if changes_state(c)]

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def explain(self) -> str:
        calls = "\n".join("  " + " ".join(c) for c in self.calls)
        return (f"exit {self.returncode}\n--- calls\n{calls}\n--- stdout\n{self.stdout}"
                f"--- stderr\n{self.stderr}")


@functools.cache
def unavailable() -> str | None:
    """Why sandboxed runs cannot work here, or None when they can."""
    if shutil.which("bwrap") is None:
        return ("bubblewrap (bwrap) is not installed: apt-get install bubblewrap "
                "(`make test` installs it)")
    proc = subprocess.run(["bwrap", "--unshare-all", "--unshare-user", "--uid", "0", "--gid", "0",
                           "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr", "--symlink",
                           "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink",
                           "usr/lib64", "/lib64", "--dev", "/dev", "--proc", "/proc",
                           "/usr/bin/true"], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"bubblewrap cannot create a sandbox here: {proc.stderr.strip()}"
    return None


@dataclass
class Sandbox:
    """A fake host: a root directory, stub binaries and their state, run with bubblewrap."""

    base: Path
    hostname: str = "host"
    hcas: Mapping[str, str] = field(default_factory=dict)  # HCA name -> PCI address
    boot_arrays: set[str] = field(default_factory=set)  # md arrays the OS assembles at boot
    # The management interface's MAC (/sys/class/net/eno1/address); by default the inventory's
    # for a prod GPU node of this name.
    management_mac: str | None = None
    # Directories of this machine bound over paths of the sandbox (path there -> path here):
    # state several hosts share, as the simulated data centre's cluster is.
    shared: Mapping[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = self.base / "root"
        self.bin = self.base / "bin"
        self.state = self.base / "state"
        self.cmdline = self.base / "cmdline"
        self.boot_id = self.base / "boot_id"
        for d in ("etc/modules-load.d", "etc/sysctl.d", "etc/modprobe.d", "etc/default",
                  "etc/systemd/network", "var/lib", "var/log", "run", "root", "dev/md",
                  "sys/class/infiniband", "sys/block", "dev/disk/by-id", "stub/bin",
                  "stub/state"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "tmp").mkdir(mode=0o1777, exist_ok=True)
        (self.root / "tmp").chmod(0o1777)
        (self.root / "etc/fstab").write_text(FSTAB)
        (self.root / "etc/hostname").write_text(self.hostname + "\n")
        (self.root / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
        (self.root / "etc/ssh/sshd_config").write_text(SSHD_CONFIG)
        self.cmdline.write_text(CMDLINE)
        self.boot_id.write_text("5f1c8e2a-7b3d-4e6f-9a0b-1c2d3e4f5a6b\n")
        for d in ("pkgs", "held", "units", "modules", "disks", "fs", "mounts", "fail",
                  "cluster/nodes", "dev", "boot-mounts"):
            (self.state / d).mkdir(parents=True, exist_ok=True)
        (self.state / "calls.log").touch()
        (self.state / "swap").touch()  # the installer left a swap file active
        # The stack reaches every host over SSH: sshd is installed and running.
        (self.state / "pkgs/openssh-server").write_text("1:8.9p1-3ubuntu0.10\n")
        (self.state / "units/ssh.enabled").touch()
        (self.state / "units/ssh.active").touch()
        self.bin.mkdir(exist_ok=True)
        for name, body in STUBS.items():
            text = PRELUDE + body.replace("__CERT_KEY__", STUB_CERT_KEY).replace(
                "__INIT_TOKEN__", STUB_INIT_TOKEN).replace("__K8S_KEY_FPR__", K8S_KEY_FPR)
            stub = self.bin / name
            stub.write_text(text)
            stub.chmod(0o755)
        for hca, pci in self.hcas.items():
            self.add_hca(hca, pci)
        mac = self.management_mac or _prod_macs().get(self.hostname)
        if mac:
            self.add_nic("eno1", mac)

    # --- arranging the host -------------------------------------------------------------------
    def add_nic(self, name: str, mac: str) -> None:
        """An Ethernet interface (the management network's) with its MAC address."""
        nic = self.root / "sys/class/net" / name
        nic.mkdir(parents=True, exist_ok=True)
        (nic / "address").write_text(mac + "\n")

    def add_hca(self, hca: str, pci: str) -> None:
        """/sys/class/infiniband/<hca> -> ../../devices/.../<pci>/infiniband/<hca>, whose
        `device` link points at the fake PCI function (so `readlink -f` resolves it), and the
        port's IPoIB interface under <pci>/net and /sys/class/net (named as at boot)."""
        fn = self.root / "sys/devices/pci0000:00" / pci
        (fn / "infiniband" / hca).mkdir(parents=True, exist_ok=True)
        (fn / "infiniband" / hca / "device").symlink_to("../../../" + pci)
        (self.root / "sys/class/infiniband" / hca).symlink_to(
            f"../../devices/pci0000:00/{pci}/infiniband/{hca}")
        self.hcas = {**self.hcas, hca: pci}
        self._name_netdev(pci)

    def add_storage_card(self, hca: str, pci: str) -> None:
        """A dual-port storage ConnectX-7 (DGX H100 slots 1 and 2): port 1 (function 0) the
        InfiniBand HCA `hca`, port 2 (function 1) Ethernet. Being multi-function, udev names
        port 1's interface with its function (ibp170s0f0)."""
        (self.root / "sys/devices/pci0000:00" / (pci[:-1] + "1")).mkdir(parents=True,
                                                                        exist_ok=True)
        self.add_hca(hca, pci)

    def netdev(self, hca: str) -> str:
        """The IPoIB interface of an HCA, as the fake kernel named it at the last boot."""
        return next((self.root / "sys/devices/pci0000:00" / self.hcas[hca] / "net").iterdir()).name

    def _name_netdev(self, pci: str) -> None:
        """Name a port's interface the way udev does at boot: a systemd .link file matching
        `Path=pci-<pci>` sets it, else net_id's predictable name (ib + p<bus>s<slot>, DGX OS:
        0000:18:00.0 is ibp24s0). A stand-in for udev, enough for the names the stack reads."""
        net = self.root / "sys/devices/pci0000:00" / pci / "net"
        for old in net.iterdir() if net.exists() else ():
            (self.root / "sys/class/net" / old.name).unlink(missing_ok=True)
            old.rmdir()
        _, bus, slot_fn = pci.split(":")
        slot, fn = slot_fn.split(".")
        name = f"ibp{int(bus, 16)}s{int(slot, 16)}"
        if any(f.name != pci for f in net.parent.parent.glob(pci[:-1] + "*")):
            name += f"f{int(fn, 16)}"  # net_id: a multi-function device's names say the function
        for link in sorted((self.root / "etc/systemd/network").glob("*.link")):
            text = link.read_text()
            if f"Path=pci-{pci}\n" in text and (m := re.search(r"^Name=(\S+)$", text, re.M)):
                name = m.group(1)
        (net / name).mkdir(parents=True)
        (self.root / "sys/class/net").mkdir(parents=True, exist_ok=True)
        (self.root / "sys/class/net" / name).symlink_to(
            f"../../devices/pci0000:00/{pci}/net/{name}")

    def add_nvme(self, drive: Nvme) -> None:
        """An NVMe namespace the way the kernel and udev show it: /dev/<name> (and its
        partitions), /sys/block/<name>/{size,device/model,device/serial,holders}, and the
        /dev/disk/by-id links of 60-persistent-storage.rules: nvme-<model>_<serial>,
        nvme-<model>_<serial>_<nsid>, nvme-eui.<eui>, each with -part<N> for partitions."""
        block = self.root / "sys/block" / drive.name
        (block / "device").mkdir(parents=True)
        (block / "holders").mkdir()
        (block / "size").write_text(f"{drive.sectors}\n")
        # The NVMe model field is 40 bytes, space-padded; sysfs shows it trimmed.
        (block / "device/model").write_text(drive.model + "\n")
        (block / "device/serial").write_text(drive.serial + "\n")
        (self.state / "dev" / drive.name).touch()
        names = [f"nvme-{drive.model.replace(' ', '_')}_{drive.serial}",
                 f"nvme-{drive.model.replace(' ', '_')}_{drive.serial}_1", f"nvme-eui.{drive.eui}"]
        by_id = self.root / "dev/disk/by-id"
        for link in names:
            (by_id / link).symlink_to(f"../../{drive.name}")
        for number, sectors in enumerate(drive.partitions, start=1):
            part = f"{drive.name}p{number}"
            (block / part / "holders").mkdir(parents=True)
            (block / part / "size").write_text(f"{sectors}\n")
            (block / part / "partition").write_text(f"{number}\n")
            (self.state / "dev" / part).touch()
            for link in names:
                (by_id / f"{link}-part{number}").symlink_to(f"../../{part}")

    def add_array(self, md: str, level: int, members: Iterable[str], fs: str | None = None,
                  boot: bool = True) -> str:
        """A running md array over members (kernel names of disks or partitions), as
        /proc/mdstat and sysfs would show it, with superblocks on the members and, optionally,
        a filesystem. Returns the array's UUID."""
        members = list(members)
        uuid = ":".join(hashlib.md5(f"{md} {members}".encode()).hexdigest()[i:i + 8]
                        for i in range(0, 32, 8))
        block = self.root / "sys/block" / md
        for d in ("slaves", "holders", "md"):
            (block / d).mkdir(parents=True)
        (block / "md/level").write_text(f"raid{level}\n")
        (block / "md/uuid").write_text(uuid + "\n")
        total = 0
        for member in members:
            disk = self._disk_of(member)
            path = f"{disk}/{member}" if disk != member else member
            (block / "slaves" / member).symlink_to(f"../../{path}")
            up = "../" * (path.count("/") + 2)
            (self.root / "sys/block" / path / "holders" / md).symlink_to(f"{up}{md}")
            (self.state / "disks" / f"_dev_{member}").write_text(f"{uuid} raid{level}\n")
            total += int((self.root / "sys/block" / path / "size").read_text())
        (block / "size").write_text(f"{total}\n")
        (self.state / "dev" / md).touch()
        if fs:
            fs_uuid = str(uuid_lib.UUID(hashlib.md5(md.encode()).hexdigest()))
            (self.state / "fs" / f"_dev_{md}").write_text(f"{fs} {fs_uuid} /dev/{md}\n")
        if boot:
            self.boot_arrays.add(md)
        return uuid

    def fs_uuid(self, dev: str) -> str:
        """The UUID of the filesystem on a device (/dev/<kernel name>)."""
        return (self.state / "fs" / dev.replace("/", "_")).read_text().split()[1]

    def mount_at_boot(self, dev: str, mount_point: str) -> None:
        """A filesystem the OS mounts by itself, mounted now and after every reboot."""
        entry = f"{dev} {mount_point}\n"
        name = mount_point.replace("/", "_")
        for d in ("mounts", "boot-mounts"):
            (self.state / d / name).write_text(entry)
        self.path(mount_point).mkdir(parents=True, exist_ok=True)

    def _disk_of(self, name: str) -> str:
        """Kernel name of a partition -> its disk; a disk's name -> itself."""
        return next((p.parent.name for p in (self.root / "sys/block").glob(f"*/{name}")),
                    name)

    def _stop_array(self, md: str) -> None:
        block = self.root / "sys/block" / md
        for slave in (block / "slaves").iterdir():
            disk = self._disk_of(slave.name)
            path = f"{disk}/{slave.name}" if disk != slave.name else slave.name
            (self.root / "sys/block" / path / "holders" / md).unlink(missing_ok=True)
        shutil.rmtree(block)
        (self.state / "dev" / md).unlink(missing_ok=True)

    def serve(self, url: str, text: str | None) -> None:
        """What an HTTPS URL answers (curl); None, or a URL never served: it does not resolve,
        as on a site that forbids the host to reach it."""
        page = self.state / "web" / url.replace("/", "_").replace(":", "_")
        page.parent.mkdir(exist_ok=True)
        if text is None:
            page.unlink(missing_ok=True)
        else:
            page.write_text(text)

    def serve_apt_source(self, source: Any, packages: Mapping[str, str],
                         key_fingerprint: str | None = None) -> None:
        """A flat apt repository (config.AptSource): its signing key (by default the pinned
        one) and its index listing `packages` (name -> version)."""
        self.serve(source.key_url, "\n".join([
            "-----BEGIN PGP PUBLIC KEY BLOCK-----",
            f"stub-key {key_fingerprint or source.key_fingerprint}",
            "-----END PGP PUBLIC KEY BLOCK-----"]) + "\n")
        self.serve(source.url + "Packages", "".join(
            f"Package: {name}\nVersion: {version}\nArchitecture: amd64\n\n"
            for name, version in packages.items()))

    def serve_release_key(self, *keys: tuple[str, int | None]) -> None:
        """What pkgs.k8s.io serves as Release.key: these (fingerprint, expiry) primary keys."""
        lines = [f"stub-key {fpr}" + (f" {expiry}" if expiry else "") for fpr, expiry in keys]
        (self.state / "release-key").write_text("\n".join(
            ["-----BEGIN PGP PUBLIC KEY BLOCK-----", *lines,
             "-----END PGP PUBLIC KEY BLOCK-----"]) + "\n")

    def set_addresses(self, addresses: Mapping[str, str]) -> None:
        """The host's IPv4 addresses (interface -> address/length), as `ip addr` shows them;
        by default eno1 holds the management address."""
        (self.state / "addresses").write_text(
            "".join(f"{name} {cidr}\n" for name, cidr in addresses.items()))

    def ssh_clients(self, *addresses: str) -> None:
        """The peers of the host's established SSH connections (`ss`); by default none."""
        (self.state / "ssh-clients").write_text("".join(f"{a}\n" for a in addresses))

    def install_packages(self, *names: str) -> None:
        for n in names:
            (self.state / "pkgs" / n).write_text("1.0-stub\n")

    def add_node(self, name: str) -> None:
        """A Node object the kubectl stub knows (the API server's view)."""
        (self.state / "cluster/nodes" / name).write_text("")

    def nodes(self) -> set[str]:
        return {p.name for p in (self.state / "cluster/nodes").iterdir()}

    def fail_next(self, command: str) -> None:
        """The next call of `command` ("kubeadm join", "systemctl restart", "mkfs.xfs") fails."""
        (self.state / "fail" / command).touch()

    def sm_state(self, state: str | None) -> None:
        """What the local opensm reports to `sminfo -D 0` (None: a lone master)."""
        path = self.state / "sm-state"
        if state is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(state + "\n")

    def api_down(self, down: bool = True) -> None:
        flag = self.state / "api-down"
        if down:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def install_gpu_driver(self, version: str) -> None:
        """A GPU driver release installed (its driver, fabric manager and NSCQ packages, as
        DGX OS installs them), loaded, and its fabric manager running."""
        branch = version.split(".")[0]
        for pkg in (f"nvidia-driver-{branch}-server-open", f"nvidia-fabricmanager-{branch}",
                    f"libnvidia-nscq-{branch}"):
            (self.state / "pkgs" / pkg).write_text(f"{version}-0ubuntu1\n")
        for flag in ("enabled", "active"):
            (self.state / "units" / f"nvidia-fabricmanager.{flag}").touch()
        self.load_gpu_driver(version)

    def load_gpu_driver(self, version: str) -> None:
        """The NVIDIA kernel module of this boot (/sys/module/nvidia/version)."""
        module = self.root / "sys/module/nvidia"
        module.mkdir(parents=True, exist_ok=True)
        (module / "version").write_text(version + "\n")

    def reboot(self) -> None:
        """Power-cycle: arrays, mounts, modules and /tmp go; disks, /etc and packages stay.
        A kernel command line staged with update-grub takes effect; fstab swap comes back.
        The OS's own arrays and mounts (`boot=True`: DGX OS's md0 and md1, /, /boot/efi,
        /raid) come back as the initramfs and systemd would bring them."""
        for md in sorted((self.root / "sys/block").glob("md*")):
            if md.name not in self.boot_arrays:
                self._stop_array(md.name)
        for d in ("dev/md", "tmp", "run"):
            for p in (self.root / d).iterdir():
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        for d in ("mounts", "modules"):
            for p in (self.state / d).iterdir():
                p.unlink()
        for p in (self.state / "boot-mounts").iterdir():
            shutil.copy(p, self.state / "mounts" / p.name)
        (self.state / "swap").unlink(missing_ok=True)
        # The kernel's ruleset goes; gpu-cluster-firewall.service loads its file at boot.
        (self.state / "nft-loaded").unlink(missing_ok=True)
        rules = self.root / "etc/nftables.d/gpu-cluster.nft"
        if (self.state / "units/gpu-cluster-firewall.enabled").exists() and rules.exists():
            shutil.copy(rules, self.state / "nft-loaded")
        if re.search(r"^[^#].*\sswap\s", (self.root / "etc/fstab").read_text(), re.M):
            (self.state / "swap").touch()
        self.boot_id.write_text(str(uuid_lib.uuid4()) + "\n")
        (self.state / "shutdown-scheduled").unlink(missing_ok=True)
        # The boot loads the installed NVIDIA driver's module and starts the enabled units.
        for pkg in (self.state / "pkgs").glob("nvidia-driver-*-server-open"):
            self.load_gpu_driver(pkg.read_text().strip().split("-")[0])
        for unit in (self.state / "units").glob("*.enabled"):
            unit.with_suffix(".active").touch()
        for pci in self.hcas.values():
            self._name_netdev(pci)
        grub = self.root / "etc/default/grub.d/90-gpu-cluster.cfg"
        if (self.state / "grub-updated").exists() and grub.exists():
            m = re.search(r'\$GRUB_CMDLINE_LINUX_DEFAULT ([^"]*)"', grub.read_text())
            if m:
                self.cmdline.write_text(self.cmdline.read_text().rstrip("\n") + " "
                                        + m.group(1) + "\n")

    # --- running ------------------------------------------------------------------------------
    def command(self) -> list[str]:
        local = self.root / "usr/local/sbin"  # where the stack installs its own programs
        local.mkdir(parents=True, exist_ok=True)
        return [
            "bwrap", "--unshare-all", "--unshare-user", "--uid", "0", "--gid", "0",
            "--cap-drop", "ALL", "--die-with-parent", "--new-session",
            "--hostname", self.hostname,
            "--bind", str(self.root), "/",
            "--ro-bind", "/usr", "/usr", "--bind", str(local), "/usr/local/sbin",
            *self._top_dirs(),
            "--proc", "/proc", "--ro-bind", str(self.cmdline), "/proc/cmdline",
            "--ro-bind", str(self.boot_id), "/proc/sys/kernel/random/boot_id",
            "--dev", "/dev", "--bind", str(self.root / "dev/md"), "/dev/md",
            "--bind", str(self.root / "dev/disk"), "/dev/disk", *self._device_nodes(),
            "--ro-bind", str(self.bin), STUB_BIN, "--bind", str(self.state), STUB_STATE,
            *(arg for there, here in sorted(self.shared.items())
              for arg in ("--bind", str(here), there)),
            "--chdir", "/root", "--clearenv",
            "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/root",
            "--setenv", "LANG", "C.UTF-8",
        ]

    def _device_nodes(self) -> list[str]:
        """Block devices (NVMe namespaces, partitions, md arrays) as files bound into /dev.
        They live in the stubs' state, where `mdadm` adds the arrays it starts."""
        args: list[str] = []
        for node in sorted((self.state / "dev").iterdir()):
            args += ["--bind", str(node), f"/dev/{node.name}"]
        return args

    def _top_dirs(self) -> list[str]:
        """/bin, /lib, ... as on this machine: links into /usr (merged /usr) or bound dirs.
        /etc/alternatives too, read-only: /usr/bin/awk and friends point into it."""
        args = ["--ro-bind", "/etc/alternatives", "/etc/alternatives"]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / name
            if host.is_symlink():
                link = self.root / name
                if not link.is_symlink():
                    link.symlink_to(os.readlink(host))
            elif host.is_dir():
                args += ["--ro-bind", str(host), "/" + name]
        return args

    def run(self, script: str, env: Mapping[str, str] | None = None, timeout: float = 60,
            credentials: Iterable[str] | None = None) -> Run:
        """The script the way the stack runs it over SSH: `bash -s` with the script on stdin,
        or, for a script that reads credentials, `bash -c <script>` with them on stdin, one per
        line (a join)."""
        log = self.state / "calls.log"
        log.write_text("")
        cmd = self.command()
        for k, v in (env or {}).items():
            cmd += ["--setenv", k, v]
        if credentials is None:
            argv, stdin = ["bash", "-s"], script
        else:
            argv, stdin = ["bash", "-c", script, "kubeadm-join"], "".join(
                f"{c}\n" for c in credentials)
        proc = subprocess.run([*cmd, *argv], input=stdin, capture_output=True,
                              text=True, timeout=timeout)
        calls = [tuple(line.split("\t")) for line in log.read_text().splitlines() if line]
        return Run(proc.returncode, proc.stdout, proc.stderr, calls)

    # --- inspecting -------------------------------------------------------------------------
    def path(self, p: str) -> Path:
        """A path as the script sees it, on this machine."""
        return self.root / p.lstrip("/")

    def files(self) -> Iterator[Path]:
        """Every file the scripts could have left (the root, and the stubs' state)."""
        for top in (self.root, self.state):
            for p in sorted(top.rglob("*")):
                if p.is_file() and not p.is_symlink():
                    yield p

    def files_containing(self, needle: str) -> list[Path]:
        data = needle.encode()
        return [p for p in self.files() if data in p.read_bytes()]

    def snapshot(self) -> dict[str, tuple[int, str, int] | str]:
        """Content, mode and mtime of every file and link under the root; the set of dirs."""
        snap: dict[str, tuple[int, str, int] | str] = {}
        for p in sorted(self.root.rglob("*")):
            rel = p.relative_to(self.root).as_posix()
            if p.is_symlink():
                snap[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                st = p.stat()
                snap[rel] = (st.st_mode, hashlib.sha256(p.read_bytes()).hexdigest(),
                             st.st_mtime_ns)
            else:
                snap[rel] = "dir"
        return snap


def diff_snapshots(before: Mapping[str, object], after: Mapping[str, object]) -> list[str]:
    keys = sorted(set(before) | set(after))
    return [k for k in keys if before.get(k) != after.get(k)]


def stub_names() -> Iterable[str]:
    return STUBS.keys()


# --- DGX H100 local storage ---------------------------------------------------------------------
@dataclass(frozen=True)
class Nvme:
    """One NVMe namespace: kernel name, what the drive reports, size in 512-byte sectors."""

    name: str
    model: str
    serial: str
    sectors: int
    eui: str
    partitions: tuple[int, ...] = ()  # sizes in sectors, p1 first

    @property
    def by_id(self) -> str:
        """The link the host script names the drive by: nvme-<model>_<serial>."""
        return f"/dev/disk/by-id/nvme-{self.model.replace(' ', '_')}_{self.serial}"


# DGX H100: 2 x 1.92 TB M.2 NVMe for DGX OS (RAID1) and 8 x 3.84 TB U.2 NVMe for storage/cache
# (NVIDIA DGX BasePOD reference architecture, "Core Components"). The sizes are the standard
# LBA counts of 1.92 TB and 3.84 TB drives. The model strings are illustrative Samsung PM9A3
# part numbers (M.2 and U.2): what a given DGX ships varies by vendor and was not verified.
M2_MODEL, M2_SECTORS = "SAMSUNG MZ1L21T9HCLS-00A07", 3_750_748_848
U2_MODEL, U2_SECTORS = "SAMSUNG MZQL23T8HCLS-00A07", 7_501_476_528
EFI_SECTORS = 1_048_576  # 512 MiB
# Kernel names as enumeration could hand them out: the OS drives are nvme0n1 and nvme5n1, so
# nvme0n1..nvme7n1 is not the data set; the data drives' serials do not follow kernel order.
DGX_OS_NAMES = ("nvme0n1", "nvme5n1")
DGX_DATA_NAMES = ("nvme8n1", "nvme3n1", "nvme1n1", "nvme9n1", "nvme6n1", "nvme2n1", "nvme7n1",
                  "nvme4n1")


@dataclass(frozen=True)
class DgxStorage:
    os_drives: tuple[Nvme, ...]
    data_drives: tuple[Nvme, ...]

    @property
    def data_ids(self) -> list[str]:
        """The data drives' by-id links in the order the script passes them to mdadm."""
        return sorted(d.by_id for d in self.data_drives)

    @property
    def os_names(self) -> set[str]:
        """Every way a call could name an OS drive: kernel names (and partitions), serials."""
        return {d.name for d in self.os_drives} | {d.serial for d in self.os_drives}


def dgx_h100_drives(missing: Iterable[str] = ()) -> DgxStorage:
    """The NVMe drives of one DGX H100; `missing`: data drives (kernel names) not there."""
    os_drives = tuple(Nvme(name, M2_MODEL, f"S6L2NE0W10{i:04d}", M2_SECTORS, f"002538b1{i:08x}",
                           (EFI_SECTORS, M2_SECTORS - EFI_SECTORS - 2048))
                      for i, name in enumerate(DGX_OS_NAMES))
    data = tuple(Nvme(name, U2_MODEL, f"S64HNE0T50{i:04d}", U2_SECTORS, f"002538b5{i:08x}")
                 for i, name in enumerate(DGX_DATA_NAMES))
    return DgxStorage(os_drives, tuple(d for d in data if d.name not in set(missing)))


# The DGX H100's compute ConnectX-7s and their PCI functions, from the user guide's network
# module table (RDMA device -> DGX OS interface: mlx5_0 ibp24s0 ... mlx5_11 ibp220s0; the bus
# is the interface name's p<bus>, in hex here).
DGX_H100_HCAS = {"mlx5_0": "0000:18:00.0", "mlx5_3": "0000:40:00.0", "mlx5_4": "0000:4f:00.0",
                 "mlx5_5": "0000:5e:00.0", "mlx5_6": "0000:9a:00.0", "mlx5_9": "0000:c0:00.0",
                 "mlx5_10": "0000:ce:00.0", "mlx5_11": "0000:dc:00.0"}
# The storage ports (port 1 of the ConnectX-7 in storage slots 1 and 2) and their PCI functions,
# DGX OS naming them ibp170s0f0 and ibp41s0f0.
DGX_H100_STORAGE_HCAS = {"mlx5_7": "0000:aa:00.0", "mlx5_1": "0000:29:00.0"}
# Rail r's interface on DGX OS (the same table, GPU r's ConnectX in rail order).
DGX_H100_RAIL_NETDEVS = ("ibp24s0", "ibp64s0", "ibp79s0", "ibp94s0", "ibp154s0", "ibp192s0",
                         "ibp206s0", "ibp220s0")


# What the prod stack's package mirrors serve, by the real package names: DOCA 2.9.3 LTS's
# (doca-ofed, with mlnx-ofed-kernel-dkms, the DKMS build that puts the host OFED's headers under
# /usr/src/ofa_kernel) and the Lustre client lustre-release's debian/control names.
DOCA_PACKAGES = {"doca-ofed": "2.9.3-0.4.2", "mlnx-ofed-kernel-dkms": "24.10.OFED.24.10.3.2.5.1-1"}


def site_mirrors(sb: Sandbox) -> None:
    """The prod stack's DOCA and Lustre repositories, answering this host."""
    cluster = prod_cluster()
    sb.serve_apt_source(cluster.platform.network_operator.doca_source, DOCA_PACKAGES)
    version = cluster.storage.lustre_client.version
    sb.serve_apt_source(cluster.storage.lustre_client.source, {
        "lustre-client-utils": version, "lustre-client-modules-dkms": version})


# The GPU driver a DGX OS install came with (a stand-in release of the R570 branch), until the
# stack installs the pinned one.
DGX_OS_GPU_DRIVER = "570.172.08"


def dgx_h100(sb: Sandbox, *, data_array: bool = True, missing: Iterable[str] = (),
             gpu_driver: str = DGX_OS_GPU_DRIVER, doca: bool = True) -> DgxStorage:
    """DGX OS on a DGX H100: / on md0, a RAID1 of the M.2 drives' second partitions, the EFI
    partition of the first at /boot/efi; its GPU driver and fabric manager running, and (with
    `doca`) DOCA-OFED installed and built for its kernel; the site's mirrors answer. With
    `data_array` (DGX OS's default) the U.2 data drives are md1, a RAID0 with ext4 mounted at
    /raid; without it they are blank. `missing`:
    data drives (kernel names) that are not there (failed, unseated)."""
    drives = dgx_h100_drives(missing)
    os_drives, present = drives.os_drives, drives.data_drives
    sb.install_gpu_driver(gpu_driver)
    if doca:
        for name, version in DOCA_PACKAGES.items():
            (sb.state / "pkgs" / name).write_text(version + "\n")
    site_mirrors(sb)
    for drive in os_drives + present:
        sb.add_nvme(drive)
    sb.add_array("md0", 1, [f"{d.name}p2" for d in os_drives], fs="ext4")
    sb.mount_at_boot("/dev/md0", "/")
    sb.mount_at_boot(f"/dev/{os_drives[0].name}p1", "/boot/efi")
    if data_array and len(present) < len(DGX_DATA_NAMES):
        # A RAID0 short of a member does not start: its superblocks stay on the others.
        for d in present:
            (sb.state / "disks" / f"_dev_{d.name}").write_text("6e5c1f0a:9d3b2e71:0c4f8a6d:"
                                                                "51b7e293 raid0\n")
    elif data_array:
        sb.add_array("md1", 0, [d.name for d in present], fs="ext4")
        with sb.path("/etc/fstab").open("a") as fstab:
            fstab.write(f"UUID={sb.fs_uuid('/dev/md1')} /raid ext4 defaults,nofail 0 0\n")
        sb.mount_at_boot("/dev/md1", "/raid")
    return drives


# --- the prod stack's scripts, rendered the way components/wiring/blueprint.py renders them --


@functools.cache
@functools.cache
def _prod_macs() -> dict[str, str]:
    return {n.hostname: n.management_mac for n in prod_cluster().nodes if n.management_mac}


def prod_cluster():
    import yaml

    from components.wiring.loading import validate_cluster

    raw = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]
    return validate_cluster(raw["gpu-cluster:cluster"], REPO)


def prod_scripts() -> dict[str, str]:
    """`<host>/<name>.sh` -> text: every script `offline preview` writes under scripts/."""
    from components.model.fields import CLUSTER_KEY
    from components.planning import (
        acceptance,
        host_scripts,
        inference,
        kubeadm,
        reboot,
        ssh_keys,
        upgrade,
    )
    from components.planning.subnet_manager import sm_apply_script, sm_rejoin_script

    cluster = prod_cluster()
    scripts = {f"{h.hostname}/prepare-host.sh": host_scripts.prepare_host(cluster, h, CLUSTER_KEY)
               for h in cluster.hosts}
    scripts |= {f"{n.hostname}/prepare-host.sh":
                host_scripts.prepare_gpu_node(cluster, n, CLUSTER_KEY) for n in cluster.nodes}
    for host, (files, ca, master) in sm_setups().items():
        scripts[f"{host}/apply-opensm.sh"] = sm_apply_script(files, ca, master)
        if not master:
            scripts[f"{host}/rejoin-opensm.sh"] = sm_rejoin_script(ca)
    init_host = cluster.control_plane[0]
    scripts[f"{init_host.hostname}/kubeadm-init.sh"] = kubeadm.init_script(cluster, init_host)
    scripts |= {f"{h.hostname}/kubeadm-join-control-plane.sh":
                kubeadm.control_plane_join_script(cluster, h) for h in cluster.control_plane[1:]}
    scripts |= {f"{h.hostname}/identities.sh": kubeadm.identities_script(cluster, h)
                for h in cluster.control_plane}
    scripts[f"{init_host.hostname}/kubelet-config.sh"] = kubeadm.kubelet_config_script(
        cluster, init_host)
    scripts |= {f"{n.hostname}/kubeadm-join.sh": kubeadm.join_script(cluster, n)
                for n in cluster.nodes}
    for n in cluster.nodes:
        h = n.hostname
        driver = cluster.platform.gpu_operator.host_driver
        scripts |= {f"{h}/planned-reboot/1-check.sh": reboot.check_script(n, driver),
                    f"{h}/planned-reboot/2-drain.sh": reboot.drain_script(
                        h, cluster.kubernetes.gang_wait_minutes * 60),
                    f"{h}/planned-reboot/3-reboot.sh": reboot.reboot_script(n, driver),
                    f"{h}/planned-reboot/4-after-boot.sh": reboot.after_boot_script(n, driver),
                    f"{h}/planned-reboot/5-uncordon.sh": reboot.uncordon_script(h)}
    creds = cluster.credentials
    keys = ssh_keys.authorized_keys_script(
        cluster.ssh_user, (creds.ssh_public_key, *creds.ssh_authorized_keys))
    scripts |= {f"{h}/ssh-keys.sh": keys
                for h in [h.hostname for h in cluster.hosts] + [n.hostname for n in cluster.nodes]}
    for h in cluster.control_plane:
        scripts[f"{h.hostname}/kubernetes-upgrade.sh"] = upgrade.control_plane_script(
            cluster, h.hostname, h == init_host)
    for n in cluster.nodes:
        h = n.hostname
        scripts |= {f"{h}/kubernetes-upgrade/1-drain.sh": upgrade.drain_script(cluster, h, (h,)),
                    f"{h}/kubernetes-upgrade/2-node.sh": upgrade.node_script(cluster, h),
                    f"{h}/kubernetes-upgrade/3-uncordon.sh": upgrade.uncordon_script(cluster, h)}

    for svc in cluster.workloads.inference:
        scripts[f"{init_host.hostname}/{svc.name}-api-key.sh"] = inference.api_key_script(svc)
    if cluster.workloads.nccl_test is not None:
        scripts[f"{init_host.hostname}/nccl-acceptance.sh"] = acceptance.nccl_gate_script(
            cluster, cluster.workloads.nccl_test)
    return dict(sorted(scripts.items()))


def sm_setups() -> dict[str, tuple[dict[str, str], str, bool]]:
    """SM host -> (the files apply-opensm.sh installs (absolute path -> text), its HCA,
    whether it is the master), as blueprint.py renders them."""
    from components.planning import placement
    from components.planning.fabric.render import render_fabric_files
    from components.planning.subnet_manager import sm_host_files, sm_restart_order

    plan = placement.plan(prod_cluster())
    fabric_files = render_fabric_files(plan)
    master = sm_restart_order({sm.hostname: sm.priority for sm in plan.sm})[-1]
    return {sm.hostname: (sm_host_files(fabric_files, sm.hostname), sm.hca,
                          sm.hostname == master) for sm in plan.sm}


def sm_files() -> dict[str, dict[str, str]]:
    """SM host -> the files apply-opensm.sh installs (absolute path -> text)."""
    return {host: files for host, (files, _, _) in sm_setups().items()}


def ok(run: Run) -> Run:
    assert run.returncode == 0, run.explain()
    return run


def run_twice(sb: Sandbox, script: str, credentials: tuple[str, ...] | None = None) -> Run:
    """Run, run again; the second run changes nothing at all. Returns the first run."""
    first = ok(sb.run(script, credentials=credentials))
    before = sb.snapshot()
    second = ok(sb.run(script, credentials=credentials))
    assert second.changes == [], "second run changed state:\n" + second.explain()
    assert diff_snapshots(before, sb.snapshot()) == [], "second run changed files"
    return first
