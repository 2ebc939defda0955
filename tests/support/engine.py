"""The real Pulumi CLI, where `make engine` built it (or on PATH), and an environment that
keeps it on this machine (offline/engine.py)."""

from __future__ import annotations

from offline.engine import engine_bin, local_env

__all__ = ["local_env", "pulumi_bin"]


def pulumi_bin() -> str | None:
    """The directory holding `pulumi`: PATH first, then the newest build in the engine cache."""
    found = engine_bin()
    return str(found) if found else None
