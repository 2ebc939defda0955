# shellcheck shell=bash
# Polling loops run at once (the state they wait for is set by the test).
