"""Turn resource inputs as the engine sees them into stable, secret-free, diffable data.

Verified with pulumi 3.272 / pulumi-kubernetes 4.34 / pulumi-command 1.2 under the mock runtime,
reading `RegisterResourceRequest.object` (the wire shape, before the SDK's mock deserialiser
rewrites it):

* numbers are protobuf doubles: `replicas: 2` arrives as `2.0`;
* a secret (`pulumi.Output.secret`, `Config.require_secret`, or an input a provider SDK wraps,
  e.g. pulumi-command wraps the whole `connection`) arrives as
  `{SIG_KEY: SECRET_SIG, "value": <plaintext>}` exactly where it sits in the value: a secret env
  var of a Deployment is wrapped at `spec...env[0].value`, not around the whole `spec`. (The
  SDK's own deserialiser, i.e. what `Mocks.new_resource` would receive, pushes the marker up to
  the enclosing top-level input; we read the wire shape so only the secret itself is hidden);
* a value unknown during preview (an output the mocks did not return, or anything computed from
  one) arrives as the string sentinel `UNKNOWN` (or `{secret: UNKNOWN}` when also secret).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2
from pulumi_policy import proxy as _policy_proxy

from .stackconfig import embeds_secrets, identity_of, mask_secrets

SIG_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
ASSET_SIG = "c44067f5952c0a294b673a41bacd8c17"
ARCHIVE_SIG = "0def7320c3a5731c473e5ecbe6d01bc7"
RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
OUTPUT_VALUE_SIG = "d0e6a833031e9bbcd3f4e8bde6ca49a4"

# The Python SDK only emits the string sentinel; the other languages' typed sentinels are the
# ones pulumi_policy recognises, so accept all of them.
UNKNOWN_VALUES = frozenset(
    {
        _policy_proxy.UNKNOWN_STRING_VALUE,
        _policy_proxy.UNKNOWN_BOOLEAN_VALUE,
        _policy_proxy.UNKNOWN_NUMBER_VALUE,
        _policy_proxy.UNKNOWN_ARRAY_VALUE,
        _policy_proxy.UNKNOWN_ASSET_VALUE,
        _policy_proxy.UNKNOWN_ARCHIVE_VALUE,
        _policy_proxy.UNKNOWN_OBJECT_VALUE,
    }
)

SECRET = "[secret]"
UNKNOWN = "[unknown]"

# Inputs that a provider SDK marks secret as a whole although most of their fields are not
# sensitive. pulumi-command wraps `connection` (it may hold a password or private key), which
# would hide the host a command runs on — exactly what a hardware diff must show. Only the
# fields listed here are revealed; every other field of the object stays "[secret]".
_SSH_SAFE = frozenset({"host", "port", "user", "hostKey", "dialErrorLimit", "perDialTimeout"})
REVEAL_IN_SECRET: dict[str, dict[str, Any]] = {
    "command:remote:": {"connection": {**{k: True for k in _SSH_SAFE}, "proxy": _SSH_SAFE}},
}


def struct_to_py(value: Any) -> Any:
    """Protobuf Struct/ListValue → plain dict/list, keeping the wire shape (markers, floats)."""
    if isinstance(value, struct_pb2.Struct):
        return {k: struct_to_py(v) for k, v in value.items()}
    if isinstance(value, struct_pb2.ListValue):
        return [struct_to_py(v) for v in value]
    return value


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SIG_KEY) == SECRET_SIG


def whole_floats(value: Any) -> Any:
    """Whole floats → ints, recursively (for data that carries no markers, e.g. config)."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, list):
        return [whole_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: whole_floats(v) for k, v in value.items()}
    return value


class Normaliser:
    """Normalises values and remembers the plaintext secrets it hid (for leak checks)."""

    __slots__ = ("project_dir", "secret_strings")

    # Shorter secret strings are not collected: they would match innocently everywhere.
    MIN_SECRET_LEN = 8

    def __init__(self, project_dir: str = "") -> None:
        self.project_dir = project_dir.rstrip("/") + "/" if project_dir else ""
        self.secret_strings: set[str] = set()

    def inputs(self, type_: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        reveal: Mapping[str, Any] = {}
        for prefix, fields in REVEAL_IN_SECRET.items():
            if type_.startswith(prefix):
                reveal = fields
                break
        out: dict[str, Any] = {}
        for key, value in inputs.items():
            spec = reveal.get(key)
            if spec is not None and is_secret(value) and isinstance(value.get("value"), dict):
                out[key] = self._reveal(value["value"], spec)
            else:
                out[key] = self.value(value)
        return out

    def _reveal(self, obj: dict[str, Any], spec: Mapping[str, Any] | frozenset[str]) -> Any:
        out: dict[str, Any] = {}
        for key, value in obj.items():
            sub = spec.get(key) if isinstance(spec, Mapping) else (key in spec or None)
            if sub is None:
                out[key] = self._hidden(value)
            elif sub is True:
                out[key] = self.value(value)
            elif isinstance(value, dict) and not is_secret(value):
                out[key] = self._reveal(value, sub)
            else:
                out[key] = self.value(value)
        return out

    def value(self, value: Any) -> Any:
        if isinstance(value, float):
            if value.is_integer() and abs(value) < 2**53:
                return int(value)
            return value if math.isfinite(value) else str(value)
        if isinstance(value, str):
            return UNKNOWN if value in UNKNOWN_VALUES else value
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            sig = value.get(SIG_KEY)
            if sig is None:
                return {k: self.value(v) for k, v in value.items()}
            return self._special(sig, value)
        return value

    def _special(self, sig: str, value: dict[str, Any]) -> Any:
        if sig == SECRET_SIG:
            return self._hidden(value.get("value"))
        if sig == ASSET_SIG or sig == ARCHIVE_SIG:
            kind = "asset" if sig == ASSET_SIG else "archive"
            body = {k: v for k, v in value.items() if k != SIG_KEY}
            path = body.get("path")
            if self.project_dir and isinstance(path, str) and path.startswith(self.project_dir):
                # Absolute paths differ per checkout; keep the rendering machine-independent.
                body["path"] = path[len(self.project_dir):]
            return {kind: self.value(body)}
        if sig == RESOURCE_SIG:
            return {"resource": value.get("urn", UNKNOWN)}
        if sig == OUTPUT_VALUE_SIG:
            if value.get("secret"):
                return self._hidden(value.get("value"))
            return self.value(value["value"]) if "value" in value else UNKNOWN
        return {k: self.value(v) for k, v in value.items()}

    def _hidden(self, plain: Any) -> str:
        """"[secret]", or "[secret <identity>]" for a placeholder the config names (a key's
        fingerprint, a password version): not the secret, but which one it is."""
        self._collect(plain)
        identity = identity_of(plain) if isinstance(plain, str) else None
        if identity is None and isinstance(plain, str) and embeds_secrets(plain):
            # A script holding secrets (offline: placeholders): the script as it is, each
            # secret shown by name and identity, so a review sees what changes in it.
            return mask_secrets(plain)
        return SECRET if identity is None else f"[secret {identity}]"

    def _collect(self, value: Any) -> None:
        if isinstance(value, str):
            if len(value) >= self.MIN_SECRET_LEN and value not in UNKNOWN_VALUES:
                self.secret_strings.add(value)
        elif isinstance(value, list):
            for v in value:
                self._collect(v)
        elif isinstance(value, dict):
            for v in value.values():
                self._collect(v)
