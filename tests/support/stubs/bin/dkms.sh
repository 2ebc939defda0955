# shellcheck shell=bash
# `dkms status -m M -k K`: a module is built for the running kernel once its -dkms package
# is installed (mlnx-ofed-kernel comes with doca-ofed), unless the test failed its build.
m='' k=''
while [ $# -gt 0 ]; do case "$1" in -m) m=$2; shift ;; -k) k=$2; shift ;; esac; shift; done
case "$m" in mlnx-ofed-kernel) pkg=doca-ofed ;; *) pkg=$m-dkms ;; esac
if [ -e "$S/pkgs/$pkg" ] && [ ! -e "$S/dkms-failed-$m" ]; then
  echo "$m/$(cut -d- -f1 "$S/pkgs/$pkg"), ${k:-$(uname -r)}, x86_64: installed"
fi
