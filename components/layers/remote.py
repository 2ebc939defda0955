"""SSH to hosts: private key from a Pulumi secret, host key always pinned, nothing passed
through the SSH environment (a stock sshd accepts none of it)."""

from __future__ import annotations

from typing import Any

import pulumi_command as command


def connection(address: str, user: str, private_key: Any, host_key: str | None,
               dial_error_limit: int = 20) -> command.remote.ConnectionArgs:
    # An unpinned host key would let anyone answering on the address receive root commands; the
    # policy pack fails a preview that has one (ssh-host-key-pinned).
    return command.remote.ConnectionArgs(
        host=address, user=user, private_key=private_key, host_key=host_key,
        dial_error_limit=dial_error_limit, per_dial_timeout=15,
    )


def remote_command(name: str, **kwargs: Any) -> command.remote.Command:
    """A command over SSH that never gets its previous output back as environment.

    By default pulumi-command re-sends the last stdout/stderr as PULUMI_COMMAND_STDOUT/STDERR
    through SSH `Setenv` on every update: a credential for the commands that print one, and a
    request a stock sshd refuses (no `AcceptEnv`), so every update would log a warning."""
    return command.remote.Command(name, add_previous_output_in_env=False, **kwargs)
