"""The keys of the simulated data centre: the stack's client key and one ed25519 host key per
host and switch, made by the real ssh-keygen (never reused outside the run that made them)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

from e2e.stack import Keys


def keygen(path: Path, comment: str) -> str:
    """A new ed25519 key pair at `path` and `path`.pub (no passphrase, as `ssh-keygen -N ''`
    writes them); returns the public key line, comment included."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f",
                    str(path)], check=True, capture_output=True, timeout=60)
    return path.with_name(path.name + ".pub").read_text().strip()


def make_keys(names: Iterable[str], root: Path) -> Keys:
    """`root/client` for the stack, `root/hosts/<name>` for each host's sshd."""
    client = keygen(root / "client", "ops@e2e")
    hosts = {name: " ".join(keygen(root / "hosts" / name, name).split()[:2])
             for name in sorted(set(names))}
    return Keys(client_public=client, host_keys=hosts)
