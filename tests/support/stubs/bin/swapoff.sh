# shellcheck shell=bash
rm -f "$S/swap"
