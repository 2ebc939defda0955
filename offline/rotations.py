"""Secret rotations, read from the diff (pure): which secret a change of `credentials` names
anew, the commands that re-run with it, and the steps around `pulumi up`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .conventions import names, subject
from .diff import Change

# Where a secret sits in a command's inputs → the secret (offline/stackconfig.SECRET_IDENTITIES).
_SECRET_FIELDS = {"privateKey": "SSH key", "password": "switch password",
                  "BMC_PASSWORD": "BMC password"}
_SECRET_LINE = re.compile(r"^([-+])(?:.*\.)?(\w+): \[secret ([^\]]+)\]$")
_SECRET_TEXT = re.compile(r"^([-+])\[secret ([^\]]+)\]$")
# Secrets a script embeds, shown in it as "[secret <key> <identity>]": key → the secret.
_SECRET_IN_TEXT = re.compile(r"\[secret (\w+) (version \d+|SHA256:[A-Za-z0-9+/]{43})\]")
_EMBEDDED_SECRETS = {"fabricMKey": "subnet-manager keys", "fabricSmKey": "subnet-manager keys",
                     "fabricSaKey": "subnet-manager keys"}


@dataclass(frozen=True)
class Rotation:
    """A secret the config now names differently: every command holding it re-runs."""

    secret: str  # "SSH key", "switch password", "BMC password"
    old: str
    new: str
    commands: tuple[str, ...]
    hosts: tuple[str, ...]
    # SSH key only: no host authorised the new key before this change (its ssh-keys script
    # gains it now), so every command would fail to log in.
    unauthorised: bool = False


def secret_rotations(changes: Iterable[Change],
                     new_inputs: Mapping[str, Mapping[str, Any]] | None = None) -> list[Rotation]:
    """The secrets whose identity (`credentials`) changes, with the commands that re-run."""
    found: dict[str, dict[str, Any]] = {}
    for c in changes:
        if c.action not in ("update", "replace"):
            continue
        for path, lines in c.text_diffs.items():
            for line in lines:
                m = _SECRET_LINE.match(line)
                field, sign, ident = ((m.group(2), m.group(1), m.group(3)) if m else
                                      (path.rpartition(".")[2], *_text_secret(line)))
                named = [(_EMBEDDED_SECRETS.get(k), i) for k, i in _SECRET_IN_TEXT.findall(line)]
                if ident is None and named and line[:1] in "+-":
                    sign, (secret, ident) = line[0], named[0]
                else:
                    secret = _SECRET_FIELDS.get(field)
                if secret is None or ident is None:
                    continue
                entry = found.setdefault(secret, {"-": set(), "+": set(), "cmds": set(),
                                                  "hosts": set()})
                entry[sign].add(ident)
                entry["cmds"].add(c.name)
                host = _connection_host(c.urn, new_inputs)
                if host:
                    entry["hosts"].add(host)
    added = {fingerprint_of(line[1:]) for c in changes if subject(c.name, names().SSH_KEYS)
             for line in _added_lines(c.text_diffs.get("stdin", []))}
    out = []
    for secret, e in sorted(found.items()):
        if len(e["-"]) != 1 or len(e["+"]) != 1:
            continue
        old, new = next(iter(e["-"])), next(iter(e["+"]))
        out.append(Rotation(secret, old, new, tuple(sorted(e["cmds"])), tuple(sorted(e["hosts"])),
                            unauthorised=secret == "SSH key" and new in added))
    return out


def _text_secret(line: str) -> tuple[str, str | None]:
    m = _SECRET_TEXT.match(line)
    return (m.group(1), m.group(2)) if m else ("", None)


def _added_lines(lines: list[str]) -> set[str]:
    """Lines a text diff adds that it does not also remove (a moved line is not new)."""
    removed = {x[1:] for x in lines if x.startswith("-")}
    return {x for x in lines if x.startswith("+") and x[1:] not in removed}


def fingerprint_of(line: str) -> str | None:
    # Imported here: the program's own `components` package is the first this process imports.
    from components.planning.ssh_keys import fingerprint

    try:
        return fingerprint(line)
    except (IndexError, ValueError):
        return None


def _connection_host(urn: str, new_inputs: Mapping[str, Mapping[str, Any]] | None) -> str:
    conn = (new_inputs or {}).get(urn, {}).get("connection")
    return str(conn.get("host", "")) if isinstance(conn, dict) else ""


def rotation_steps(rotations: list[Rotation]) -> list[str]:
    steps = []
    for r in rotations:
        where = f"{len(r.commands)} commands on {len(r.hosts)} hosts" if r.hosts else \
            f"{len(r.commands)} commands"
        if r.unauthorised:
            steps.append(
                f"REFUSED SSH key rotation {r.old} -> {r.new}: no host authorises the new key "
                "yet, so every command would fail to log in. Do not apply this change: first "
                "add the new public key to credentials.sshAuthorizedKeys alone and apply (each "
                "<host>-ssh-keys command authorises it), then change credentials.sshPublicKey "
                "and the sshPrivateKey secret together")
        elif r.secret == "SSH key":
            steps.append(
                f"SSH key rotation {r.old} -> {r.new}: `pulumi up` logs in with the new key "
                f"and re-runs every command that holds it ({where}); each is idempotent (a "
                "host already prepared, joined or booted is left as it is), so allow the time "
                "of a full re-run. The ssh-keys commands drop a key no longer listed: keep the "
                "old one in credentials.sshAuthorizedKeys for this apply and drop it in the next "
                "change if anything else might still use it")
        elif r.secret == "subnet-manager keys":
            steps.append(
                f"subnet-manager keys rotation ({r.old} -> {r.new}), in a maintenance window: "
                "`pulumi up` stops the standby's opensm (an SM ignores one holding another "
                "SM_Key, so a standby restarted first would be a second master), restarts the "
                "master with the new keys (the fabric has no subnet manager for those seconds; "
                "traffic keeps flowing on the installed routes), then starts the standby, which "
                "must come back STANDBY (<standby>-opensm-rejoin). The master moves every port "
                "to the new M_Key, authenticating with the old one from its guid2mkey cache "
                "(/var/cache/opensm: keep it). Afterwards `sminfo` on each SM host: one MASTER, "
                "the others STANDBY")
        else:
            device = "switch" if r.secret == "switch password" else "BMC"
            how = ("its CLI: username <fabric.switchUser> password …" if device == "switch"
                   else "Redfish AccountService (or the BMC's web console)")
            steps.append(
                f"{r.secret} rotation ({r.old} -> {r.new}): set the new password on every "
                f"{device} first, by {how}, and the secret in the CI environment; `pulumi up` "
                f"then re-runs the {where} that log in with it (idempotent)")
    return steps
