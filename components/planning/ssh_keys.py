"""The SSH keys the stack logs in with: fingerprints, the managed authorized_keys, and the
check that the private key really is the declared public key's other half.

A rotation is a reviewed config change, never only a new CI secret: `credentials.sshPublicKey`
names the key in use, `credentials.sshAuthorizedKeys` the further keys every host accepts. A new
key is authorised first (one `pulumi up`), then swapped in (the next), so no host ever stops
accepting the key the stack is using."""

from __future__ import annotations

import base64
import hashlib
from textwrap import dedent

STATE = "/var/lib/gpu-cluster/ssh-keys"  # the keys this stack authorised last time


def key_id(public_key: str) -> str:
    """`<type> <base64>`: the key without its comment (what sshd matches on)."""
    return " ".join(public_key.split()[:2])


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
            public = key.public_key().public_bytes(  # type: ignore[union-attr]
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
    header = dedent("""\
        #!/usr/bin/env bash
        # Authorised SSH keys of {user} — rendered by gpu-cluster; do not edit.
        set -euo pipefail
        USER_NAME={user}
        STATE={state}
        WANTED="$(cat <<'KEYS'
        """).format(user=user, state=STATE)
    return header + "".join(f"{k}\n" for k in keys) + "KEYS\n)\"\n" + dedent(r"""
        if [ -z "$WANTED" ]; then
          echo "no SSH key to authorise: refusing to lock every key out" >&2
          exit 1
        fi
        home="$(getent passwd "$USER_NAME" | cut -d: -f6)"
        if [ -z "$home" ]; then
          echo "no user $USER_NAME on this host (fix: cluster.sshUser)" >&2
          exit 1
        fi
        file="$home/.ssh/authorized_keys"
        ids() { awk 'NF >= 2 && $1 !~ /^#/ { print $1 " " $2 }'; }
        wanted_ids="$(ids <<<"$WANTED")"
        managed_ids="$(cat "$STATE" 2>/dev/null || true)"
        current="$(cat "$file" 2>/dev/null || true)"
        # Keep every line that holds neither a key we manage now nor one we managed before (matched
        # on the base64 blob, whatever options or comment the line has); then the wanted keys.
        drop="$(printf '%s\n%s\n' "$wanted_ids" "$managed_ids" | awk 'NF >= 2 { print $2 }' \
          | sort -u)"
        kept="$(DROP="$drop" awk '
          BEGIN { n = split(ENVIRON["DROP"], d, "\n"); for (i = 1; i <= n; i++) skip[d[i]] = 1 }
          { for (i = 1; i <= NF; i++) if ($i in skip) next; print }' <<<"$current")"
        next_file="$(printf '%s\n%s\n' "$kept" "$WANTED" | sed '/^$/d')"
        removed="$(comm -23 <(sort -u <<<"$managed_ids" | sed '/^$/d') <(sort -u <<<"$wanted_ids"))"
        if [ "$next_file" = "$(sed '/^$/d' <<<"$current")" ]; then
          echo "authorized_keys of $USER_NAME unchanged"
        else
          mkdir -p "$home/.ssh"
          chmod 700 "$home/.ssh"
          tmp="$(mktemp "$home/.ssh/.authorized_keys.XXXXXX")"
          printf '%s\n' "$next_file" > "$tmp"
          chmod 600 "$tmp"
          chown "$(stat -c %u:%g "$home")" "$tmp" "$home/.ssh"
          mv -f "$tmp" "$file"
          echo "authorized_keys of $USER_NAME: $(wc -l <<<"$wanted_ids") managed key(s)"
          if [ -n "$removed" ]; then
            echo "removed: $(awk '{ print $1 }' <<<"$removed" | paste -sd, -) key(s)" \
              "no longer listed"
          fi
        fi
        mkdir -p "$(dirname "$STATE")"
        printf '%s\n' "$wanted_ids" > "$STATE"
        """)
