# shellcheck shell=bash
# Record-only: present so nothing reaches a real binary.
