"""The stack's config as the program reads it: the `gpu-cluster:cluster` object validated into
the model (fields, inventory, cross-field checks, fabric plan), and the `secure:` keys as Pulumi
secrets, checked without ever being echoed. Only `load_config` needs a Pulumi runtime (it
imports pulumi itself, so validating a config stays light)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from components.model.checks import semantic_problems
from components.model.cluster import INVENTORY, Cluster, SwitchFacts
from components.model.errors import pydantic_problems
from components.model.fields import PROJECT, ConfigError, Problem, key_id
from components.model.inventory import InventoryError, load_inventory
from components.model.parts import builds, owned_nodes
from components.model.site import SITE_KEY, stack_cluster
from components.planning import lnet, placement
from components.planning.fabric import FabricPlan, PlanError
from components.planning.ssh_keys import fingerprint, public_key_of
from components.wiring.platform_sources import source_problems


def validate_cluster(raw: Mapping[str, Any], project_dir: Path = Path(".")) -> Cluster:
    """Parse and check the `gpu-cluster:cluster` object; raise ConfigError listing every problem.

    Three passes, each reported whole: pydantic field by field, then the inventory file the
    model names (its facts become part of the model), then the relations between fields
    (`config_checks`) and the fabric plan."""
    if not isinstance(raw, Mapping):
        raise ConfigError([Problem("", raw, "must be a mapping", "see Pulumi.prod.yaml")])
    try:
        cluster = Cluster.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(pydantic_problems(err, Cluster)) from None
    if cluster.inventory_file:
        try:
            inventory = load_inventory(project_dir / cluster.inventory_file)
        except InventoryError as err:
            # Inventory messages end with their own ". Fix: …": keep the two parts apart.
            message, _, fix = str(err).partition(" Fix: ")
            raise ConfigError([Problem("inventoryFile", cluster.inventory_file,
                                       message.rstrip("."), fix.rstrip(".") or
                                       "correct the file as described")]) from None
        cluster = Cluster.model_validate(raw, context={INVENTORY: inventory})
    problems = [*semantic_problems(cluster), *_lnet_problems(cluster),
                *source_problems(cluster, project_dir)]
    if problems:
        raise ConfigError(problems)
    # A config the fabric cannot be planned from (e.g. too many rails per leaf) is a config
    # error too: planned here, before anything is registered, and kept for the program. A
    # nodes part names only its own nodes' leaves (the core plans the fabric).
    if builds(cluster).fabric_plan:
        if problems := _fabric_problems(cluster):
            raise ConfigError(problems)
        return cluster
    try:
        if builds(cluster).nodes == "own SUs":
            placement.owned_rail_leaves(cluster, owned_nodes(cluster))
    except PlanError as err:
        raise ConfigError([Problem(err.path, err.value, err.message, err.fix)]) from None
    return cluster


# A pinned grouping the planner refuses, and the field that pins it: unpinned, it is derived.
_PINS = {"fabric.railsPerLeaf": "rails_per_leaf", "fabric.spines": "spines"}


def _lnet_problems(cluster: Cluster) -> list[Problem]:
    """The driver model the host Lustre client needs, and the LNet addresses the plan hands out
    (`planning/lnet.py`)."""
    return [Problem(*p, check="lustre-lnet") for p in lnet.config_problems(cluster)]


def _fabric_problems(cluster: Cluster) -> list[Problem]:
    """What keeps the fabric from being planned, all in one run: a pinned grouping that no
    longer fits is reported and then derived, so the next pin that does not fit, and the
    switch facts the resulting plan has no switch for, are reported with it."""
    problems: list[Problem] = []
    planned = cluster
    while True:
        try:
            plan = placement.plan(planned)
        except PlanError as err:
            problems.append(Problem(err.path, err.value, err.message, err.fix))
            pin = _PINS.get(err.path)
            if pin is None or getattr(planned.fabric, pin) is None:
                return problems
            planned = planned.model_copy(update={
                "fabric": planned.fabric.model_copy(update={pin: None})})
            continue
        return problems + _retired_switch_facts("fabric", cluster.fabric, plan) \
            + _storage_fabric_problems(cluster)


def _storage_fabric_problems(cluster: Cluster) -> list[Problem]:
    """The storage fabric (fabric.storageFabric) planned too, and its switch facts checked."""
    try:
        plan = placement.storage_plan(cluster)
    except PlanError as err:
        return [Problem(err.path, err.value, err.message, err.fix)]
    sf = cluster.fabric.storage_fabric
    if plan is None or sf is None:
        return []
    return _retired_switch_facts("fabric.storageFabric", sf, plan)


def _retired_switch_facts(key_path: str, facts: SwitchFacts, plan: FabricPlan
                          ) -> list[Problem]:
    """A switch's facts (`switchGuids`, … under `key_path`) the plan has no switch for: left
    behind by a regrouping (its retired switches) or a typo. Each would be silently unused;
    all are reported in one run."""
    names = {sw.name for sw in plan.switches}
    return [Problem(f"{key_path}.{key}.{name}", str(value),
                    "names no switch of the fabric plan (fabric.railsPerLeaf, fabric.spines "
                    "and the nodes decide its switches): a retired switch's or a misspelt one",
                    f"remove {key_path}.{key}.{name} (the runbook retires a switch from what "
                    "is deployed, not from this entry), or correct the name")
            for key, by_switch in (("switchGuids", facts.switch_guids),
                                   ("switchManagementIps", facts.switch_management_ips),
                                   ("switchHostKeys", facts.switch_host_keys))
            for name, value in sorted(by_switch.items()) if name not in names]


# Secrets are separate `secure:` keys so they never enter the model (or plan files, or logs).
SECRET_KEYS = ("sshPrivateKey", "bmcPassword", "switchPassword", "fabricMKey", "fabricSmKey",
               "fabricSaKey")
# The subnet managers' management keys (opensm `m_key`, `sm_key`, `sa_key`): 64-bit, non-zero,
# not opensm's default of 1 (every stock opensm would hold it).
FABRIC_KEYS = SECRET_KEYS[3:]

# Optional per-device passwords (`pulumi config set --secret --path 'switchPasswords.<switch>'`):
# a device named in the map logs in with its own, every other one with the shared secret.
DEVICE_PASSWORDS = {"switchPasswords": "switchPassword", "bmcPasswords": "bmcPassword"}


@dataclass(frozen=True)
class Secrets:
    """Pulumi secrets read from `secure:` keys; Outputs, never plain strings."""

    ssh_private_key: Any
    bmc_password: Any
    switch_password: Any
    fabric_m_key: Any
    fabric_sm_key: Any
    fabric_sa_key: Any
    # device name -> its own password (an Output), from switchPasswords / bmcPasswords
    switch_passwords: Mapping[str, Any] = field(default_factory=dict)
    bmc_passwords: Mapping[str, Any] = field(default_factory=dict)

    def switch_password_for(self, switch: str) -> Any:
        return self.switch_passwords.get(switch, self.switch_password)

    def bmc_password_for(self, host: str) -> Any:
        return self.bmc_passwords.get(host, self.bmc_password)

    def after(self, ready: Any) -> Secrets:
        """The same secrets, each resolving only once `ready` has: whatever uses one (every
        remote command) waits for it, and never runs when it fails."""
        import pulumi

        def gate(value: Any) -> Any:
            return pulumi.Output.all(ready, value).apply(lambda v: v[1])

        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return Secrets(**{name: MappingProxyType({k: gate(v) for k, v in value.items()})
                          if isinstance(value, Mapping) else gate(value)  # per device
                          for name, value in values.items()})


def load_config(project_dir: Path = Path(".")) -> tuple[Cluster, Secrets]:
    """Read the stack's config through Pulumi (the real CLI or the offline mock runtime)."""
    import pulumi

    conf = pulumi.Config(PROJECT)
    # A part of a split site reads the site's one config from its core's stack file.
    raw = stack_cluster(project_dir, pulumi.get_stack(), conf.get_object("cluster"),
                        conf.get(SITE_KEY.partition(":")[2]), pulumi.get_organization())
    cluster = validate_cluster(raw, project_dir)
    missing = [k for k in SECRET_KEYS if conf.get_secret(k) is None]
    if missing:
        raise ConfigError([Problem(f"(secret) {PROJECT}:{k}", None, "secret is not set",
                                   f"pulumi config set --secret {PROJECT}:{k} …")
                           for k in missing])
    strict = not pulumi.runtime.is_dry_run()
    problems = [p for p in (ssh_key_problem(cluster, conf.get("sshPrivateKey") or "", strict),
                            *fabric_key_problems({k: conf.get(k) or "" for k in FABRIC_KEYS},
                                                  strict),
                            *password_problems(_device_passwords(conf))) if p is not None]
    if problems:
        raise ConfigError(problems)
    devices = {key: _device_names(PROJECT, key) for key in DEVICE_PASSWORDS}
    problems = _unknown_devices(cluster, devices)
    if problems:
        raise ConfigError(problems)
    per_device = {key: {name: conf.require_secret_object(key).apply(_entry(name))
                        for name in names} for key, names in devices.items()}
    secret = {k: conf.require_secret(k) for k in SECRET_KEYS}
    secrets = Secrets(ssh_private_key=secret["sshPrivateKey"],
                      bmc_password=secret["bmcPassword"],
                      switch_password=secret["switchPassword"],
                      fabric_m_key=secret["fabricMKey"], fabric_sm_key=secret["fabricSmKey"],
                      fabric_sa_key=secret["fabricSaKey"],
                      switch_passwords=MappingProxyType(per_device["switchPasswords"]),
                      bmc_passwords=MappingProxyType(per_device["bmcPasswords"]))
    return cluster, secrets


def _device_passwords(conf: Any) -> dict[str, str]:
    """Every device password by its key path (`bmcPassword`, `switchPasswords.<switch>`),
    read raw for its checks only (password_problems never shows a value)."""
    import pulumi

    out = {k: conf.get(k) or "" for k in DEVICE_PASSWORDS.values()}
    for key in DEVICE_PASSWORDS:
        raw = pulumi.runtime.get_config(f"{PROJECT}:{key}")
        value = json.loads(raw) if raw else {}
        if isinstance(value, dict):
            out |= {f"{key}.{name}": str(v) for name, v in value.items()}
    return out


# What a device password must not hold: the BMC's password travels in a curl config line and a
# switch's through an interactive login, and neither carries a line break or another control
# character (a newline ends curl's `user = "…"` line; the switch's CLI ends the input there).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def password_problems(values: Mapping[str, str]) -> list[Problem]:
    """Device passwords their consumers cannot carry, by key; values are never echoed."""
    return [Problem(f"(secret) {PROJECT}:{key}", None,
                    "holds a control character (a line break, tab or NUL; value hidden), "
                    "which the BMC's curl configuration and the switch's login cannot carry",
                    f"set a password of printable characters: pulumi config set --secret "
                    f"--path '{key}' …")
            for key, value in sorted(values.items()) if _CONTROL.search(value)]


def _entry(name: str) -> Callable[[Any], Any]:
    """One device's password from the map a per-device secret holds."""
    return lambda passwords: passwords[name]


def _device_names(project: str, key: str) -> list[str]:
    """The device names of a per-device password map: its keys are not secret, its values
    are (read raw, so no value is touched outside a secret Output)."""
    import pulumi

    raw = pulumi.runtime.get_config(f"{project}:{key}")
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ConfigError([Problem(f"(secret) {project}:{key}", None,
                                   "must be a map of device name to password (value hidden)",
                                   f"pulumi config set --secret --path '{key}.<device>' …")])
    return sorted(value)


def _unknown_devices(cluster: Cluster, devices: Mapping[str, list[str]]) -> list[Problem]:
    """A name that is no device would silently leave that device on the shared password."""
    plans = (placement.plan(cluster), placement.storage_plan(cluster)) \
        if devices.get("switchPasswords") else ()  # planned only when asked
    known = {"switchPasswords": {sw.name for plan in plans if plan for sw in plan.switches},
             "bmcPasswords": {h.hostname for h in cluster.hosts if h.bmc_address is not None}
             | {n.hostname for n in cluster.nodes if n.bmc_address is not None}}
    return [Problem(f"(secret) {PROJECT}:{key}.{name}", name,
                    "names no " + ("switch of the fabric plan" if key == "switchPasswords"
                                   else "host with a BMC"),
                    "use a name from " + ("build/<stack>/fabric/switches/"
                                          if key == "switchPasswords" else "the inventory"))
            for key, names in devices.items() for name in names if name not in known[key]]


def ssh_key_problem(cluster: Cluster, private_key: str, strict: bool) -> Problem | None:
    """The private key must be the declared public key's other half, so a new CI secret alone
    never changes the key every command logs in with. A preview without the real secret (a
    value that is no key at all) is let through; `pulumi up` (strict) never is."""
    declared = cluster.credentials.ssh_public_key
    if declared is None:
        return None
    public = public_key_of(private_key)
    path = f"(secret) {PROJECT}:sshPrivateKey"
    if public is None:
        if not strict:
            return None
        return Problem(path, None, "is not an unencrypted OpenSSH or PEM private key (value "
                       "hidden)",
                       f"pulumi config set --secret {PROJECT}:sshPrivateKey < <key file>")
    if key_id(public) != key_id(declared):
        return Problem(path, fingerprint(public),
                       f"is not the key credentials.sshPublicKey names ({fingerprint(declared)})",
                       "set the secret that belongs to credentials.sshPublicKey, or rotate by "
                       "the book: authorise the new key in credentials.sshAuthorizedKeys and "
                       "apply, then change sshPublicKey and the secret together (docs/day2.md)")
    return None


_FABRIC_KEY = re.compile(r"^0x[0-9a-fA-F]{1,16}$")


def fabric_key_problems(values: dict[str, str], strict: bool) -> list[Problem]:
    """Each management key must be a 64-bit hex value opensm reads, neither 0 (no key) nor 1
    (opensm's default), and the three must differ. Values are never echoed. A preview without
    the real secrets (values that are no key at all) is let through; `pulumi up` never is."""
    problems = []
    fix = "pulumi config set --secret {} 0x$(openssl rand -hex 8)  (and bump " \
        "credentials.fabricKeysVersion)"
    for key, value in values.items():
        if _FABRIC_KEY.match(value):
            if int(value, 16) in (0, 1):
                problems.append(Problem(f"(secret) {PROJECT}:{key}", None,
                                        "is 0 or 1 (no key, or opensm's default; value hidden)",
                                        fix.format(key)))
        elif strict:
            problems.append(Problem(f"(secret) {PROJECT}:{key}", None,
                                    "is not a 64-bit hex key like 0x1a2b3c4d5e6f7081 (value "
                                    "hidden)", fix.format(key)))
    keys = [int(v, 16) for v in values.values() if _FABRIC_KEY.match(v)]
    if len(keys) == len(values) and len(set(keys)) < len(keys):
        problems.append(Problem(f"(secret) {PROJECT}:{'/'.join(values)}", None,
                                "share a value: one leaked key would then open all three",
                                "give each its own value (openssl rand -hex 8)"))
    return problems
