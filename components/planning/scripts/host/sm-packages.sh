# shellcheck shell=bash
#: A step of the host preparation script of a subnet-manager host: opensm and the tools that
#: read the fabric (sminfo, ibnetdiscover).
for pkg in opensm infiniband-diags; do
  dpkg -s "$pkg" >/dev/null 2>&1 || apt-get install -y "$pkg"
done
