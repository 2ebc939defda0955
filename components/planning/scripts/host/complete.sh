# shellcheck shell=bash
#: The last line of every host preparation script (set -e: only a run without a failed step
#: gets here).
log "host preparation complete"
