# shellcheck shell=bash
touch "$S/grub-updated"
