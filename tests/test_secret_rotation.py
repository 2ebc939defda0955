"""Rotating the SSH key and the passwords, as a reviewer and a host see it.

A rotation is a change of `credentials` in the stack file, not only of a CI secret: the preview
shows every command that re-runs with the new secret (the engine updates each, since the secret
is one of its inputs), refuses to swap to a key no host authorises yet, and the managed
authorized_keys, run for real in a sandbox, authorises the new key before the old one goes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.project import prod_raw, run_offline
from support.sandbox import Sandbox, unavailable

from components.model.fields import ConfigError
from components.planning.ssh_keys import authorized_keys_script, fingerprint
from components.wiring.loading import (
    fabric_key_problems,
    password_problems,
    ssh_key_problem,
    validate_cluster,
)

KEY = "gpu-cluster:cluster"
PROD_KEY = prod_raw()["credentials"]["sshPublicKey"]


def keypair(comment: str) -> tuple[str, str]:
    """(OpenSSH private key, public key line), as `ssh-keygen -t ed25519` writes them."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH).decode()
    return private, f"{public} {comment}"


NEW_PRIVATE, NEW_KEY = keypair("ops-2027@h100-prod")


def edit_credentials(project: Path, **changes: object) -> None:
    stack = project / "Pulumi.prod.yaml"
    doc = yaml.safe_load(stack.read_text())
    doc["config"][KEY]["credentials"].update(changes)
    stack.write_text(yaml.safe_dump(doc, sort_keys=False))


def preview(project: Path, status: int = 0) -> tuple[list[str], list[str], dict[str, str]]:
    """(impact lines, runbook steps, {resource name: action}) of a preview of the edited copy,
    which exits with `status`."""
    proc = run_offline(project, "preview")
    assert proc.returncode == status, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    impact = out[:out.index(next(x for x in out if x.startswith("Policy report")))]
    steps = [line.split(". ", 1)[1] for line in
             (project / "build/prod/runbook.txt").read_text().splitlines()
             if line.startswith("  ") and ". " in line and line.strip()[0].isdigit()]
    diff = yaml.safe_load((project / "build/prod/diff.json").read_text())
    return impact, steps, {c["name"]: c["action"] for c in diff}


def baseline(project: Path) -> None:
    proc = run_offline(project, "preview", "--render")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def key_commands(project: Path) -> set[str]:
    """Every command of the baseline rendering that logs in with the SSH key (the switches'
    take a password)."""
    return {p.stem for layer in (project / "rendered/prod").iterdir()
            for p in (layer / "command-remote-Command").glob("*.yaml")
            if "privateKey" in yaml.safe_load(p.read_text())["inputs"]["connection"]}


@pytest.mark.slow
def test_authorising_the_next_key_touches_only_the_key_lists(project: Path) -> None:
    baseline(project)
    edit_credentials(project, sshAuthorizedKeys=[NEW_KEY])
    impact, steps, changed = preview(project)
    hosts = [h["hostname"] for h in prod_raw()["hosts"]] + [f"gpu-node-{i:02d}" for i in range(8)]
    assert changed == {f"{h}-ssh-keys": "update" for h in hosts}
    assert impact == ["Impact: no cable, switch or node is touched; no running work is drained."]
    assert steps == []


@pytest.mark.slow
def test_swapping_to_an_authorised_key_reruns_every_ssh_command(project: Path) -> None:
    """pulumi-command holds the key in each command's `connection`; a new key is an update of
    every one, which runs its create again (provider/pkg/provider/remote/commandController.go)."""
    edit_credentials(project, sshAuthorizedKeys=[NEW_KEY])
    baseline(project)
    edit_credentials(project, sshPublicKey=NEW_KEY, sshAuthorizedKeys=[PROD_KEY])
    impact, steps, changed = preview(project)
    everyone = key_commands(project)
    assert set(changed) == everyone and set(changed.values()) == {"update"}
    old, new = fingerprint(PROD_KEY), fingerprint(NEW_KEY)
    assert impact[1] == (f"  SSH key rotation {old} -> {new}: {len(everyone)} commands re-run "
                         "on 13 hosts with the new secret")
    assert "outage: none expected" in impact[-1]
    assert steps[0].startswith(f"SSH key rotation {old} -> {new}: `pulumi up` logs in with the "
                               f"new key and re-runs every command that holds it "
                               f"({len(everyone)} commands on 13 hosts)")
    # Only how the commands log in changes, not what they run: no host preparation step, no
    # opensm restart, no kubelet roll (which would drain every node), no fabric test after.
    assert steps == steps[:1]
    runbook = (project / "build/prod/runbook.txt").read_text()
    for unasked in ("drain", "opensm", "kubelet", "NCCL", "afterwards"):
        assert unasked not in runbook, unasked
    assert "nodes drained: 0" in "\n".join(impact)


@pytest.mark.slow
def test_swapping_to_a_key_no_host_authorises_is_refused(project: Path) -> None:
    baseline(project)
    edit_credentials(project, sshPublicKey=NEW_KEY)
    # Refused: the preview fails (exit 4), so a CI gate on it stops the change.
    impact, steps, _ = preview(project, status=4)
    assert impact[1] == (f"  SSH key rotation {fingerprint(PROD_KEY)} -> {fingerprint(NEW_KEY)}: "
                         "REFUSED, no host authorises the new key yet (authorise it first)")
    assert steps[0].startswith("REFUSED SSH key rotation")


@pytest.mark.slow
def test_a_new_switch_password_reruns_the_switch_commands(project: Path) -> None:
    baseline(project)
    edit_credentials(project, switchPasswordVersion=2)
    impact, steps, changed = preview(project)
    switches = sorted(prod_raw()["fabric"]["switchManagementIps"])
    assert changed == {f"{sw}-config": "update" for sw in switches}
    assert impact[1] == (f"  switch password rotation version 1 -> version 2: {len(switches)} "
                         f"commands re-run on {len(switches)} hosts with the new secret")
    assert steps[0].startswith("switch password rotation (version 1 -> version 2): set the new "
                               "password on every switch first")


@pytest.mark.slow
def test_a_new_bmc_password_reruns_the_redfish_settings(project: Path) -> None:
    baseline(project)
    edit_credentials(project, bmcPasswordVersion=2)
    _, steps, changed = preview(project)
    assert set(changed.values()) == {"update"}
    assert changed and all(name.endswith("-bmc") for name in changed)
    assert steps[0].startswith("BMC password rotation (version 1 -> version 2)")


@pytest.mark.slow
def test_new_fabric_keys_restart_only_the_subnet_managers_in_a_window(project: Path) -> None:
    baseline(project)
    edit_credentials(project, fabricKeysVersion=2)
    impact, steps, changed = preview(project)
    sms = [s["host"] for s in prod_raw()["fabric"]["subnetManagers"]]
    # The standby starts again (rejoin) only after the master has the new SM_Key.
    assert changed == {**{f"{h}-opensm": "update" for h in sms},
                       "sm-02-opensm-rejoin": "replace"}
    assert impact[1] == ("  subnet-manager keys rotation version 1 -> version 2: "
                         f"{len(sms)} commands re-run on {len(sms)} hosts with the new secret")
    assert steps[0].startswith("subnet-manager keys rotation (version 1 -> version 2), in a "
                               "maintenance window")
    assert "guid2mkey" in steps[0]


# ---------------------------------------------------------------- the check at `pulumi up`

def cluster(**credentials: object):
    raw = prod_raw()
    raw["credentials"].update(credentials)
    return validate_cluster(raw, Path(__file__).resolve().parent.parent)


def test_up_refuses_a_private_key_that_is_not_the_declared_one() -> None:
    problem = ssh_key_problem(cluster(), NEW_PRIVATE, strict=True)
    assert problem is not None
    assert problem.value == fingerprint(NEW_KEY)
    assert fingerprint(PROD_KEY) in problem.message
    assert NEW_PRIVATE not in problem.render()


def test_up_accepts_the_declared_key_and_refuses_a_non_key() -> None:
    assert ssh_key_problem(cluster(sshPublicKey=NEW_KEY), NEW_PRIVATE, strict=True) is None
    refused = ssh_key_problem(cluster(), "not a key", strict=True)
    assert refused is not None and "not an unencrypted OpenSSH" in refused.message
    # A preview without the real secret (offline: a placeholder) is let through.
    assert ssh_key_problem(cluster(), "offline-secret-sshPrivateKey", strict=False) is None


def test_production_must_name_its_key_and_lists_each_key_once() -> None:
    raw = prod_raw()
    del raw["credentials"]["sshPublicKey"]
    with pytest.raises(ConfigError) as err:
        validate_cluster(raw, Path(__file__).resolve().parent.parent)
    assert "credentials.sshPublicKey: is required in production" in str(err.value)
    with pytest.raises(ConfigError) as err:
        cluster(sshAuthorizedKeys=[PROD_KEY.replace("ops@h100-prod", "again")])
    assert "credentials.sshAuthorizedKeys[0]: is the key of credentials.sshPublicKey" \
        in str(err.value)


# ---------------------------------------------------------------- on the host

@pytest.fixture
def host(tmp_path: Path) -> Sandbox:
    if (why := unavailable()) is not None:
        pytest.skip(why)
    sb = Sandbox(tmp_path / "gpu-node-00", "gpu-node-00")
    (sb.root / "etc/passwd").write_text(
        f"root:x:0:0:root:/root:/bin/bash\nubuntu:x:{_uid()}:{_uid()}::/home/ubuntu:/bin/bash\n")
    (sb.root / "home/ubuntu/.ssh").mkdir(parents=True)
    return sb


def _uid() -> int:
    import os

    return os.getuid()


def authorized(sb: Sandbox) -> list[str]:
    return (sb.root / "home/ubuntu/.ssh/authorized_keys").read_text().splitlines()


def test_the_key_list_authorises_before_it_drops(host: Sandbox) -> None:
    """The OS installer authorised the first key; someone added a personal key by hand. The
    stack adopts the first, authorises the next, swaps, then drops the old one, and never
    touches the personal key."""
    _, personal = keypair("alice@laptop")
    ssh = host.root / "home/ubuntu/.ssh/authorized_keys"
    ssh.write_text(f"{PROD_KEY}\n{personal}\n")

    def apply(*keys: str) -> str:
        run = host.run(authorized_keys_script("ubuntu", keys))
        assert run.returncode == 0, run.explain()
        return run.stdout

    apply(PROD_KEY)
    assert authorized(host) == [personal, PROD_KEY]
    assert "unchanged" in apply(PROD_KEY)  # a second run writes nothing
    apply(PROD_KEY, NEW_KEY)  # 1. authorise the next key
    assert authorized(host) == [personal, PROD_KEY, NEW_KEY]
    apply(NEW_KEY, PROD_KEY)  # 2. swap: both still accepted
    assert sorted(authorized(host)) == sorted([personal, PROD_KEY, NEW_KEY])
    out = apply(NEW_KEY)  # 3. drop the old one
    assert authorized(host) == [personal, NEW_KEY]
    assert "removed: ssh-ed25519 key(s) no longer listed" in out
    assert oct(ssh.stat().st_mode & 0o777) == "0o600"


def test_the_key_list_never_empties_the_file(host: Sandbox) -> None:
    run = host.run(authorized_keys_script("ubuntu", ()))
    assert run.returncode == 1 and "refusing to lock every key out" in run.stderr


# ---------------------------------------------------------------- the fabric's keys at `pulumi up`

GOOD_KEYS = {"fabricMKey": "0x1f2e3d4c5b6a7988", "fabricSmKey": "0x2a3b4c5d6e7f8091",
             "fabricSaKey": "0x3c4d5e6f708192a3"}


def test_up_takes_three_distinct_64_bit_keys() -> None:
    assert fabric_key_problems(GOOD_KEYS, strict=True) == []


@pytest.mark.parametrize(("key", "value", "says"), [
    ("fabricSmKey", "0x1", "is 0 or 1"),  # opensm's default: every stock opensm holds it
    ("fabricMKey", "0x0", "is 0 or 1"),  # no M_Key: every port open to Sets
    ("fabricSaKey", "0x12345678901234567", "is not a 64-bit hex key"),  # 17 digits
    ("fabricSaKey", "c0ffee", "is not a 64-bit hex key"),
])
def test_up_refuses_a_weak_or_malformed_key_without_echoing_it(key: str, value: str,
                                                                 says: str) -> None:
    problems = fabric_key_problems(dict(GOOD_KEYS, **{key: value}), strict=True)
    assert [p.path for p in problems] == [f"(secret) gpu-cluster:{key}"]
    assert says in problems[0].message and value not in problems[0].render()
    assert "openssl rand -hex 8" in problems[0].fix


def test_up_refuses_keys_that_share_a_value_and_preview_lets_placeholders_through() -> None:
    shared = dict(GOOD_KEYS, fabricSaKey=GOOD_KEYS["fabricMKey"])
    assert ["share a value" in p.message for p in fabric_key_problems(shared, True)] == [True]
    offline = {k: f"offline-secret-{k}#version 1" for k in GOOD_KEYS}
    assert fabric_key_problems(offline, strict=False) == []
    assert len(fabric_key_problems(offline, strict=True)) == 3


def test_a_device_password_its_consumers_cannot_carry_is_refused_without_its_value() -> None:
    """A line break ends curl's `user = "…"` config line (the BMC) and the switch's login
    input: refused by key, the value never shown; printable passwords (quotes and backslashes
    included, which the BMC command escapes) pass."""
    problems = password_problems({"bmcPassword": "hunter2\nX-Injected: 1",
                                  "switchPasswords.leaf-su1-r0-1": "s3cr3t\tzz",
                                  "switchPassword": 'quote" back\\slash $(x)'})
    assert [p.path for p in problems] == ["(secret) gpu-cluster:bmcPassword",
                                          "(secret) gpu-cluster:switchPasswords.leaf-su1-r0-1"]
    text = " ".join(f"{p.message} {p.fix} {p.value}" for p in problems)
    assert "hunter2" not in text and "s3cr3t" not in text
    assert "pulumi config set --secret --path 'bmcPassword'" in problems[0].fix
