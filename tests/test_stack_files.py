"""The committed stack files are in the form the real Pulumi CLI writes back: `pulumi stack
select --create` and `pulumi config set` leave them as they are (but for the passphrase
provider's `encryptionsalt`, which each backend adds for itself), and the values keep their
meaning: a P_Key stays hex, a GUID a string."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support.engine import local_env, pulumi_bin
from support.project import REPO

STACKS = sorted(p.name for p in REPO.glob("Pulumi.*.yaml"))


def _without_salt(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.startswith("encryptionsalt:"))


def test_a_pkey_is_written_as_hex_text_the_cli_keeps() -> None:
    """YAML reads `0x0a01` as the integer 2561, and the CLI writes the integer back; a quoted
    hex string survives it and the config model reads it as the same key."""
    doc = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())
    parts = doc["config"]["gpu-cluster:cluster"]["fabric"]["partitions"]
    assert parts and all(isinstance(p["pkey"], str) and p["pkey"].startswith("0x")
                         for p in parts)


@pytest.mark.slow
@pytest.mark.skipif(pulumi_bin() is None, reason="no Pulumi CLI: run `make engine`")
@pytest.mark.parametrize("stack_file", STACKS)
def test_the_cli_writes_the_stack_file_back_unchanged(tmp_path: Path, stack_file: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name in ("Pulumi.yaml", stack_file):
        shutil.copy(REPO / name, project / name)
    env = local_env(tmp_path, "stack-files")
    stack = stack_file.removeprefix("Pulumi.").removesuffix(".yaml")
    committed = (REPO / stack_file).read_text()

    def cli(*args: str) -> None:
        subprocess.run(["pulumi", *args], cwd=project, env=env, check=True,
                       capture_output=True, text=True, timeout=120)

    cli("stack", "select", "--create", stack)
    assert _without_salt((project / stack_file).read_text()) == committed
    # Setting a value to what it is rewrites the whole file through the CLI's YAML writer.
    value = yaml.safe_load(committed)["config"]["gpu-cluster:cluster"]["kubernetes"]["version"]
    cli("config", "set", "--path", "gpu-cluster:cluster.kubernetes.version", str(value))
    assert _without_salt((project / stack_file).read_text()) == committed
