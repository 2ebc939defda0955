"""The real Pulumi CLI, where `make engine` built it (or on PATH), an environment that keeps it
on this machine (offline/engine.py), and what its preview says in the offline plan's terms:
which inputs are unknown, which are secret, what the policy pack found."""

from __future__ import annotations

import json
from typing import Any

from pulumi.runtime.rpc import UNKNOWN  # the engine's unknown, on the wire and in its JSON

from offline.engine import engine_bin, local_env
from offline.normalize import SECRET, SECRET_SIG, SIG_KEY
from offline.normalize import UNKNOWN as PLAN_UNKNOWN

__all__ = ["local_env", "pulumi_bin"]

PLAN_SECRET = SECRET[:-1]  # "[secret]" or "[secret <key> version <n>]" in the offline plan


def pulumi_bin() -> str | None:
    """The directory holding `pulumi`: PATH first, then the newest build in the engine cache."""
    found = engine_bin()
    return str(found) if found else None


def _is_engine_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SIG_KEY) == SECRET_SIG or value == SECRET


def unknown_paths(value: Any, engine: bool, path: str = "") -> set[str]:
    """The paths of the values a preview does not know, in either's form: the engine's JSON
    (its sentinel; a secret is opaque) or the offline plan ("[unknown]"; "[secret …]")."""
    if (engine and _is_engine_secret(value)) or (
            not engine and isinstance(value, str) and value.startswith(PLAN_SECRET)):
        return set()
    if value == (UNKNOWN if engine else PLAN_UNKNOWN):
        return {path}
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in unknown_paths(v, engine, f"{path}.{k}")}
    if isinstance(value, list):
        return {p for i, v in enumerate(value) for p in unknown_paths(v, engine, f"{path}[{i}]")}
    return set()


def secret_inputs(inputs: dict[str, Any], engine: bool, type_: str = "") -> set[str]:
    """The inputs a preview shows only as secret. Offline reveals a remote command's connection
    but for its key or password (offline/normalize.REVEAL_IN_SECRET) and shows a text with a
    secret in it with the secret marked ("[secret <key> version <n>]"); the engine shows all
    of either as secret, so each counts as a secret input (the offline diff says so)."""
    if engine:
        return {k for k, v in inputs.items() if _is_engine_secret(v)}
    return {k for k, v in inputs.items() if (isinstance(v, str) and PLAN_SECRET in v)
            or (k == "connection" and type_.startswith("command:remote:"))}


def policy_findings(events: str, stack_urn: str) -> set[tuple[str, str, str, str]]:
    """(rule, level, URN, message) of every policy event in a streamed `--json` preview; a
    stack rule's finding names the stack. The analyzer puts the rule's description before a
    finding's message, on its own line (pulumi_policy `report_violation`)."""
    found = set()
    for line in events.splitlines():
        event = json.loads(line) if line.strip() else {}
        if "policyEvent" in event:
            e = event["policyEvent"]
            message = e["message"].rstrip("\n")
            urn = e.get("resourceUrn") or stack_urn
            found.add((e["policyName"], e["enforcementLevel"], urn,
                       message.split("\n", 1)[-1]))
    return found
