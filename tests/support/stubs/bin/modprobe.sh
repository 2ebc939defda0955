# shellcheck shell=bash
for m in "$@"; do case "$m" in -*) ;; *) touch "$S/modules/${m//-/_}" ;; esac; done
