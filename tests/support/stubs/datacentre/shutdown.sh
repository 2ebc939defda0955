#!/bin/bash
# Stand-in: shutdown of a simulated host, over the sandbox's stub (shutdown-sandbox, which
# schedules it and writes /run/nologin): the host is going down, and hostsim refuses logins
# until it is up again.
/stub/bin/shutdown-sandbox "$@" || exit $?
cp /run/nologin __DOWN__
