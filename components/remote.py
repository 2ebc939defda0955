"""SSH connections to hosts: private key from a Pulumi secret, host key always pinned."""

from __future__ import annotations

from typing import Any

import pulumi_command as command


def connection(address: str, user: str, private_key: Any, host_key: str | None,
               ) -> command.remote.ConnectionArgs:
    # An unpinned host key would let anyone answering on the address receive root commands; the
    # policy pack fails a preview that has one (ssh-host-key-pinned).
    return command.remote.ConnectionArgs(
        host=address, user=user, private_key=private_key, host_key=host_key,
        dial_error_limit=20, per_dial_timeout=15,
    )
