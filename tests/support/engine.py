"""The real Pulumi CLI, where `make engine` built it (or on PATH), and an environment that
keeps it on this machine: a local file backend, its own PULUMI_HOME, no plugin downloads and
no update check."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from support.project import CACHE

ENGINE_CACHE = CACHE / "engine"


def pulumi_bin() -> str | None:
    """The directory holding `pulumi`: PATH first, then the newest build in the engine cache."""
    found = shutil.which("pulumi")
    if found:
        return str(Path(found).parent)
    cached = sorted(glob.glob(str(ENGINE_CACHE / "bin-pulumi-*" / "pulumi")))
    return str(Path(cached[-1]).parent) if cached else None


def local_env(tmp: Path, passphrase: str) -> dict[str, str]:
    """The CLI's environment for a scratch stack under `tmp` (its state and home there too)."""
    (tmp / "state").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PULUMI_BACKEND_URL": f"file://{tmp / 'state'}",
           "PULUMI_HOME": str(tmp / "pulumi-home"), "PULUMI_CONFIG_PASSPHRASE": passphrase,
           "PULUMI_SKIP_UPDATE_CHECK": "true",
           "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
           "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PULUMI_ACCESS_TOKEN", None)
    found = pulumi_bin()
    if found:
        env["PATH"] = f"{found}:{env['PATH']}"
    return env
