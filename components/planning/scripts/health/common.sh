# shellcheck shell=bash
# node-problem-detector's custom plugin protocol (pkg/custompluginmonitor/plugin/plugin.go,
# v1.36.0): exit 0 is OK, 1 a problem, anything else unknown; stdout, trimmed and cut at the
# monitor's max_output_length, is the message.
ok() { printf '%s\n' "$*"; exit 0; }
problem() { printf '%s\n' "$*"; exit 1; }
unknown() { printf '%s\n' "$*"; exit 2; }
