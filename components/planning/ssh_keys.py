"""The SSH keys the stack logs in with: fingerprints, the managed authorized_keys, and the
check that the private key really is the declared public key's other half.

A rotation is a reviewed config change, never only a new CI secret: `credentials.sshPublicKey`
names the key in use, `credentials.sshAuthorizedKeys` the further keys every host accepts. A new
key is authorised first (one `pulumi up`), then swapped in (the next), so no host ever stops
accepting the key the stack is using."""

from __future__ import annotations

import base64
import hashlib

from components.planning.script_files import template

STATE = "/var/lib/gpu-cluster/ssh-keys"  # the keys this stack authorised last time


def fingerprint(public_key: str) -> str:
    """OpenSSH's fingerprint (`ssh-keygen -lf`): SHA256:<unpadded base64 of the key blob>."""
    blob = base64.b64decode(public_key.split()[1])
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def public_key_of(private_key: str) -> str | None:
    """The OpenSSH public key of an OpenSSH or PEM private key; None when it is not one
    (or is passphrase-protected: pulumi-command cannot use such a key either)."""
    from cryptography.hazmat.primitives import serialization

    data = private_key.encode()
    loaders = (serialization.load_ssh_private_key, serialization.load_pem_private_key)
    for load in loaders:
        try:
            key = load(data, password=None)
        except (ValueError, TypeError):
            continue
        try:
            public = key.public_key().public_bytes(
                serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        except (ValueError, TypeError):
            return None
        return public.decode()
    return None


def authorized_keys_script(user: str, keys: tuple[str, ...]) -> str:
    """On a host: `user`'s authorized_keys holds exactly `keys` among the keys this stack
    manages. A key the stack authorised before and no longer lists is removed (wherever it is
    in the file); keys it never managed are left alone; nothing is written when nothing
    changes. The first key is the one the stack logs in with: it is always kept."""
    return template("ssh/authorized-keys.sh", user=user, state=STATE,
                    keys="".join(f"{k}\n" for k in keys))
