"""hostsim, the simulated data centre's SSH server (tools/datacentre), against the real OpenSSH
client: each host on its own loopback address with its own pinned ed25519 key, public-key
login for one user, commands run in the host's own bubblewrap root with stdin, stdout, stderr
and the exit status carried through, env requests refused and logged, one log line per command
(never its stdin), loopback addresses only, and a clean stop on SIGTERM."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.hostsim import (
    build_hostsim,
    free_port,
    known_host,
    sandbox_prefix,
    serve,
    stderr_log,
)
from support.sandbox import unavailable

from e2e.keys import keygen

SSH = "/usr/bin/ssh"
# slow: it needs a built tool (the first run compiles hostsim, half a minute), as the marker
# says in pyproject.toml; with hostsim cached the module takes seconds.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not Path(SSH).is_file() or shutil.which("ssh-keygen") is None or unavailable() is not None,
    reason=f"needs the OpenSSH client and bubblewrap: {unavailable() or 'openssh-client'}")]

USER = "ubuntu"
# Generous: a loaded two-core machine can take seconds per connection.
TIMEOUT = 120
SECRET = "s3cret-token-8f2a"  # stdin that must never reach a log
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


@dataclass
class Host:
    name: str
    address: str
    port: int
    root: Path  # its /host
    public_key: str  # its host key's public half
    calls: Path


@dataclass
class Datacentre:
    tmp: Path
    spec: Path
    hosts: dict[str, Host]
    client_key: Path
    known_hosts: Path
    order: Path

    def ssh(self, host: str, command: str, *, stdin: str | None = None, user: str = USER,
            key: Path | None = None, known_hosts: Path | None = None,
            options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        argv = self.ssh_argv(host, *options, user=user, key=key, known_hosts=known_hosts)
        return subprocess.run([*argv, command], input=stdin or "", capture_output=True,
                              text=True, timeout=TIMEOUT)

    def ssh_argv(self, host: str, *options: str, user: str = USER, key: Path | None = None,
                 known_hosts: Path | None = None) -> list[str]:
        """`ssh ... user@address`, the command left to add: the options the brief for the e2e
        gives, the host key pinned."""
        h = self.hosts[host]
        return [SSH, "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                "-o", f"UserKnownHostsFile={known_hosts or self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=60", *options,
                "-p", str(h.port), "-i", str(key or self.client_key), f"{user}@{h.address}"]

    def calls(self, host: str) -> list[dict[str, Any]]:
        return _lines(self.hosts[host].calls)

    def orders(self) -> list[dict[str, Any]]:
        return _lines(self.order)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def make_datacentre(tmp: Path, names: tuple[str, ...] = ("gpu-node-01", "gpu-node-02")
                    ) -> Datacentre:
    client_key = tmp / "client_ed25519"
    authorized = tmp / "authorized_keys"
    authorized.write_text(keygen(client_key, "pulumi@deployer") + "\n")
    hosts: dict[str, Host] = {}
    spec_hosts = []
    known = ""
    for i, name in enumerate(names, start=1):
        address = f"127.0.77.{i}"
        port = free_port(address)
        root = tmp / "hosts" / name
        root.mkdir(parents=True)
        (root / "hostname").write_text(name + "\n")
        host_key = tmp / f"{name}_ssh_host_ed25519_key"
        public = keygen(host_key, f"root@{name}")
        known += known_host(address, port, public)
        hosts[name] = Host(name, address, port, root, public, tmp / f"{name}.calls.log")
        spec_hosts.append({"name": name, "address": address, "port": port,
                           "hostKey": str(host_key), "authorizedKeys": str(authorized),
                           "user": USER, "exec": sandbox_prefix(root),
                           "callsLog": str(hosts[name].calls),
                           # /host/nologin, as /run/nologin is to sshd's pam_nologin
                           "nologinFile": str(root / "nologin")})
    known_hosts = tmp / "known_hosts"
    known_hosts.write_text(known)
    spec = tmp / "spec.json"
    order = tmp / "order.log"
    spec.write_text(json.dumps({"hosts": spec_hosts, "order": str(order)}, indent=2))
    return Datacentre(tmp, spec, hosts, client_key, known_hosts, order)


@pytest.fixture
def dc(tmp_path: Path) -> Iterator[Datacentre]:
    centre = make_datacentre(tmp_path)
    with serve(centre.spec) as proc:
        yield centre
    assert proc.returncode == 0, stderr_log(centre.spec).read_text()


def test_a_command_runs_on_its_host_with_stdin_stdout_stderr_and_exit_status(
        dc: Datacentre) -> None:
    for name in dc.hosts:
        done = dc.ssh(name, "cat /host/hostname; cat; echo err >&2; exit 3", stdin="hello")
        assert (done.returncode, done.stdout, done.stderr) == (3, f"{name}\nhello", "err\n")
    # A login environment, not hostsim's own.
    done = dc.ssh("gpu-node-01", 'echo "$USER $HOME"; set -- $SSH_CONNECTION; echo "$3 $4"; pwd')
    port = dc.hosts["gpu-node-01"].port
    assert done.stdout.splitlines() == [f"{USER} /home/{USER}", f"127.0.77.1 {port}", "/host"]


def test_hosts_are_isolated(dc: Datacentre) -> None:
    assert dc.ssh("gpu-node-01", "echo mine > /host/only-here").returncode == 0
    done = dc.ssh("gpu-node-02", "ls /host; test -e /host/only-here")
    assert (done.returncode, done.stdout) == (1, "hostname\n")
    assert (dc.hosts["gpu-node-01"].root / "only-here").read_text() == "mine\n"
    # Nothing outside its root is writable, and it has no network.
    done = dc.ssh("gpu-node-01", "touch /usr/x 2>/dev/null || echo read-only; "
                                 "tail -n +3 /proc/net/dev | cut -d: -f1")
    assert done.stdout.split() == ["read-only", "lo"], done.stdout + done.stderr


def test_each_host_serves_its_own_pinned_key(dc: Datacentre) -> None:
    one, two = dc.hosts["gpu-node-01"], dc.hosts["gpu-node-02"]
    assert dc.ssh("gpu-node-01", "true").returncode == 0
    # gpu-node-02's key pinned for gpu-node-01's address: the client must refuse.
    wrong = dc.tmp / "known_hosts.wrong"
    wrong.write_text(known_host(one.address, one.port, two.public_key))
    done = dc.ssh("gpu-node-01", "touch /host/ran", known_hosts=wrong)
    assert done.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in done.stderr, done.stderr
    assert not (one.root / "ran").exists()


def test_only_an_authorized_key_for_the_user_logs_in(dc: Datacentre) -> None:
    stranger = dc.tmp / "stranger_ed25519"
    keygen(stranger, "stranger")
    for done in (dc.ssh("gpu-node-01", "touch /host/ran", key=stranger),
                 dc.ssh("gpu-node-01", "touch /host/ran", user="root")):
        assert done.returncode == 255
        # Only publickey is offered: no password, no keyboard-interactive.
        assert "Permission denied (publickey)." in done.stderr, done.stderr
    assert not (dc.hosts["gpu-node-01"].root / "ran").exists()
    assert dc.calls("gpu-node-01") == []


def test_a_host_going_down_refuses_logins_until_it_is_up_again(dc: Datacentre) -> None:
    # `shutdown -r +1` writes /run/nologin: from then on sshd lets no user but root log in,
    # so whatever connects next waits for the boot instead of running on the old one.
    done = dc.ssh("gpu-node-01", "echo 'System is going down.' > /host/nologin")
    assert done.returncode == 0
    refused = dc.ssh("gpu-node-01", "touch /host/ran")
    assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused.stderr
    assert not (dc.hosts["gpu-node-01"].root / "ran").exists()
    assert dc.ssh("gpu-node-02", "true").returncode == 0  # another host is not going down
    (dc.hosts["gpu-node-01"].root / "nologin").unlink()  # the boot clears /run
    assert dc.ssh("gpu-node-01", "touch /host/ran").returncode == 0


def test_env_requests_are_refused_and_logged(dc: Datacentre) -> None:
    done = dc.ssh("gpu-node-01", 'echo "FOO=${FOO-unset}"', options=("-o", "SetEnv=FOO=bar"))
    assert (done.returncode, done.stdout) == (0, "FOO=unset\n")
    [call] = dc.calls("gpu-node-01")
    assert call["envRefused"] == ["FOO"]
    # The name is logged, never the value.
    assert "FOO" in stderr_log(dc.spec).read_text()
    assert "bar" not in dc.order.read_text() + stderr_log(dc.spec).read_text()


def test_calls_and_order_logs(dc: Datacentre) -> None:
    runs = [("gpu-node-01", "wc -c", SECRET + "\n", 0),
            ("gpu-node-02", "cat >/dev/null; exit 4", "", 4),
            ("gpu-node-01", "cat >/dev/null && echo done", SECRET, 0)]
    for host, command, stdin, code in runs:
        assert dc.ssh(host, command, stdin=stdin).returncode == code
    order = dc.orders()
    assert [(c["host"], c["command"], c["stdinBytes"], c["exit"], c["envRefused"])
            for c in order] == [(h, cmd, len(s), code, []) for h, cmd, s, code in runs]
    seqs = [c["seq"] for c in order]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(STAMP.match(c["start"]) and STAMP.match(c["end"]) for c in order), order
    # Each host's log holds its own lines, the same as in the order log.
    assert dc.calls("gpu-node-01") == [order[0], order[2]]
    assert dc.calls("gpu-node-02") == [order[1]]
    for log in (dc.order, *(h.calls for h in dc.hosts.values()), stderr_log(dc.spec)):
        assert SECRET not in log.read_text(), log


def test_many_sessions_at_once(dc: Datacentre) -> None:
    """The engine runs dozens of commands in parallel: on separate connections, and as sessions
    multiplexed on one connection per host (an OpenSSH ControlMaster)."""
    with tempfile.TemporaryDirectory(prefix="mux", dir="/tmp") as short:  # sun_path: 108 bytes
        masters = {name: subprocess.Popen(
            dc.ssh_argv(name, "-M", "-N", "-o", f"ControlPath={short}/{name}"),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name in dc.hosts}
        try:
            for name in dc.hosts:
                _wait_for(lambda n=name: Path(short, n).exists(), f"{name}'s master connection")
            jobs = [(name, i) for i in range(16) for name in dc.hosts]

            def one(job: tuple[str, int]) -> subprocess.CompletedProcess[str]:
                name, i = job  # odd ones through the master, even ones on their own connection
                mux = ("-o", "ControlMaster=no", "-o", f"ControlPath={short}/{name}")
                return dc.ssh(name, f'cat; echo {i}; set -- $SSH_CLIENT; echo "$2" >&2',
                              stdin=f"{name}:",
                              options=mux if i % 2 else ())

            with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
                results = list(pool.map(one, jobs))
        finally:
            for master in masters.values():
                master.terminate()
                master.wait(timeout=TIMEOUT)
    assert [(r.returncode, r.stdout) for r in results] == [
        (0, f"{name}:{i}\n") for name, i in jobs], [r.stderr for r in results if r.returncode]
    # The client's port: one per host through its master, a new one for each other command.
    ports = [(name, i % 2, int(r.stderr)) for (name, i), r in zip(jobs, results, strict=True)]
    for name in dc.hosts:
        assert len({p for n, odd, p in ports if n == name and odd}) == 1
        assert len({p for n, odd, p in ports if n == name and not odd}) == 8
    order = dc.orders()
    assert len(order) == len(jobs) and len({c["seq"] for c in order}) == len(jobs)


def test_a_client_that_goes_away_kills_its_command(dc: Datacentre) -> None:
    h = dc.hosts["gpu-node-01"]
    client = subprocess.Popen([*dc.ssh_argv("gpu-node-01"), "touch /host/started; sleep 600"],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: (h.root / "started").exists(), "the command to start")
    finally:
        client.kill()
        client.wait()
    _wait_for(lambda: bool(dc.calls("gpu-node-01")), "the command to be killed and logged")
    [call] = dc.calls("gpu-node-01")
    assert (call["signal"], call["exit"]) == ("KILL", 137)


def test_sigterm_lets_a_running_command_finish_then_exits_0(tmp_path: Path) -> None:
    centre = make_datacentre(tmp_path, ("gpu-node-01",))
    root = centre.hosts["gpu-node-01"].root
    with serve(centre.spec) as proc:
        with subprocess.Popen(
                [*centre.ssh_argv("gpu-node-01"), "touch /host/started; sleep 1; echo done"],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True) as client:
            _wait_for(lambda: (root / "started").exists(), "the command to start")
            proc.terminate()
            out, _ = client.communicate(timeout=TIMEOUT)
        assert (client.returncode, out) == (0, "done\n")
        assert proc.wait(timeout=TIMEOUT) == 0
    assert "stopping" in stderr_log(centre.spec).read_text()
    assert [c["exit"] for c in centre.calls("gpu-node-01")] == [0]


@pytest.mark.parametrize("address", ["10.1.2.3", "0.0.0.0", "::1", "::ffff:127.0.0.1",
                                     "localhost", "127.0.0.256"])
def test_an_address_beyond_loopback_exits_2_before_listening(tmp_path: Path,
                                                             address: str) -> None:
    spec = make_datacentre(tmp_path).spec
    doc = json.loads(spec.read_text())
    first = doc["hosts"][0]
    doc["hosts"][1]["address"] = address
    spec.write_text(json.dumps(doc))
    # The first host's port is taken: had hostsim listened before checking every address, it
    # would fail on that (exit 1) instead.
    with socket.socket() as taken:
        taken.bind((first["address"], first["port"]))
        taken.listen()
        done = subprocess.run([str(build_hostsim()), str(spec)], capture_output=True,
                              text=True, timeout=TIMEOUT)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert f'host "gpu-node-02": address "{address}"' in done.stderr, done.stderr
    assert "127.0.0.0/8" in done.stderr


# name -> (an edit of the first and second hosts, what the error must say)
BAD_SPECS: dict[str, tuple[Callable[[dict[str, Any], dict[str, Any]], None], str]] = {
    "duplicate name": (lambda a, b: b.update(name=a["name"]), 'host "gpu-node-01" is named twice'),
    "duplicate address and port": (lambda a, b: b.update(address=a["address"], port=a["port"]),
                                   'hosts "gpu-node-01" and "gpu-node-02" both use 127.0.77.1:'),
    "no sandbox": (lambda a, b: b.update(exec=[]), "exec (the sandbox's argv prefix) is empty"),
    "missing host key": (lambda a, b: b.update(hostKey="/nonexistent/key"), "/nonexistent/key"),
    "misspelt field": (lambda a, b: b.update(calls_log="calls.log"), 'unknown field "calls_log"'),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_a_bad_spec_exits_2(tmp_path: Path, case: str) -> None:
    edit, message = BAD_SPECS[case]
    spec = make_datacentre(tmp_path).spec
    doc = json.loads(spec.read_text())
    edit(*doc["hosts"])
    spec.write_text(json.dumps(doc))
    done = subprocess.run([str(build_hostsim()), str(spec)], capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert message in done.stderr, done.stderr


def _wait_for(condition: Any, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_switch_logs_its_admin_in_with_the_password_only(tmp_path: Path) -> None:
    # A switch's management CLI takes the admin's password (switchPassword), not a key.
    centre = make_datacentre(tmp_path, ("spine-01",))
    password = tmp_path / "switch-password"
    password.write_text("Sw1tch-pa55\n")
    spec = json.loads(centre.spec.read_text())
    (switch,) = spec["hosts"]
    switch.update(user="admin", passwordFile=str(password))
    del switch["authorizedKeys"]
    centre.spec.write_text(json.dumps(spec))
    askpass = tmp_path / "askpass"

    def login(given: str) -> subprocess.CompletedProcess[str]:
        askpass.write_text(f"#!/bin/sh\necho '{given}'\n")
        askpass.chmod(0o700)
        # ssh keeps the first value of an option: these go before ssh_argv's BatchMode=yes.
        ssh, *rest = centre.ssh_argv("spine-01", user="admin")
        argv = [ssh, "-o", "BatchMode=no", "-o", "PubkeyAuthentication=no",
                "-o", "PreferredAuthentications=password", "-o", "NumberOfPasswordPrompts=1",
                *rest]
        return subprocess.run([*argv, "cat /host/hostname"], capture_output=True, text=True,
                              timeout=TIMEOUT, stdin=subprocess.DEVNULL,
                              env={"PATH": "/usr/bin:/bin", "SSH_ASKPASS": str(askpass),
                                   "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"})

    with serve(centre.spec):
        ok = login("Sw1tch-pa55")
        assert ok.stdout == "spine-01\n", ok.stderr
        wrong = login("guess")
        assert wrong.returncode == 255 and "Permission denied (password)." in wrong.stderr
        # No key is accepted for it, even the client's.
        keyed = centre.ssh("spine-01", "true", user="admin")
        assert keyed.returncode == 255, keyed.stderr
    assert [c["command"] for c in centre.calls("spine-01")] == ["cat /host/hostname"]


def test_a_host_with_neither_keys_nor_password_is_refused(tmp_path: Path) -> None:
    centre = make_datacentre(tmp_path, ("gpu-node-01",))
    spec = json.loads(centre.spec.read_text())
    del spec["hosts"][0]["authorizedKeys"]
    centre.spec.write_text(json.dumps(spec))
    done = subprocess.run([str(build_hostsim()), str(centre.spec)], capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 2 and done.stdout == ""
    assert 'host "gpu-node-01": authorizedKeys or passwordFile is required' in done.stderr
