#!/bin/bash
# Stand-in for the switch's management CLI: keeps each session's lines, in order.
# shellcheck disable=SC2012  # its own files only, named 000.txt, 001.txt, ...
n=$(ls /stub/state/cli 2>/dev/null | wc -l)
mkdir -p /stub/state/cli
cat > "/stub/state/cli/$(printf '%03d' "$n").txt"
