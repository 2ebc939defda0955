"""Read `Pulumi.yaml` / `Pulumi.<stack>.yaml` into the config map the Pulumi CLI would pass.

Like the CLI, config the project declares (`config:` in Pulumi.yaml) takes its `default` when
the stack does not set it, and a declared key with neither is refused. Secrets cannot be read
offline: a `secure:` value, or a declared `secret: true` key the stack file leaves to
`pulumi config set --secret`, becomes a placeholder the leak check looks for."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SECRET_PLACEHOLDER_PREFIX = "offline-secret-"
# Offline a secret has no value, only what the cluster config says it is (`credentials`): the
# placeholder carries that identity after IDENTITY_MARK, so a rotation changes every input that
# holds the secret, as it does for the engine. secret key → credentials key naming it.
IDENTITY_MARK = "#"
SECRET_IDENTITIES = {
    "sshPrivateKey": "sshPublicKey",
    "switchPassword": "switchPasswordVersion",
    "bmcPassword": "bmcPasswordVersion",
    "fabricMKey": "fabricKeysVersion",
    "fabricSmKey": "fabricKeysVersion",
    "fabricSaKey": "fabricKeysVersion",
    # per-device passwords (maps of device -> secret): versioned with the shared one
    "switchPasswords": "switchPasswordVersion",
    "bmcPasswords": "bmcPasswordVersion",
}


class StackFileError(Exception):
    """The stack file is missing or malformed (not the program's own config validation)."""


@dataclass(frozen=True)
class StackConfig:
    project: str
    stack: str
    config: dict[str, str]
    secret_keys: list[str]
    # placeholder text → config key, to prove no secret ever reaches a rendered file
    placeholders: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


def load_project(project_dir: Path) -> tuple[str, dict[str, Any]]:
    """The project's name and its config declarations (`config:` of Pulumi.yaml)."""
    path = project_dir / "Pulumi.yaml"
    if not path.is_file():
        raise StackFileError(f"{path} not found: --project-dir must point at the Pulumi project")
    doc = yaml.safe_load(path.read_text()) or {}
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise StackFileError(f"{path}: `name` is missing")
    declared = doc.get("config") or {}
    if not isinstance(declared, dict):
        raise StackFileError(f"{path}: `config:` must be a mapping of key declarations")
    return name, declared


def project_name(project_dir: Path) -> str:
    return load_project(project_dir)[0]


def _encode(value: Any) -> str:
    # The CLI passes every value as a string: objects and lists as JSON, booleans as
    # "true"/"false" (what Config.get_bool parses), everything else as its text.
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list, bool)) or value is None:
        return json.dumps(value, sort_keys=True)
    return str(value)


def _is_secure(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _identities(project: str, raw: dict[str, Any], site: dict[str, Any] | None = None
                ) -> dict[str, str]:
    """secret key → its identity as the config declares it (a key fingerprint, a version); a
    part of a split site declares them in its core's cluster config (`site`)."""
    cluster = raw.get(f"{project}:cluster", raw.get("cluster", site))
    creds = cluster.get("credentials") if isinstance(cluster, dict) else None
    if not isinstance(creds, dict):
        return {}
    out: dict[str, str] = {}
    for secret, name in SECRET_IDENTITIES.items():
        value = creds.get(name)
        if name == "sshPublicKey":
            try:
                out[secret] = _fingerprint(str(value))
            except (IndexError, ValueError):
                continue  # absent or malformed: the program's validation says which
        elif value is not None:
            out[secret] = f"version {value}"
    return out


def _fingerprint(public_key: str) -> str:
    """OpenSSH's SHA256 fingerprint, as components.planning.ssh_keys computes it (not imported:
    the program's own `components` package must be the first this process imports)."""
    blob = base64.b64decode(public_key.split()[1], validate=True)
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def identity_of(placeholder: str) -> str | None:
    """The identity a placeholder carries (None for a secret the config says nothing about)."""
    if not placeholder.startswith(SECRET_PLACEHOLDER_PREFIX) or IDENTITY_MARK not in placeholder:
        return None
    return placeholder.rpartition(IDENTITY_MARK)[2]


_EMBEDDED = re.compile(re.escape(SECRET_PLACEHOLDER_PREFIX) + r"([A-Za-z0-9_.\[\]-]+)"
                       + re.escape(IDENTITY_MARK) + r"(version \d+|SHA256:[A-Za-z0-9+/]{43})")


def embeds_secrets(text: str) -> bool:
    """A value derived from named secrets (a script that embeds them)."""
    return _EMBEDDED.search(text) is not None


def mask_secrets(text: str) -> str:
    """`text` with each embedded secret as "[secret <key> <identity>]": what changes around a
    secret shows, and a rotation shows as a changed identity, as it does for the engine."""
    return _EMBEDDED.sub(lambda m: f"[secret {m.group(1)} {m.group(2)}]", text)


def _replace_secure(value: Any, label: str, placeholders: dict[str, str], key: str,
                    identity: str | None = None) -> Any:
    """Replace nested `{secure: …}` leaves; structured config may hide secrets inside objects."""
    if _is_secure(value):
        text = SECRET_PLACEHOLDER_PREFIX + label
        if identity is not None:
            text += IDENTITY_MARK + identity
        placeholders[text] = key
        return text
    if isinstance(value, dict):
        return {k: _replace_secure(v, f"{label}.{k}", placeholders, key, identity)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_secure(v, f"{label}[{i}]", placeholders, key, identity)
                for i, v in enumerate(value)]
    return value


def _with_declared(project: str, stack: str, raw: dict[str, Any],
                   declared: dict[str, Any]) -> dict[str, Any]:
    """The stack's config plus what the project declares: defaults, and a placeholder for each
    declared secret (the CLI asks `pulumi config set --secret` for it; offline there is none)."""
    merged = dict(raw)
    have = {k if ":" in k else f"{project}:{k}" for k in raw}
    missing = []
    for key, decl in sorted(declared.items()):
        full = key if ":" in key else f"{project}:{key}"
        if full in have or not isinstance(decl, dict):
            continue
        if decl.get("secret"):
            merged[full] = {"secure": "declared"}
        elif "default" in decl:
            merged[full] = decl["default"]
        else:
            missing.append(key)
    if missing:
        raise StackFileError(f"Stack '{stack}' is missing configuration value(s) "
                             f"{', '.join(missing)}: pulumi config set <key> <value>")
    return merged


def build_config(project: str, stack: str, doc: dict[str, Any],
                 declared: dict[str, Any] | None = None,
                 site: dict[str, Any] | None = None) -> StackConfig:
    raw = doc.get("config") or {}
    if not isinstance(raw, dict):
        raise StackFileError("`config:` must be a mapping")
    raw = _with_declared(project, stack, raw, declared or {})
    config: dict[str, str] = {}
    secret_keys: list[str] = []
    placeholders: dict[str, str] = {}
    identities = _identities(project, raw, site)
    for key in sorted(raw):
        value = raw[key]
        full = key if ":" in key else f"{project}:{key}"
        bare = full.split(":", 1)[1]
        before = len(placeholders)
        value = _replace_secure(value, bare, placeholders, full,
                                identities.get(bare) if full.startswith(f"{project}:") else None)
        if len(placeholders) != before:
            secret_keys.append(full)
        config[full] = _encode(value)
    return StackConfig(project, stack, config, secret_keys, placeholders, raw)


def load_stack_config(project_dir: Path, stack: str) -> StackConfig:
    project, declared = load_project(project_dir)
    path = project_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        stacks = sorted(p.name[len("Pulumi."):-len(".yaml")]
                        for p in project_dir.glob("Pulumi.*.yaml"))
        raise StackFileError(
            f"{path.name}: no such stack file (stack {stack!r}); the stacks here: "
            f"{', '.join(stacks) or 'none'}; fix: name one of them (STACK=<name>), or start "
            f"this one from the reference cluster: cp Pulumi.prod.yaml {path.name}")
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise StackFileError(_yaml_problem(path, err)) from None
    if not isinstance(doc, dict):
        raise StackFileError(f"{path.name}: the top level is a {type(doc).__name__}, not a "
                             "mapping; fix: start the file with `config:` and the stack's keys "
                             "under it (as Pulumi.prod.yaml does)")
    return build_config(project, stack, doc, declared, _site_cluster(project_dir, project, doc))


def _yaml_problem(path: Path, err: yaml.YAMLError) -> str:
    """Where a stack file stops being YAML, what the parser found there, and the fix."""
    mark = getattr(err, "problem_mark", None)
    where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    line = ""
    if mark is not None:
        lines = path.read_text().splitlines()
        if mark.line < len(lines):
            line = f": {lines[mark.line].strip()!r}"
    return (f"{path.name}{where}{line}: not valid YAML ({(context + ', ') if context else ''}"
            f"{problem}); fix: correct the YAML there (indentation, a missing `:` or quote, an "
            "unclosed bracket), then preview again")


def _site_cluster(project_dir: Path, project: str, doc: dict[str, Any]) -> dict[str, Any] | None:
    """The cluster config of the core stack a split site's part names (`<project>:site`), which
    the part reads as its own; None for any other stack, or one the program will refuse."""
    config = doc.get("config")
    site = config.get(f"{project}:site") if isinstance(config, dict) else None
    if not isinstance(site, str):
        return None
    core = project_dir / f"Pulumi.{site.rpartition('/')[2]}.yaml"
    try:
        cluster = ((yaml.safe_load(core.read_text()) or {}).get("config") or {}).get(
            f"{project}:cluster")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    return cluster if isinstance(cluster, dict) else None
