"""The CA pin every join checks (kubeadm's --discovery-token-ca-cert-hash), as the stack computes
it on the control plane: the hash kubeadm defines, for an RSA or an ECDSA CA, and a loud failure,
never the hash of empty input, when there is no CA yet (a nodes stack applied before core)."""

from __future__ import annotations

import datetime
import hashlib
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from support.project import REPO

COMMANDS = REPO / "rendered/prod/bootstrap/command-remote-Command"
CA = "/etc/kubernetes/pki/ca.crt"
EMPTY_INPUT = "sha256:" + hashlib.sha256(b"").hexdigest()


def create(name: str) -> str:
    return yaml.safe_load((COMMANDS / f"{name}.yaml").read_text())["inputs"]["create"]


def run_on(ca: Path) -> subprocess.CompletedProcess[str]:
    """The rendered command with the CA path pointed at `ca`, without sudo."""
    command = create("ca-cert-hash").removeprefix("sudo ").replace(CA, str(ca))
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True)


def write_ca(path: Path, key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    """A self-signed CA like kubeadm's; returns the pin kubeadm defines for it: sha256 of the
    DER SubjectPublicKeyInfo."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    spki = key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


@pytest.mark.parametrize("key", [rsa.generate_private_key(65537, 2048),
                                 ec.generate_private_key(ec.SECP256R1())],
                         ids=["rsa", "ecdsa"])
def test_the_pin_is_kubeadms(tmp_path: Path,
                             key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> None:
    want = write_ca(tmp_path / "ca.crt", key)
    got = run_on(tmp_path / "ca.crt")
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == want


def test_no_ca_fails_instead_of_pinning_empty_input(tmp_path: Path) -> None:
    got = run_on(tmp_path / "missing.crt")
    assert got.returncode != 0
    # The same pipeline under plain `sh` (no pipefail) "succeeds" with the empty input's hash.
    pipeline = shlex.split(create("ca-cert-hash"))[-1]
    plain = subprocess.run(["sh", "-c", pipeline.replace(CA, str(tmp_path / "missing.crt"))],
                           capture_output=True, text=True)
    assert plain.returncode == 0 and plain.stdout.strip() == EMPTY_INPUT


def test_every_inline_pipeline_runs_under_pipefail() -> None:
    """A command given inline (`sh -c` / `bash -c`) with a pipe fails when any stage fails."""
    for path in sorted(REPO.glob("rendered/prod/*/command-*Command/*.yaml")):
        inputs = yaml.safe_load(path.read_text())["inputs"]
        for action in ("create", "update", "delete"):
            command = inputs.get(action)
            if not (isinstance(command, str) and " -c " in command):
                continue
            words = shlex.split(command)
            script = words[words.index("-c") + 1]
            pipe = re.search(r"(?<!\|)\|(?!\|)", script)  # a pipe, not `||`
            if pipe:
                before = script[:pipe.start()]
                assert "pipefail" in words[:words.index("-c")] or "set -euo pipefail" in before, (
                    path.name, action, command[:120])
