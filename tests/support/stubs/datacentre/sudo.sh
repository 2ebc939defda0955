#!/bin/bash
# Stand-in: the sandbox runs as root already (the commands arrive as `sudo bash -s`).
exec "$@"
