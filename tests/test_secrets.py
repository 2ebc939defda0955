"""No secret reaches the rendering: not the stack's secrets, and nothing shaped like one."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from support.project import REPO, run_offline

SECRET_KEYS = ("sshPrivateKey", "bmcPassword", "switchPassword", "fabricMKey", "fabricSmKey",
               "fabricSaKey")
SHAPES = {
    "PEM key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "kubeadm bootstrap token": re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b"),
    "certificate key (64 hex)": re.compile(r"\b[0-9a-f]{64}\b"),
    "kubeconfig credential": re.compile(r"client-key-data|client-certificate-data|token: \S{20,}"),
}


@pytest.fixture(scope="module")
def rendered_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("secrets") / "gpu-cluster"
    shutil.copytree(REPO, dst, ignore=shutil.ignore_patterns(
        ".venv", "build", ".git", "__pycache__", ".pytest_cache", ".hypothesis", "rendered"))
    proc = run_offline(dst, "preview", "--render")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (dst / "preview.log").write_text(proc.stdout + proc.stderr)
    return dst


def _files(root: Path) -> list[Path]:
    return [p for sub in ("build", "rendered") for p in (root / sub).rglob("*") if p.is_file()]


def test_secret_placeholders_appear_nowhere(rendered_copy: Path) -> None:
    texts = {p: p.read_text() for p in _files(rendered_copy)}
    texts[rendered_copy / "preview.log"] = (rendered_copy / "preview.log").read_text()
    assert len(texts) > 150
    for key in SECRET_KEYS:
        leaked = [str(p) for p, t in texts.items() if f"offline-secret-{key}" in t]
        assert not leaked, f"{key} leaked into {leaked}"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_nothing_shaped_like_a_credential(rendered_copy: Path, shape: str) -> None:
    hits = [f"{p}: {m.group(0)}" for p in _files(rendered_copy)
            for m in SHAPES[shape].finditer(p.read_text())]
    assert not hits, hits[:5]


def test_commands_carry_secrets_only_as_secrets(rendered_copy: Path) -> None:
    plan = json.loads((rendered_copy / "build/prod/plan.json").read_text())
    commands = [r for r in plan["resources"] if r["type"] == "command:remote:Command"]
    assert commands
    for r in commands:
        conn = r["inputs"]["connection"]
        # Hidden; only which one it is shows (credentials: the key's fingerprint, a version).
        assert re.fullmatch(r"\[secret( SHA256:[A-Za-z0-9+/]{43}| version \d+)?\]",
                            conn.get("privateKey", "[secret]"))
        assert re.fullmatch(r"\[secret( version \d+)?\]", conn.get("password", "[secret]"))
        # Credentials never travel in the SSH environment: joins read them from stdin.
        assert "environment" not in r["inputs"], r["name"]
        if r["name"].endswith("-kubeadm-join"):
            assert r["inputs"]["stdin"] == "[secret]", r["name"]
        if r["name"].endswith("-opensm"):  # the script, each of the fabric's keys masked
            assert re.search(r"^OPENSM_KEYS='m_key \[secret fabricMKey version \d+\]$",
                             r["inputs"]["stdin"], re.M), r["name"]
            assert "offline-secret-" not in r["inputs"]["stdin"]
    assert any(r["name"].endswith("-kubeadm-join") for r in commands)
    assert any(r["name"].endswith("-opensm") for r in commands)


def test_commands_that_print_credentials_keep_them_secret_and_unlogged(
        rendered_copy: Path) -> None:
    printers = {"stack-kubeconfig"} | {f"gpu-node-{i:02d}-join-token" for i in range(8)}
    seen = set()
    for path in (rendered_copy / "rendered/prod/bootstrap/command-remote-Command").glob("*"):
        doc = yaml.safe_load(path.read_text())
        if doc["name"] in printers:
            seen.add(doc["name"])
            assert "stdout" in doc["options"]["additionalSecretOutputs"], doc["name"]
            assert doc["inputs"]["logging"] == "none", doc["name"]
    assert seen == printers


def test_one_kubernetes_provider_built_from_the_secret_kubeconfig(rendered_copy: Path) -> None:
    plan = json.loads((rendered_copy / "build/prod/plan.json").read_text())["resources"]
    providers = [r for r in plan if r["type"] == "pulumi:providers:kubernetes"]
    assert [p["name"] for p in providers] == ["kubernetes"]
    assert providers[0]["inputs"]["kubeconfig"] == "[secret]"
    k8s = [r for r in plan if r["type"].startswith("kubernetes:")]
    assert len(k8s) > 20
    assert {r["options"]["provider"] for r in k8s} == {providers[0]["urn"]}
    stack = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]
    assert stack["pulumi:disable-default-providers"] == ["kubernetes"]
