# shellcheck shell=bash
# DOCA-OFED on the host, as `ofed_info -s` reports it: only once doca-ofed is installed (DGX
# OS runs the kernel's own RDMA stack).
[ -e "$S/pkgs/doca-ofed" ] || { echo "ofed_info: command not found" >&2; exit 127; }
echo "OFED-internal-24.10-2.1.8:"
