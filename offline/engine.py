"""The real Pulumi engine on this machine: where `make engine` put it (or PATH), and the CLI's
environment for a scratch stack that stays here: a `file://` backend and PULUMI_HOME under the
scratch directory, no plugin downloads, no update check, no cloud token."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

PLUGINS = ("pulumi-language-python", "pulumi-resource-command", "pulumi-resource-kubernetes")
# Stand-ins for the secrets Pulumi.yaml declares (tools/set-stack-secrets.sh reads these).
PLACEHOLDER_SECRETS = {
    "GPU_CLUSTER_SSH_PRIVATE_KEY": "placeholder-not-a-key",
    "GPU_CLUSTER_BMC_PASSWORD": "placeholder", "GPU_CLUSTER_SWITCH_PASSWORD": "placeholder",
    "GPU_CLUSTER_FABRIC_M_KEY": "0x0123456789abcdef",
    "GPU_CLUSTER_FABRIC_SM_KEY": "0x0123456789abcdee",
    "GPU_CLUSTER_FABRIC_SA_KEY": "0x0123456789abcded"}


def engine_cache() -> Path:
    """Where tools/engine/build.sh keeps its builds (GPU_CLUSTER_CACHE, else XDG's cache)."""
    return Path(os.environ.get("GPU_CLUSTER_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-cluster") / "engine"


def engine_bin() -> Path | None:
    """The directory holding `pulumi`: PATH first, then the newest build in the cache."""
    found = shutil.which("pulumi")
    if found:
        return Path(found).parent
    cached = sorted(glob.glob(str(engine_cache() / "bin-pulumi-*" / "pulumi")))
    return Path(cached[-1]).parent if cached else None


def local_env(root: Path, passphrase: str) -> dict[str, str]:
    """The CLI's environment for a scratch stack under `root` (its state and home there too)."""
    (root / "state").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PULUMI_BACKEND_URL": f"file://{root / 'state'}",
           "PULUMI_HOME": str(root / "pulumi-home"), "PULUMI_CONFIG_PASSPHRASE": passphrase,
           "PULUMI_SKIP_UPDATE_CHECK": "true",
           "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
           "PYTHONDONTWRITEBYTECODE": "1"}
    for key in ("PULUMI_ACCESS_TOKEN", "PULUMI_SKIP_CHECKPOINTS"):
        env.pop(key, None)
    found = engine_bin()
    if found:
        env["PATH"] = f"{found}:{env.get('PATH', '')}"
    return env
